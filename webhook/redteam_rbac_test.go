package webhook_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

const chartRole = "ehdb-shard-election"

var leaseRule = rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}

func mkRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
}

func roleBinding(name, roleKind, roleName string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: roleName}, Subjects: subjects}
}

func saSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Name: name, Namespace: ns}
}

// rbacCluster is goodCluster with the RBAC objects that grant what it grants: the chart's Role and
// RoleBinding for the writer's ServiceAccount, and a ClusterRoleBinding that alone binds crb-writer.
func rbacCluster() *wt.Resolver {
	c := goodCluster()
	c.ServiceAccounts["crb-writer"] = nil
	c.ServiceAccounts["idle"] = nil
	c.Grant(ns, "crb-writer", ns, "get", "list", "watch", "create", "update")
	c.Roles = []rbacv1.Role{*mkRole(chartRole, leaseRule)}
	c.RoleBindings = []rbacv1.RoleBinding{*roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))}
	c.ClusterRoles = []rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{leaseRule}}}
	c.ClusterRoleBindings = []rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "crb-writer"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "leases"}, Subjects: []rbacv1.Subject{saSubject("crb-writer")}}}
	return c
}

// rbacReview is an AdmissionReview of the named object (obj nil on DELETE).
func rbacReview(t testing.TB, op admissionv1.Operation, kind metav1.GroupVersionKind, name string, obj, old runtime.Object) []byte {
	t.Helper()
	body := wt.Review(t, op, kind, obj, old)
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil {
		t.Fatal(err)
	}
	rv.Request.Name = name
	if kind.Kind == "ClusterRole" || kind.Kind == "ClusterRoleBinding" {
		rv.Request.Namespace = ""
	}
	out, err := json.Marshal(rv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	roleKind  = metav1.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}
	rbKind    = metav1.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}
	crKind    = metav1.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	crbKind   = metav1.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}
	saGVK     = metav1.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
	disarming = []string{"refusing to disarm", "NOETL_EHDB_FENCING=shadow", "then remove the RBAC"}
)

// Issue 17, "disarming is refused wherever it comes from": every RBAC or ServiceAccount change that
// takes lease access or the token from an armed writer is refused with the removal order; RBAC no
// armed writer needs is admitted, and a writer granted the same by another binding loses nothing.
func TestRBACChangesAreJudgedByWhatTheyTakeFromArmedWriters(t *testing.T) {
	armed := sts(compliant()...) // as the chart's writer ServiceAccount, bound by the chart's Role
	crbWriter := sts(append(compliant(), wt.ServiceAccount("crb-writer"))...)
	crbWriter.Name = "crb"
	shadow := sts(append(compliant(), wt.SetEnv("NOETL_EHDB_FENCING", "shadow"))...)
	broken := sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION", "false"))...)
	viaConfigMap := sts(append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", "")))...)
	sa := func(automount *bool) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA, Namespace: ns}, AutomountServiceAccountToken: automount}
	}
	chartRB := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))
	otherShard := mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: []string{"ehdb-shard-00000001"}})

	cases := []struct {
		name      string
		readers   []any
		cluster   func(*wt.Resolver)
		op        admissionv1.Operation
		kind      metav1.GroupVersionKind
		objName   string
		obj, old  runtime.Object
		allowed   bool
		msg       []string
		noLookups bool
	}{
		{"the chart's RoleBinding deleted", []any{armed}, nil, admissionv1.Delete, rbKind, chartRole, nil, chartRB, false,
			append(disarming, "StatefulSet noetl/"+wt.WriterName, "may not get, create, update coordination.k8s.io leases"), false},
		{"the writer removed from the RoleBinding's subjects", []any{armed}, nil, admissionv1.Update, rbKind, chartRole,
			roleBinding(chartRole, "Role", chartRole, saSubject("someone-else")), chartRB, false, disarming, false},
		// Its role is read: a subject added to a binding of every verb on leases is disarmed.
		{"a subject added to the RoleBinding", []any{armed}, nil, admissionv1.Update, rbKind, chartRole,
			roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA), saSubject("more")), chartRB, true, nil, false},
		{"the chart's Role deleted", []any{armed}, nil, admissionv1.Delete, roleKind, chartRole, nil, mkRole(chartRole, leaseRule), false, disarming, false},
		{"the Role loses create and update", []any{armed}, nil, admissionv1.Update, roleKind, chartRole,
			mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}),
			mkRole(chartRole, leaseRule), false, append(disarming, "may not create, update"), false},
		{"the Role names another shard's Lease", []any{armed}, nil, admissionv1.Update, roleKind, chartRole, otherShard, mkRole(chartRole, leaseRule), false,
			append(disarming, "ehdb-shard-00000000"), false},
		{"a wildcard Role narrowed to configmaps", []any{armed}, func(c *wt.Resolver) {
			c.Roles[0].Rules = []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
		}, admissionv1.Update, roleKind, chartRole, mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}),
			mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}), false, disarming, false},
		{"a rule added to the Role", []any{armed}, nil, admissionv1.Update, roleKind, chartRole,
			mkRole(chartRole, leaseRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}), mkRole(chartRole, leaseRule), true, nil, false},
		{"a Role that grants no lease verb deleted", []any{armed}, nil, admissionv1.Delete, roleKind, "readers", nil,
			mkRole("readers", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}), true, nil, true},
		{"the ServiceAccount deleted", []any{armed}, nil, admissionv1.Delete, saGVK, wt.WriterSA, nil, sa(nil), false, append(disarming, "does not exist"), false},
		{"the ServiceAccount's token turned off", []any{armed}, nil, admissionv1.Update, saGVK, wt.WriterSA, sa(ptr.To(false)), sa(nil), false,
			append(disarming, "cannot authenticate to the API server"), false},
		{"a ServiceAccount nothing runs as deleted", []any{armed}, nil, admissionv1.Delete, saGVK, "idle", nil, sa(nil), true, nil, false},
		{"a redundant RoleBinding keeps the grant", []any{armed}, func(c *wt.Resolver) {
			c.RoleBindings = append(c.RoleBindings, *roleBinding("extra", "ClusterRole", "leases", saSubject(wt.WriterSA)))
		}, admissionv1.Delete, rbKind, chartRole, nil, chartRB, true, nil, false},
		{"a group binding every ServiceAccount of the namespace deleted", []any{armed}, func(c *wt.Resolver) {
			c.RoleBindings = []rbacv1.RoleBinding{*roleBinding(chartRole, "Role", chartRole, rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts:" + ns})}
		}, admissionv1.Delete, rbKind, chartRole, nil, roleBinding(chartRole, "Role", chartRole, rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts:" + ns}), false, disarming, false},
		{"the only ClusterRoleBinding of a writer deleted", []any{crbWriter}, nil, admissionv1.Delete, crbKind, "crb-writer", nil, &rbacv1.ClusterRoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "crb-writer"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "leases"}, Subjects: []rbacv1.Subject{saSubject("crb-writer")}}, false,
			append(disarming, "StatefulSet noetl/crb"), false},
		{"the ClusterRole it binds deleted", []any{crbWriter}, nil, admissionv1.Delete, crKind, "leases", nil, &rbacv1.ClusterRole{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{leaseRule}},
			false, disarming, false},
		{"a writer armed through envFrom unbound", []any{viaConfigMap}, func(c *wt.Resolver) {
			c.ConfigMaps = map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "enforce"}}
		}, admissionv1.Delete, rbKind, chartRole, nil, chartRB, false, disarming, false},
		{"a shadow writer unbound", []any{shadow}, nil, admissionv1.Delete, rbKind, chartRole, nil, chartRB, true, nil, false},
		{"a writer that already fails for its own reasons", []any{broken}, nil, admissionv1.Delete, rbKind, chartRole, nil, chartRB, true, nil, false},
		{"the RBAC state cannot be read", []any{armed}, func(c *wt.Resolver) { c.RBACErr = errors.New("etcd on fire") }, admissionv1.Delete, rbKind, chartRole, nil, chartRB, false,
			[]string{"could not verify", "etcd on fire"}, false},
		{"a binding of a Role that does not exist", []any{armed}, nil, admissionv1.Delete, rbKind, "dangling", nil, roleBinding("dangling", "Role", "nothing", saSubject(wt.WriterSA)), true, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, tc.readers...), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, tc.op, tc.kind, tc.objName, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			for _, m := range tc.msg {
				if !strings.Contains(out.Response.Result.Message, m) {
					t.Errorf("the refusal does not say %q:\n%s", m, out.Response.Result.Message)
				}
			}
			if tc.noLookups && cluster.Lookups() != 0 {
				t.Errorf("%d lookups for a change that cannot take anything away; want none", cluster.Lookups())
			}
		})
	}
	_ = appsv1.StatefulSet{}
}

// The RBAC review of a namespace the webhook's watches do not cover fails closed (class 8).
func TestRBACChangeOutsideTheWatchesIsNotVerified(t *testing.T) {
	h := &webhook.Handler{Resolver: rbacCluster(), Accounts: webhook.ScopedReaders{Readers: fakeReaders(t, sts(compliant()...)), Namespaces: []string{"elsewhere"}}}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))))
	if out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "could not verify") {
		t.Fatalf("an RBAC change outside the watches: %s; want it refused as could not verify", raw)
	}
}

// A rollback to an older chart narrows the webhook's ClusterRole and Roles before it reaches the
// writer's Role (CI run 48: the rollback to 0.1.0 was refused "could not verify ... cannot list
// rolebindings", and the release stayed half rolled back). A review the webhook cannot complete
// because its own ClusterRole no longer grants its reads, which only a cluster-level actor can
// take, is admitted with a warning; one whose namespaced reads alone were taken (a Role a guarded
// namespace's admins may edit) stays refused.
func TestRBACReviewAfterTheWebhooksClusterRoleWasNarrowed(t *testing.T) {
	forbidden := errors.New(`rolebindings.rbac.authorization.k8s.io is forbidden: User "system:serviceaccount:noetl:ehdb-election-webhook" cannot list resource "rolebindings"`)
	for _, tc := range []struct {
		name    string
		unread  string
		allowed bool
		msg     string
	}{
		{"the ClusterRole an older chart's", "this webhook may not list ClusterRoles (its ClusterRole is an older chart's?)", true, "was not judged"},
		{"only a namespaced read taken", "", false, "could not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.RBACErr, cluster.ClusterRolesUnread = forbidden, tc.unread
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, sts(compliant()...)), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, roleKind, chartRole,
				mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}),
				mkRole(chartRole, leaseRule, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"ehdb-elect"}})))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			said := strings.Join(out.Response.Warnings, " ")
			if !tc.allowed {
				said = out.Response.Result.Message
			}
			if !strings.Contains(said, tc.msg) {
				t.Errorf("the answer does not say %q: %s", tc.msg, raw)
			}
		})
	}
}

// Under a lease guard that admits the writer by its grant of ehdb-elect, a grant can disarm as a
// removal does: an account that comes to hold every verb on leases is refused by the guard. And a
// writer that fails already, for a state that can be put right, keeps what it still has. The
// twenty-first red team widened a writer's Role to "*" (admitted: the overlay modelled only
// removals), and in another run made a writer fail its lease guard with a cluster-admin binding,
// then deleted its RoleBinding and the cluster-admin binding, both admitted as "already fails":
// the writer ran armed with no lease RBAC at all. Each row marked refused was admitted before.
func TestRBACChangesThatTheLeaseGuardWouldRefuse(t *testing.T) {
	writer := sts(compliant()...)
	electRule := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", webhook.VerbElect}}
	everything := rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}
	chartRB := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))
	debug := &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "debug"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "everything"}, Subjects: []rbacv1.Subject{saSubject(wt.WriterSA)}}
	withDebug := func(keepRB bool) func(*wt.Resolver) {
		return func(c *wt.Resolver) {
			c.ClusterRoles = append(c.ClusterRoles, rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "everything"}, Rules: []rbacv1.PolicyRule{everything}})
			c.ClusterRoleBindings = append(c.ClusterRoleBindings, *debug)
			c.Grant(ns, wt.WriterSA, ns, webhook.VerbWildcardProbe)
			if !keepRB {
				c.RoleBindings = nil
			}
		}
	}
	leaseWildcard := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}
	userSubject := rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "bob"}
	// withWide adds a Role "wide" granting every verb on leases and a RoleBinding "extra" of it to
	// the user bob, as asked; the authorizer's answer is the RBAC's.
	withWide := func(role, binding bool) func(*wt.Resolver) {
		return func(c *wt.Resolver) {
			if role {
				c.Roles = append(c.Roles, *mkRole("wide", leaseWildcard))
			}
			if binding {
				rb := roleBinding("extra", "Role", "wide", userSubject)
				if !role {
					rb.Subjects = []rbacv1.Subject{saSubject(wt.WriterSA)}
				}
				c.RoleBindings = append(c.RoleBindings, *rb)
			}
		}
	}
	withEverything := func(c *wt.Resolver) {
		c.ClusterRoles = append(c.ClusterRoles, rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "everything"}, Rules: []rbacv1.PolicyRule{everything}})
	}
	for _, tc := range []struct {
		name    string
		cluster func(*wt.Resolver)
		review  func(*testing.T) []byte
		allowed bool
		msg     string
	}{
		{"the writer's Role widened to every verb on leases", nil, func(t *testing.T) []byte {
			wide := mkRole(chartRole, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}})
			return rbacReview(t, admissionv1.Update, roleKind, chartRole, wide, mkRole(chartRole, electRule))
		}, false, "lease guard"},
		{"failing its lease guard, its last lease binding deleted", withDebug(false), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Delete, crbKind, debug.Name, nil, debug)
		}, false, "may not get, create, update"},
		{"failing its lease guard, the extra grant deleted: put right", withDebug(true), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Delete, crbKind, debug.Name, nil, debug)
		}, true, ""},
		{"failing its lease guard, a binding it does not need deleted", withDebug(true), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, chartRB)
		}, true, ""},
		// Red team N of stop 33: a grant was judged only as an UPDATE of a Role that added "*"; a
		// new Role or binding, a subject added to a binding, the probe verb named, and a
		// ClusterRoleBinding of cluster-admin were each admitted (not sent, or judged by the
		// subjects a binding lost), and the writer's renewals were refused from then on.
		{"a new Role granting every verb on leases, named by a binding of the writer", withWide(false, true), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, roleKind, "wide", mkRole("wide", leaseWildcard), nil)
		}, false, "lease guard"},
		{"a new RoleBinding of such a Role to the writer", withWide(true, false), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, rbKind, "extra", roleBinding("extra", "Role", "wide", saSubject(wt.WriterSA)), nil)
		}, false, "lease guard"},
		{"the writer added to a binding of such a Role", withWide(true, true), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Update, rbKind, "extra", roleBinding("extra", "Role", "wide", userSubject, saSubject(wt.WriterSA)), roleBinding("extra", "Role", "wide", userSubject))
		}, false, "lease guard"},
		{"every account of the namespace added to a binding of such a Role", withWide(true, true), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Update, rbKind, "extra", roleBinding("extra", "Role", "wide", userSubject, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}), roleBinding("extra", "Role", "wide", userSubject))
		}, false, "lease guard"},
		{"the writer's Role given the probe verb", nil, func(t *testing.T) []byte {
			probe := mkRole(chartRole, electRule, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{webhook.VerbWildcardProbe}})
			return rbacReview(t, admissionv1.Update, roleKind, chartRole, probe, mkRole(chartRole, electRule))
		}, false, "lease guard"},
		{"a new ClusterRoleBinding of cluster-admin to the writer", withEverything, func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, crbKind, debug.Name, debug, nil)
		}, false, "lease guard"},
		{"a new RoleBinding of such a Role to another account", withWide(true, false), func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, rbKind, "extra", roleBinding("extra", "Role", "wide", saSubject("idle")), nil)
		}, true, ""},
		{"a new RoleBinding of a Role granting the writer what it has", nil, func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, rbKind, "extra", roleBinding("extra", "Role", chartRole, saSubject(wt.WriterSA)), nil)
		}, true, ""},
		{"a new Role granting every verb on leases that nothing binds", nil, func(t *testing.T) []byte {
			return rbacReview(t, admissionv1.Create, roleKind, "wide", mkRole("wide", leaseWildcard), nil)
		}, true, ""},
		{"the writer's Role given one more rule", nil, func(t *testing.T) []byte {
			more := mkRole(chartRole, electRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
			return rbacReview(t, admissionv1.Update, roleKind, chartRole, more, mkRole(chartRole, electRule))
		}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.Roles = []rbacv1.Role{*mkRole(chartRole, electRule)}
			cluster.Grant(ns, wt.WriterSA, ns, webhook.VerbElect)
			cluster.LeaseGuards = map[string]webhook.LeaseGuardFact{ns: {Name: "ehdb-election-lease-guard", Verb: webhook.VerbElect}}
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, writer), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", tc.review(t))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Errorf("the refusal does not say %q:\n%s", tc.msg, out.Response.Result.Message)
			}
		})
	}
}
