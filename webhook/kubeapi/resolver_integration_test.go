package kubeapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/noetl/ehdb-election/internal/testcluster"
	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

// TestBindingsAgainstTheAPIServer judges the compliant writer with the real resolver against
// real RBAC: any binding that gives the ServiceAccount's token get, create and update on leases
// passes, whatever its shape, and anything less fails.
func TestBindingsAgainstTheAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ctx := context.Background()
	leaseVerbs := []string{"get", "list", "watch", "create", "update"}

	cases := []struct {
		name  string
		bind  func(t *testing.T, ns string)
		unmet []webhook.Reason
		warn  bool // the default SA may update leases
	}{
		{name: "unbound", bind: func(*testing.T, string) {}, unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}},
		{name: "bound via Role", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "Role", leaseVerbs...)
			binding(t, cs, ns, "Role", rbacv1.Subject{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: ns})
		}},
		{name: "bound via ClusterRole in a RoleBinding", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "ClusterRole", leaseVerbs...)
			binding(t, cs, ns, "ClusterRole", rbacv1.Subject{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: ns})
		}},
		{name: "bound via ClusterRoleBinding", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "ClusterRole", leaseVerbs...)
			binding(t, cs, "", "ClusterRole", rbacv1.Subject{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: ns})
		}},
		{name: "bound via the namespace's SA group: passes, but default may update leases", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "Role", leaseVerbs...)
			binding(t, cs, ns, "Role", rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts:" + ns, APIGroup: "rbac.authorization.k8s.io"})
		}, warn: true},
		{name: "bound for get and watch only", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "Role", "get", "watch")
			binding(t, cs, ns, "Role", rbacv1.Subject{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: ns})
		}, unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}},
		{name: "bound to default only", bind: func(t *testing.T, ns string) {
			role(t, cs, ns, "Role", leaseVerbs...)
			binding(t, cs, ns, "Role", rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: ns})
		}, unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}, warn: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := c.NewNamespace(t)
			if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.bind(t, ns)
			s := wt.ReferenceWriter(ns, wt.Armed(), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA))
			w, err := webhook.DecodeWorkload(gvkSTS, ns, mustJSON(t, s))
			if err != nil {
				t.Fatal(err)
			}
			in := webhook.Input{Operation: admissionv1.Create, Object: w}
			r := webhook.NewAPIResolver(kubeapi.New(cs), 0)
			// The RBAC authorizer sees new bindings through its informers: allow it a moment.
			var d webhook.Decision
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, _ = webhook.Evaluate(ctx, r, in, webhook.Policy{}, time.Now())
				got := reasons(d)
				if (slices.Equal(got, tc.unmet) && hasDefaultWarning(d) == tc.warn) || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if got := reasons(d); !slices.Equal(got, tc.unmet) || hasDefaultWarning(d) != tc.warn {
				t.Fatalf("unmet %v warnings %q, want unmet %v default-warning %v\n%s", got, d.Warnings, tc.unmet, tc.warn, d.Message())
			}
		})
	}
}

func reasons(d webhook.Decision) []webhook.Reason {
	var out []webhook.Reason
	for _, u := range d.Unmet {
		out = append(out, u.Reason)
	}
	return out
}

func hasDefaultWarning(d webhook.Decision) bool {
	return slices.ContainsFunc(d.Warnings, func(w string) bool {
		return strings.Contains(w, "default ServiceAccount") && strings.Contains(w, "may update leases")
	})
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// role creates a Role in ns, or a ClusterRole named after ns, granting verbs on leases.
func role(t *testing.T, cs kubernetes.Interface, ns, kind string, verbs ...string) {
	t.Helper()
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}}
	var err error
	if kind == "Role" {
		_, err = cs.RbacV1().Roles(ns).Create(context.Background(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: ns}, Rules: rules}, metav1.CreateOptions{})
	} else {
		name := "leases-" + ns
		_, err = cs.RbacV1().ClusterRoles().Create(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if err != nil {
		t.Fatal(err)
	}
}

// binding binds the role made by role to subject: a RoleBinding in ns, or a ClusterRoleBinding
// when ns is empty (then the ClusterRole is the one named after the subject's namespace).
func binding(t *testing.T, cs kubernetes.Interface, ns, kind string, subject rbacv1.Subject) {
	t.Helper()
	ref := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: "leases"}
	if kind == "ClusterRole" {
		owner := ns
		if owner == "" {
			owner = subject.Namespace
		}
		ref.Name = "leases-" + owner
	}
	var err error
	if ns != "" {
		_, err = cs.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: ns},
			RoleRef: ref, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
	} else {
		name := fmt.Sprintf("leases-%s", subject.Namespace)
		_, err = cs.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: ref, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
		t.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestBindingListsAreBoundedOnTheAPIServer: a namespace admin decides how large a namespace's
// RoleBindings are (the twenty-fifth red team made two of 30,000 subjects each), and every RBAC
// review lists them fresh. A list larger than kubeapi.MaxBindingListBytes is an error the review
// refuses on ("could not verify"), read no further than that; a list under it is read whole.
func TestBindingListsAreBoundedOnTheAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ctx := context.Background()
	ns := c.NewNamespace(t)
	// Each binding is about 1.4 MB as JSON (below etcd's request limit); 13 of them pass the bound.
	const perBinding = 30000
	n := kubeapi.MaxBindingListBytes/(perBinding*45) + 1
	for j := range n {
		subjects := make([]rbacv1.Subject, perBinding)
		for i := range subjects {
			subjects[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: fmt.Sprintf("made-up-%02d-%05d", j, i)}
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%02d", j)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}, Subjects: subjects}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("RoleBinding %d of %d: %v", j+1, n, err)
		}
		f := webhook.NewAPIResolver(kubeapi.New(cs), 2).Resolve(ctx, webhook.Query{Namespace: ns, Bindings: []string{ns}})
		got := f.Bindings[ns]
		if j < 2 && (got.Err != nil || len(got.Items) != j+1) {
			t.Fatalf("%d bindings: %d read, %v", j+1, len(got.Items), got.Err)
		}
		if j == n-1 && (got.Err == nil || !strings.Contains(got.Err.Error(), "more than 16 MiB")) {
			t.Fatalf("%d bindings of %d subjects: want an error past the bound, got %d items, %v", n, perBinding, len(got.Items), got.Err)
		}
	}
}
