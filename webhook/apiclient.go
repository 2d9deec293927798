package webhook

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
)

// APIClient is what an APIResolver asks the API server, one request per call. Package
// webhook/kubeapi makes one of a client-go clientset. It is an interface rather than the
// clientset because every typed client-go client links kube-openapi and structured-merge-diff
// (some 200,000 coverage counters), which the guard's judgement never uses and its fuzzer
// would pay for on every input.
type APIClient interface {
	GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
	GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	CreateSubjectAccessReview(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)
	ListClusterRoleBindings(ctx context.Context) (*rbacv1.ClusterRoleBindingList, error)
	// ListRoleBindings lists one namespace's RoleBindings, or every namespace's for "".
	ListRoleBindings(ctx context.Context, namespace string) (*rbacv1.RoleBindingList, error)
	GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error)
	ListClusterRoles(ctx context.Context) (*rbacv1.ClusterRoleList, error)
	GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	// ListValidatingAdmissionPolicies and ListValidatingAdmissionPolicyBindings list those with
	// the label selector given (the chart's lease guards).
	ListValidatingAdmissionPolicies(ctx context.Context, selector string) (*admissionregistrationv1.ValidatingAdmissionPolicyList, error)
	ListValidatingAdmissionPolicyBindings(ctx context.Context, selector string) (*admissionregistrationv1.ValidatingAdmissionPolicyBindingList, error)
	// CoreREST is the core group's REST client, through which ConfigMaps are read as a stream
	// that keeps only the keys a review needs; nil for a client without one (a fake clientset),
	// whose ConfigMaps are then read whole with GetConfigMap.
	CoreREST() *rest.RESTClient
}
