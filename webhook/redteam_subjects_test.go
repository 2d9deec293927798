package webhook_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// madeUpSubjects are n ServiceAccount subjects no workload runs as (prefix apart).
func madeUpSubjects(prefix string, n int) []rbacv1.Subject {
	out := make([]rbacv1.Subject, n)
	for i := range out {
		out[i] = saSubject(fmt.Sprintf("%s%06d", prefix, i))
	}
	return out
}

// The twenty-fifth red team (team B) bound ClusterRole edit, as a namespace admin, to 60,000
// made-up accounts in two RoleBindings; a careless cluster admin then took the lease rule from
// the piece edit aggregates. The review took 20 s (a quadratic walk of the subjects), the API
// server stopped waiting at 5 s, and the clusterrbac entry's Ignore admitted the change although
// it took an armed writer's lease access. The walk is now linear and bounded: the same change is
// judged (refused, for the writer it names), a binding edit of 30,000 subjects is judged, and a
// change whose bindings name more subjects than the guard judges is "could not verify".
func TestRBACReviewsOfManySubjects(t *testing.T) {
	edit := &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{leaseRule}}
	narrowed := edit.DeepCopy()
	narrowed.Rules = nil
	big := func(name string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
		return roleBinding(name, "ClusterRole", "leases", subjects...)
	}
	cases := []struct {
		name     string
		bindings []rbacv1.RoleBinding
		kind     metav1.GroupVersionKind
		objName  string
		obj, old runtime.Object
		allowed  bool
		msg      string
	}{
		{"the role narrowed under 60,000 subjects and the writer", []rbacv1.RoleBinding{
			*big("big-0", madeUpSubjects("a", 30000)...), *big("big-1", append(madeUpSubjects("b", 30000), saSubject("crb-writer"))...)},
			crKind, "leases", narrowed, edit, false, "crb-writer"},
		{"the role narrowed under 60,000 subjects, none of them a writer's", []rbacv1.RoleBinding{
			*big("big-0", madeUpSubjects("a", 30000)...), *big("big-1", madeUpSubjects("b", 30000)...)},
			crKind, "leases", narrowed, edit, true, ""},
		{"a binding of 30,000 subjects given another 30,000", nil,
			rbKind, "big-0", big("big-0", madeUpSubjects("b", 30000)...), big("big-0", madeUpSubjects("a", 30000)...), true, ""},
		{"a binding of 30,000 subjects given another 30,000 and the writer's taken", nil,
			rbKind, "big-0", big("big-0", madeUpSubjects("b", 30000)...), big("big-0", append(madeUpSubjects("a", 30000), saSubject("crb-writer"))...), false, "crb-writer"},
		{"more subjects than the guard judges", []rbacv1.RoleBinding{
			*big("big-0", madeUpSubjects("a", 140000)...), *big("big-1", madeUpSubjects("b", 140000)...)},
			crKind, "leases", narrowed, edit, false, "could not verify"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.RoleBindings = append(cluster.RoleBindings, tc.bindings...)
			cluster.ClusterRoleBindings = nil // the writer's access comes through the bindings here
			writer := sts(compliant()...)
			writer.Spec.Template.Spec.ServiceAccountName = "crb-writer"
			// The review's own bounds decide these rows, not a deadline: a 4 s one ran out under the
			// race detector on a loaded CI machine (CI run 66).
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, writer), Clock: clocktesting.NewFakePassiveClock(now),
				ClusterRoleScopes: []string{ns}, LookupTimeout: 30 * time.Second}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, tc.kind, tc.objName, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %.600s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if tc.msg != "" && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Errorf("the refusal does not say %q: %.600s", tc.msg, out.Response.Result.Message)
			}
		})
	}
}

// The twenty-fifth red team (team A): a Pod whose phase is Succeeded (restartPolicy Never) that
// read a ConfigMap held its arming edit ("refusing to arm … on Pod …"), though a Pod in a terminal
// phase never starts a container again (the API server refuses any move out of it). Such a Pod is
// no reader and no user: nothing it runs can be armed or disarmed. A Pod still running is judged.
func TestAFinishedPodReadsNothing(t *testing.T) {
	cm := func(fencing string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
			Data: map[string]string{"fencing": fencing}}
	}
	reader := func(phase corev1.PodPhase) *corev1.Pod {
		p := barePod(sts(wt.ServiceAccount(wt.WriterSA), wt.ElectionOn(), envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))), "done-9")
		p.Spec.NodeName, p.Spec.RestartPolicy = "node-1", corev1.RestartPolicyNever
		p.Status.Phase = phase
		return saAdmitted(p)
	}
	for _, tc := range []struct {
		phase   corev1.PodPhase
		allowed bool
	}{
		{corev1.PodSucceeded, true},
		{corev1.PodFailed, true},
		{corev1.PodRunning, false},
		{corev1.PodPending, false},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			readers := fakeReaders(t, reader(tc.phase))
			h := &webhook.Handler{Resolver: rbacCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Readers: readers, Accounts: readers, Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", configMapReview(t, admissionv1.Update, cmGVK, cm("enforce"), cm("shadow")))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("the ConfigMap arming it: allowed=%v, want %v: %.500s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
		})
	}
}

// The twenty-fifth red team (team B #3): a namespace's view or edit bound to every ServiceAccount
// (or every authenticated user) could not be unbound, even by a cluster admin, while the webhook
// served: the webhook's account is in those groups, and the guard never asked whether its own Role
// granted it the same reads. A ClusterRoleBinding of such a role is kept only when the guard
// would lose a read in a namespace it guards.
func TestTheGuardKeepsOnlyReadsItWouldLose(t *testing.T) {
	self := saSubject("ehdb-election-webhook")
	reads := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts", "configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
	}
	guardRole := mkRole("ehdb-election-webhook-guard", reads...)
	guardRB := roleBinding(guardRole.Name, "Role", guardRole.Name, self)
	view := rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "view"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "serviceaccounts", "pods"}, Verbs: []string{"get", "list", "watch"}}}}
	authenticated := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}
	crb := &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "view-everyone"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}, Subjects: []rbacv1.Subject{authenticated}}
	rbOfView := roleBinding("view-everyone", "ClusterRole", "view", authenticated)
	for _, tc := range []struct {
		name    string
		kind    metav1.GroupVersionKind
		old     runtime.Object
		guarded []string // Handler.ClusterRoleScopes
		ownRole bool     // the chart's Role and RoleBinding there
		allowed bool
	}{
		{"a RoleBinding of view to every authenticated user, the guard's Role granting the same", rbKind, rbOfView, []string{ns}, true, true},
		{"a RoleBinding of view to every authenticated user, the only grant of those reads", rbKind, rbOfView, []string{ns}, false, false},
		{"a ClusterRoleBinding of view to every authenticated user, the guard's Role granting the same in each guarded namespace", crbKind, crb, []string{ns}, true, true},
		{"a ClusterRoleBinding of view to every authenticated user, a guarded namespace without the guard's Role", crbKind, crb, []string{ns, "elsewhere"}, true, false},
		{"a ClusterRoleBinding of view to every authenticated user, every namespace guarded by namespaced Roles alone", crbKind, crb, []string{"*"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.ClusterRoles = append(cluster.ClusterRoles, view)
			if tc.kind == crbKind { // the binding under change, and no other grant of view
				cluster.ClusterRoleBindings = append(cluster.ClusterRoleBindings, *crb)
			} else {
				cluster.RoleBindings = append(cluster.RoleBindings, *rbOfView)
			}
			if tc.ownRole {
				cluster.Roles = append(cluster.Roles, *guardRole)
				cluster.RoleBindings = append(cluster.RoleBindings, *guardRB)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, sts(compliant()...)), Clock: clocktesting.NewFakePassiveClock(now),
				ClusterRoleScopes: tc.guarded}
			h.Self.Namespace, h.Self.Name = ns, self.Name
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Delete, tc.kind, "view-everyone", nil, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %.600s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, "the webhook's own ServiceAccount") {
				t.Fatalf("the refusal does not say it is the guard's own access: %s", raw)
			}
		})
	}
}
