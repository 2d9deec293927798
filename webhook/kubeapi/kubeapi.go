// Package kubeapi is the guard's webhook.APIClient over a client-go clientset: the one place
// the guard links client-go's typed clients.
package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

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

// MaxBindingListBytes bounds one list of bindings as the API server sends it: a namespace admin
// can make RoleBindings of 30,000 subjects each, as many as quota allows, and the guard reads them
// fresh on every RBAC review (the twenty-fifth red team bound edit to 60,000 made-up accounts). A
// larger list is an error (the review "could not verify"), never a webhook out of memory. 16 MiB
// is some 200,000 subjects, or 20,000 ordinary bindings.
const MaxBindingListBytes = 16 << 20

func (c client) ListClusterRoleBindings(ctx context.Context) (*rbacv1.ClusterRoleBindingList, error) {
	if rc := restOf(c.cs.RbacV1().RESTClient()); rc != nil {
		var l rbacv1.ClusterRoleBindingList
		return &l, listBounded(ctx, rc.Get().Resource("clusterrolebindings"), "ClusterRoleBindings", &l.Items)
	}
	return c.cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
}

func (c client) ListRoleBindings(ctx context.Context, namespace string) (*rbacv1.RoleBindingList, error) {
	if rc := restOf(c.cs.RbacV1().RESTClient()); rc != nil {
		var l rbacv1.RoleBindingList
		return &l, listBounded(ctx, rc.Get().Namespace(namespace).Resource("rolebindings"), "RoleBindings", &l.Items)
	}
	return c.cs.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
}

// restOf is the REST client behind a typed client, or nil for a fake clientset (which has none,
// and whose lists are then read whole).
func restOf(i rest.Interface) *rest.RESTClient {
	rc, _ := i.(*rest.RESTClient)
	return rc
}

// listBounded reads a list as JSON, at most MaxBindingListBytes of it, item by item: only one
// item's text is held at a time, never the whole list's (encoding/json's Decoder buffers one value
// whole, so the list is walked with Token and each item decoded on its own).
func listBounded[T any](ctx context.Context, req *rest.Request, what string, into *[]T) error {
	body, err := req.SetHeader("Accept", "application/json").Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	lr := &io.LimitedReader{R: body, N: MaxBindingListBytes + 1}
	if err := decodeItems(json.NewDecoder(lr), into); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("the %s are more than %d MiB, more than the guard reads for one review", what, MaxBindingListBytes>>20)
		}
		return fmt.Errorf("decoding the %s: %w", what, err)
	}
	if lr.N <= 0 {
		return fmt.Errorf("the %s are more than %d MiB, more than the guard reads for one review", what, MaxBindingListBytes>>20)
	}
	return nil
}

// decodeItems decodes the "items" of a JSON list object into into, skipping its other fields.
func decodeItems[T any](dec *json.Decoder, into *[]T) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		if key != "items" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		if err := expectDelim(dec, '['); err != nil {
			return err
		}
		for dec.More() {
			var item T
			if err := dec.Decode(&item); err != nil {
				return err
			}
			*into = append(*into, item)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
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
