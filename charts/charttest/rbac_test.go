package charttest

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// access is one row of the SubjectAccessReview matrix.
type access struct {
	verb, group, resource, ns, name string
	allowed                         bool
}

// serviceAccountUser is what the API server authenticates a ServiceAccount token as.
func serviceAccountUser(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

func checkAccess(t *testing.T, cs kubernetes.Interface, ns, sa string, rows []access) {
	t.Helper()
	user, groups := serviceAccountUser(ns, sa)
	for _, a := range rows {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.ns, Name: a.name,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != a.allowed {
			t.Errorf("%s: %s %s.%s %q in %q: allowed=%v, want %v (%s)", sa, a.verb, a.resource, a.group, a.name, a.ns, sar.Status.Allowed, a.allowed, sar.Status.Reason)
		}
	}
}

// TestRBACMatrix asks the real API server's authorizer what each account may do after a default
// install, and exercises the subtle rows with real tokens.
func TestRBACMatrix(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil))
	other := r.c.NewNamespace(t)
	ns, cs := r.ns, r.cs
	const coord = "coordination.k8s.io"
	tlsSecret := r.name + "-webhook-tls"
	vwc := r.name

	t.Run("writer", func(t *testing.T) {
		var rows []access
		for _, verb := range []string{"get", "list", "watch", "create", "update"} {
			rows = append(rows, access{verb, coord, "leases", ns, "ehdb-shard-00000000", true})
		}
		for _, verb := range []string{"delete", "deletecollection", "patch"} {
			rows = append(rows, access{verb, coord, "leases", ns, "ehdb-shard-00000000", false})
		}
		for _, verb := range []string{"get", "list", "create", "update"} {
			rows = append(rows, access{verb, coord, "leases", other, "ehdb-shard-00000000", false})
		}
		rows = append(rows,
			access{"get", "", "secrets", ns, tlsSecret, false},
			access{"list", "", "secrets", ns, "", false},
			access{"get", "", "configmaps", ns, "", false},
			access{"create", "", "pods", ns, "", false},
		)
		checkAccess(t, cs, ns, "noetl-cmdbus-writer", rows)
	})

	t.Run("namespace default account", func(t *testing.T) {
		checkAccess(t, cs, ns, "default", []access{
			{"update", coord, "leases", ns, "ehdb-shard-00000000", false},
			{"create", coord, "leases", ns, "", false},
			{"get", coord, "leases", ns, "ehdb-shard-00000000", false},
		})
	})

	t.Run("webhook", func(t *testing.T) {
		rows := []access{
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
			// ConfigMaps by name only; Leases read and watched (--watch-leases); ServiceAccounts and
			// RBAC read and watched (metadata only: any change drops the cached answers), never changed.
			{"get", "", "serviceaccounts", other, "noetl-cmdbus-writer", true},
			{"get", "", "configmaps", other, "writer-env", true},
			{"get", coord, "leases", other, "ehdb-shard-00000000", true},
			{"watch", "", "serviceaccounts", other, "", true},
			{"list", "rbac.authorization.k8s.io", "rolebindings", other, "", true},
			{"get", "rbac.authorization.k8s.io", "roles", other, "r", true},
			{"list", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", true},
			{"get", "rbac.authorization.k8s.io", "clusterroles", "", "c", true},
			{"delete", "rbac.authorization.k8s.io", "rolebindings", other, "r", false},
			{"update", "rbac.authorization.k8s.io", "clusterroles", "", "c", false},
			{"delete", "", "serviceaccounts", other, "noetl-cmdbus-writer", false},
			{"list", "", "configmaps", other, "", false},
			{"watch", "", "configmaps", other, "", false},
			{"watch", coord, "leases", other, "", true},
			{"list", coord, "leases", "", "", true},
			{"update", coord, "leases", ns, "ehdb-shard-00000000", false},
			{"create", "", "serviceaccounts", ns, "", false},
			// The workloads that may read a ConfigMap, watched (never changed).
			{"watch", "apps", "statefulsets", other, "", true},
			{"list", "batch", "cronjobs", other, "", true},
			{"update", "apps", "statefulsets", other, "w", false},
			// Pods and ReplicaSets too: their containers re-read a ConfigMap at every start (issue 17).
			{"watch", "", "pods", other, "", true},
			{"list", "apps", "replicasets", other, "", true},
			{"update", "", "pods", other, "p", false},
			// Its own Secret, by name only.
			{"get", "", "secrets", ns, tlsSecret, true},
			{"list", "", "secrets", ns, tlsSecret, true},
			{"watch", "", "secrets", ns, tlsSecret, true},
			{"update", "", "secrets", ns, tlsSecret, true},
			{"patch", "", "secrets", ns, tlsSecret, true},
			{"list", "", "secrets", ns, "", false},
			{"get", "", "secrets", ns, "other-secret", false},
			{"get", "", "secrets", other, tlsSecret, false},
			{"delete", "", "secrets", ns, tlsSecret, false},
			{"create", "", "secrets", ns, "", false},
			// Its own webhook configuration, by name only.
			{"get", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, true},
			{"list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, true},
			{"watch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, true},
			{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, true},
			{"patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, true},
			{"list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", false},
			{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "another-webhook", false},
			{"delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", vwc, false},
			{"create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", false},
			{"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", vwc, false},
			{"update", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "", false},
			{"create", "", "pods", ns, "", false},
		}
		checkAccess(t, cs, ns, r.name+"-webhook", rows)
	})

	// The same with real tokens: requests go through authentication and RBAC like a pod's would.
	t.Run("tokens", func(t *testing.T) {
		ctx := context.Background()
		writer := saClient(t, r, ns, "noetl-cmdbus-writer")
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-000000aa"}}
		if _, err := writer.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Errorf("writer cannot create its Lease: %v", err)
		}
		if _, err := writer.CoordinationV1().Leases(other).Create(ctx, lease, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("writer creating a Lease in another namespace: err = %v, want Forbidden", err)
		}
		if err := writer.CoordinationV1().Leases(ns).Delete(ctx, lease.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("writer deleting its Lease: err = %v, want Forbidden", err)
		}
		if _, err := writer.CoreV1().Secrets(ns).Get(ctx, tlsSecret, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("writer reading a Secret: err = %v, want Forbidden", err)
		}

		webhook := saClient(t, r, ns, r.name+"-webhook")
		byName := metav1.ListOptions{FieldSelector: "metadata.name=" + tlsSecret}
		if _, err := webhook.CoreV1().Secrets(ns).List(ctx, byName); err != nil {
			t.Errorf("webhook listing its Secret with the name selector: %v", err)
		}
		if _, err := webhook.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("webhook listing Secrets without the name selector: err = %v, want Forbidden", err)
		}
		vwcByName := metav1.ListOptions{FieldSelector: "metadata.name=" + vwc}
		if _, err := webhook.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, vwcByName); err != nil {
			t.Errorf("webhook listing its webhook configuration with the name selector: %v", err)
		}
		if _, err := webhook.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("webhook listing every webhook configuration: err = %v, want Forbidden", err)
		}
	})
}

func saClient(t *testing.T, r *testRelease, ns, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := r.c.ServiceAccountConfig(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestWebhookReadsOnlyWhereItGuards: with the default scope (the release namespace, plus any
// webhook.guardedNamespaces) the guard's reads are granted there and nowhere else.
func TestWebhookReadsOnlyWhereItGuards(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	team := r.c.NewNamespace(t)
	other := r.c.NewNamespace(t)
	// No isolation label and no "*": the chart's own scope (no object is sent to this webhook).
	r.install(t, map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{team}}})
	const coord = "coordination.k8s.io"
	var rows []access
	for _, ns := range []string{r.ns, team} {
		rows = append(rows,
			access{"get", "", "configmaps", ns, "writer-env", true},
			access{"get", "", "serviceaccounts", ns, "noetl-cmdbus-writer", true},
			access{"watch", coord, "leases", ns, "", true},
			access{"list", "apps", "deployments", ns, "", true},
			access{"watch", "batch", "jobs", ns, "", true},
		)
	}
	rows = append(rows,
		access{"get", "", "configmaps", other, "writer-env", false},
		access{"get", "", "serviceaccounts", other, "noetl-cmdbus-writer", false},
		access{"watch", coord, "leases", other, "", false},
		access{"list", coord, "leases", "", "", false},
		access{"list", "apps", "statefulsets", "", "", false},
		access{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
	)
	checkAccess(t, r.cs, r.ns, r.name+"-webhook", rows)
}
