// Package kubeapi is the guard's webhook.APIClient over a client-go clientset: the one place
// the guard links client-go's typed clients.
package kubeapi

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/noetl/ehdb-election/webhook"
)

// New returns cs as the guard's APIClient.
func New(cs kubernetes.Interface) webhook.APIClient { return client{cs} }

type client struct{ cs kubernetes.Interface }

func (c client) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return c.cs.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c client) GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	return c.cs.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c client) CreateSubjectAccessReview(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	return c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
}

func (c client) ListClusterRoleBindings(ctx context.Context) (*rbacv1.ClusterRoleBindingList, error) {
	return c.cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
}

func (c client) ListRoleBindings(ctx context.Context, namespace string) (*rbacv1.RoleBindingList, error) {
	return c.cs.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
}

func (c client) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	return c.cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
}

func (c client) ListClusterRoles(ctx context.Context) (*rbacv1.ClusterRoleList, error) {
	return c.cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
}

func (c client) GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error) {
	return c.cs.RbacV1().Roles(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c client) ListValidatingAdmissionPolicies(ctx context.Context, selector string) (*admissionregistrationv1.ValidatingAdmissionPolicyList, error) {
	return c.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: selector})
}

func (c client) ListValidatingAdmissionPolicyBindings(ctx context.Context, selector string) (*admissionregistrationv1.ValidatingAdmissionPolicyBindingList, error) {
	return c.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{LabelSelector: selector})
}

// CoreREST is nil for a clientset without a REST transport (the fake clientset).
func (c client) CoreREST() *rest.RESTClient {
	rc, ok := c.cs.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok {
		return nil
	}
	return rc
}
