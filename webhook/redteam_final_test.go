package webhook_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The attacks of the fresh red team that attacked the finished guard on the local control plane
// (issue 17's last round). Each was admitted there, with the controllers running, and each row
// here failed on that code.

// Ground truth on every review, not only on the transition: an update (or a ConfigMap edit) that
// leaves an armed object's shard unknowable is refused as its creation would be. The guard used
// to judge only the shards it could name on an armed→armed update, so moving an armed set onto
// the host network, or removing the key its shard came from, was admitted and every pod it then
// ran had a shard nobody checked (or none: its election declined).
func TestAnArmedObjectKeepsAShardTheGuardCanTell(t *testing.T) {
	fqdn := func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.SetHostnameAsFQDN = ptr.To(true) }
	shardFrom := func(cm string) func(*appsv1.StatefulSet) { return envFrom(cmEnvFrom(cm, "NOETL_EHDB_")) }
	// deploymentReader is an armed Deployment whose shard comes from ConfigMap flags (prefix
	// NOETL_EHDB_, key ELECTION_SHARD), edited from before to after.
	deploymentReader := func(before, after map[string]string) func(t testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			w := workload(t, gvkDep, deployment(sts(append(compliant(), shardFrom("flags"))...)))
			return webhook.Input{Operation: admissionv1.Update, Object: w, Old: w, ConfigMapChange: &webhook.ConfigMapChange{
				Name: "flags", Old: webhook.ConfigMapFact{Data: before}, New: webhook.ConfigMapFact{Data: after}}}
		}
	}
	rows := []row{
		{name: "an armed StatefulSet moved onto the host network", old: nil, sts: []func(*appsv1.StatefulSet){hostNetwork},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"host network"}, lookups: -1},
		{name: "an armed StatefulSet given setHostnameAsFQDN", sts: []func(*appsv1.StatefulSet){fqdn},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"setHostnameAsFQDN"}, lookups: -1},
		{name: "an armed StatefulSet whose shard moves to a Secret", sts: []func(*appsv1.StatefulSet){envVar(secretKey("NOETL_EHDB_ELECTION_SHARD", "w", "shard"))},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, lookups: -1},
		{name: "an armed host-network StatefulSet scaled up", old: []func(*appsv1.StatefulSet){hostNetwork}, sts: []func(*appsv1.StatefulSet){hostNetwork, wt.Replicas(5)},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, lookups: -1},
		{name: "a ConfigMap edit removes an armed Deployment's shard", cluster: func(r *wt.Resolver) {
			r.ConfigMaps = map[string]map[string]string{"flags": {}}
		}, input: deploymentReader(map[string]string{"ELECTION_SHARD": "0"}, map[string]string{}),
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"through ConfigMap noetl/flags"}, lookups: -1},
		// What stays admitted: an edit that keeps the shard, and the way out (enforce → shadow).
		{name: "a ConfigMap edit of an unrelated key of an armed Deployment's map", cluster: func(r *wt.Resolver) {
			r.ConfigMaps = map[string]map[string]string{"flags": {"ELECTION_SHARD": "0", "LOG": "debug"}}
		}, input: deploymentReader(map[string]string{"ELECTION_SHARD": "0", "LOG": "info"}, map[string]string{"ELECTION_SHARD": "0", "LOG": "debug"}),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "an armed StatefulSet's image changed", old: nil, sts: []func(*appsv1.StatefulSet){container(func(c *corev1.Container) { c.Image = "writer:2" })},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "an armed host-network StatefulSet set to shadow", old: []func(*appsv1.StatefulSet){hostNetwork},
			sts: []func(*appsv1.StatefulSet){hostNetwork, wt.SetEnv("NOETL_EHDB_FENCING", "shadow")}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
	}
	for _, rw := range rows {
		if rw.input == nil && rw.old == nil {
			rw.old = []func(*appsv1.StatefulSet){} // an UPDATE from the compliant writer
		}
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// A Pod's owner accounts for it only on the shards the owner was judged for. The guard used to
// compare only the armed containers' env, so a Pod naming the real, armed StatefulSet (its true
// UID) with the hostname of an ordinal the set does not have, or the Pod of an Indexed Job whose
// shard came from an annotation the Job controller rewrites on each retry, skipped the order
// check on a shard with no Lease. And an owner name no object can have ("x/y") made the lookup
// fail, so the Pod failed open as "could not verify".
func TestAPodsOwnerAccountsOnlyForItsShards(t *testing.T) {
	armed := sts(compliant()...)
	armed.UID = "sts-uid"
	const failures = "batch.kubernetes.io/job-index-failure-count"
	retried := func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations = map[string]string{failures: "0"}
		fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.annotations['"+failures+"']")(s)
	}
	idx := indexedJob(sts(append(compliant(), retried)...))
	idx.Name, idx.UID = "idx", "job-uid"
	owners := fakeOwners{owners: map[string]runtime.Object{"StatefulSet/" + ns + "/" + armed.Name: armed, "Job/" + ns + "/idx": idx}}
	podOf := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := pod(sts(compliant()...), name)
		p.OwnerReferences[0].UID = "sts-uid"
		if edit != nil {
			edit(p)
		}
		return p
	}
	jobPod := func(attempts string) *corev1.Pod {
		p := pod(sts(append(compliant(), retried)...), "idx-0-abcde")
		p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "batch/v1", "Job", "idx", "job-uid"
		p.Annotations = map[string]string{failures: attempts, "batch.kubernetes.io/job-completion-index": "0"}
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1",
			FieldPath: "metadata.labels['batch.kubernetes.io/job-completion-index']"}}})
		return p
	}
	cases := []struct {
		name     string
		owners   webhook.Owners
		obj      *corev1.Pod
		noLeases bool
		allowed  bool
		msg      string
	}{
		{"the Pod of ordinal 0 of the armed StatefulSet is exempt (a crashed writer's replacement)", owners, podOf(armed.Name+"-0", nil), true, true, ""},
		{"a Pod of the real StatefulSet named for an ordinal it does not have", owners, podOf(armed.Name+"-9", nil), false, false,
			"Lease noetl/ehdb-shard-00000009 (shard 9) does not exist"},
		{"a Pod of the real StatefulSet whose spec.hostname names another ordinal", owners, podOf(armed.Name+"-0", func(p *corev1.Pod) { p.Spec.Hostname = armed.Name + "-7" }), false, false,
			"Lease noetl/ehdb-shard-00000007 (shard 7) does not exist"},
		{"an Indexed Job's retried Pod, its shard from the failure count the controller rewrote", owners, jobPod("2"), false, false,
			"Lease noetl/ehdb-shard-00000002 (shard 2) does not exist"},
		{"a Pod whose controller's name no object can have", fakeOwners{unknown: true}, podOf(armed.Name+"-0", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "x/y" }), true, false,
			"Lease noetl/ehdb-shard-00000000 (shard 0) does not exist"},
		{"a Pod whose controller's name is '..'", fakeOwners{unknown: true}, podOf(armed.Name+"-0", func(p *corev1.Pod) { p.OwnerReferences[0].Name = ".." }), true, false,
			"Lease noetl/ehdb-shard-00000000 (shard 0) does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := goodCluster()
			if tc.noLeases {
				clear(cluster.Leases)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Owners: tc.owners}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, saAdmitted(tc.obj), nil))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want %q in the refusal: %s", tc.msg, raw)
			}
		})
	}

	// The Job itself: a shard from an annotation its controller rewrites is unknowable.
	runRow(t, row{name: "an Indexed Job taking its shard from the failure-count annotation", input: func(t testing.TB) webhook.Input {
		return webhook.Input{Operation: admissionv1.Create, Object: workload(t, batchv1.SchemeGroupVersion.WithKind("Job"), indexedJob(sts(append(compliant(), retried)...)))}
	}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{failures}, lookups: -1})
}

// Leases outside the guarded namespaces: the webhook can never read them (its RBAC and watches
// cover the guarded namespaces only), so an armed object that elects there is refused for what it
// is, not "could not verify" — which a Pod would pass (Pods fail open). And an RBAC change in one
// namespace is judged only for the access it can take: a Role or RoleBinding grants nothing
// outside its own namespace, so a writer electing elsewhere no longer blocks an additive edit of
// the Role in its own namespace as "could not read every binding" there.
func TestLeasesOutsideTheGuardedNamespaces(t *testing.T) {
	elsewhere := wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", "default")
	grantElsewhere := func(r *wt.Resolver) {
		r.Grant(ns, wt.WriterSA, "default", "get", "list", "watch", "create", "update")
		r.Leases[lease("default", 0)] = wt.LiveLease("default", 0, now, 1).Spec
	}
	guarded := &webhook.Policy{RequireLiveLease: true, LeaseNamespaces: []string{ns}}
	for _, rw := range []row{
		{name: "a bare armed Pod electing in an unguarded namespace", policy: guarded, cluster: grantElsewhere, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, barePod(sts(append(compliant(), elsewhere)...), wt.WriterName+"-0"))}
		}, unmet: []webhook.Reason{webhook.ReasonLeaseUnguarded}, msg: []string{"namespace default", "not guarding"}, lookups: -1},
		{name: "an armed StatefulSet electing in an unguarded namespace", policy: guarded, cluster: grantElsewhere, sts: []func(*appsv1.StatefulSet){elsewhere},
			unmet: []webhook.Reason{webhook.ReasonLeaseUnguarded}, lookups: -1},
		{name: "every namespace guarded (no list): judged on its Lease", policy: &webhook.Policy{RequireLiveLease: true}, cluster: grantElsewhere, sts: []func(*appsv1.StatefulSet){elsewhere},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	} {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}

	t.Run("an additive Role edit with a writer electing elsewhere", func(t *testing.T) {
		cluster := rbacCluster()
		grantElsewhere(cluster)
		cluster.BindingsErr = map[string]error{"default": errors.New(`rolebindings.rbac.authorization.k8s.io is forbidden: cannot list resource "rolebindings" in the namespace "default"`)}
		writer := sts(append(compliant(), elsewhere)...)
		h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, writer), Clock: clocktesting.NewFakePassiveClock(now)}
		srv := httptest.NewServer(webhook.NewHTTPHandler(h))
		t.Cleanup(srv.Close)
		added := mkRole(chartRole, leaseRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
		_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, roleKind, chartRole, added, mkRole(chartRole, leaseRule)))
		if out.Response == nil || !out.Response.Allowed {
			t.Fatalf("an additive edit of the Role in %s, refused for a writer electing in default: %s", ns, raw)
		}
	})
}

// A review is answered to whoever sends it (without --client-ca-file the webhook cannot tell the
// API server from any client that reaches its port), so no message quotes a value the guard read
// from a ConfigMap: a crafted review that reads a key of any ConfigMap of a guarded namespace
// into the election's variables returned it in the refusal.
func TestRefusalsDoNotQuoteConfigMapValues(t *testing.T) {
	const secretish = "s3cr3t-database-password"
	cluster := goodCluster()
	cluster.ConfigMaps = map[string]map[string]string{"app-settings": {"DB_PASSWORD": secretish}}
	// The second red team read one through the lease duration's warning: the parser's own
	// messages quote what they were given.
	for _, variable := range []string{"NOETL_EHDB_ELECTION", "NOETL_EHDB_ELECTION_SHARD", "KUBERNETES_SERVICE_HOST", "NOETL_EHDB_ELECTION_LEASE_SECS", "NOETL_EHDB_ELECTION_RENEW_SECS"} {
		t.Run(variable, func(t *testing.T) {
			w := workload(t, gvkSTS, sts(append(compliant(), envVar(cmKey(variable, "app-settings", "DB_PASSWORD", false)))...))
			d, _ := webhook.Evaluate(t.Context(), cluster, webhook.Input{Operation: admissionv1.Create, Object: w}, webhook.Policy{RequireLiveLease: true}, now)
			if all := d.Message() + strings.Join(d.Warnings, "\n"); strings.Contains(all, secretish) {
				t.Fatalf("the refusal quotes the ConfigMap's value:\n%s", all)
			}
		})
	}
}

// The guard's own access is not taken while it serves: deleting the webhook's RoleBinding (an
// admin of a guarded namespace may) turned every armed bare Pod into "could not verify", admitted
// since Pods fail open. The chart's uninstall is not held: it removes the webhook first.
func TestTheGuardKeepsItsOwnAccess(t *testing.T) {
	self := saSubject("ehdb-election-webhook")
	guardRule := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}
	guardRole := mkRole("ehdb-election-webhook-guard", guardRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
	guardRB := roleBinding("ehdb-election-webhook-guard", "Role", "ehdb-election-webhook-guard", self)
	crb := &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election-webhook"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ehdb-election-webhook"}, Subjects: []rbacv1.Subject{self}}
	sar := rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}
	vwcRule := rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"get"}}
	clusterRole := func(rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election-webhook"}, Rules: rules}
	}
	appsReads := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}, Verbs: []string{"get", "list", "watch"}}
	secretRole := mkRole("ehdb-election-webhook", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"ehdb-election-webhook-tls"}, Verbs: []string{"get", "list", "watch", "update", "patch"}})
	eventsRole := mkRole("events-writer", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
	podReader := mkRole("pod-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})
	viewRole := mkRole("view", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: []string{"get", "list", "watch"}})
	saReader := mkRole("sa-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get"}})
	allAccounts := func(name, role string) *rbacv1.RoleBinding {
		return roleBinding(name, "Role", role, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"})
	}
	webhookSA := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election-webhook", Namespace: ns}}
	cases := []struct {
		name     string
		self     bool
		op       admissionv1.Operation
		kind     metav1.GroupVersionKind
		objName  string
		obj, old runtime.Object
		allowed  bool
	}{
		{"its RoleBinding deleted", true, admissionv1.Delete, rbKind, guardRB.Name, nil, guardRB, false},
		{"its ServiceAccount removed from its RoleBinding", true, admissionv1.Update, rbKind, guardRB.Name, roleBinding(guardRB.Name, "Role", guardRole.Name, saSubject("someone")), guardRB, false},
		{"its ClusterRoleBinding deleted", true, admissionv1.Delete, crbKind, crb.Name, nil, crb, false},
		{"its ServiceAccount deleted", true, admissionv1.Delete, saGVK, webhookSA.Name, nil, webhookSA, false},
		{"its Role deleted", true, admissionv1.Delete, roleKind, guardRole.Name, nil, guardRole, false},
		{"its Role narrowed", true, admissionv1.Update, roleKind, guardRole.Name, mkRole(guardRole.Name, guardRule), guardRole, false},
		// The second red team: its ClusterRole grants no lease verb, so the edit was never sent.
		{"its ClusterRole loses SubjectAccessReviews", true, admissionv1.Update, crKind, "ehdb-election-webhook", clusterRole(vwcRule), clusterRole(sar, vwcRule), false},
		{"its ClusterRole loses another rule", true, admissionv1.Update, crKind, "ehdb-election-webhook", clusterRole(sar), clusterRole(sar, vwcRule), true},
		{"its Role loses a rule it verifies no writer with (a rollback to an older chart)", true, admissionv1.Update, roleKind, guardRole.Name,
			guardRole, mkRole(guardRole.Name, append(slices.Clone(guardRole.Rules), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})...), true},
		// The twenty-second red team took the apps reads from the webhook's Role: an armed Pod
		// naming a ReplicaSet then failed open past the order check.
		{"its Role loses the reads it verifies owners with", true, admissionv1.Update, roleKind, guardRole.Name,
			guardRole, mkRole(guardRole.Name, append(slices.Clone(guardRole.Rules), appsReads)...), false},
		{"its Role given one more rule", true, admissionv1.Update, roleKind, guardRole.Name,
			mkRole(guardRole.Name, append(slices.Clone(guardRole.Rules), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})...), guardRole, true},
		{"a subject added to its RoleBinding", true, admissionv1.Update, rbKind, guardRB.Name, roleBinding(guardRB.Name, "Role", guardRole.Name, self, saSubject("more")), guardRB, true},
		{"without its own account configured, not protected", false, admissionv1.Delete, rbKind, guardRB.Name, nil, guardRB, true},
		// A group its account is in, removed from a binding: it matters only when the role bound
		// grants one of the reads (the twentieth red team: any such removal was refused).
		// Team 22 #5: only when no other binding grants the guard those reads (a namespace's
		// "view" for every account unbound, while the chart's Role grants the same, was refused).
		{"every account's group unbound from its Role, which it also holds by name", true, admissionv1.Delete, rbKind, "all-accounts-guard", nil, allAccounts("all-accounts-guard", guardRole.Name), true},
		{"every account's group unbound from a view role whose reads its own Role grants", true, admissionv1.Delete, rbKind, "all-accounts-view", nil, allAccounts("all-accounts-view", viewRole.Name), true},
		{"every account's group unbound from the only role granting it a read", true, admissionv1.Delete, rbKind, "all-accounts-sa", nil, allAccounts("all-accounts-sa", saReader.Name), false},
		{"every account's group removed from that binding, another subject kept", true, admissionv1.Update, rbKind, "all-accounts-sa",
			roleBinding("all-accounts-sa", "Role", saReader.Name, saSubject("someone")), allAccounts("all-accounts-sa", saReader.Name), false},
		{"every account's group unbound from a role it verifies nothing with", true, admissionv1.Delete, rbKind, "all-accounts-pods", nil, allAccounts("all-accounts-pods", podReader.Name), true},
		{"a binding of a role that does not exist", true, admissionv1.Delete, rbKind, "all-accounts-gone", nil, allAccounts("all-accounts-gone", "gone"), true},
		// By name, whatever role it binds: the chart's binding of its certificate Secret's Role
		// (CI run 56 caught an earlier version of the group rule admitting its deletion).
		{"its own binding of a role it reads owners with", true, admissionv1.Delete, rbKind, "its-pods", nil, roleBinding("its-pods", "Role", podReader.Name, self), false},
		// The twenty-third red team: a binding naming it to a role it needs nothing of could never
		// be deleted; and narrowing its RBAC reads locked every RBAC change out, the restore too.
		// The twenty-fourth red team emptied the Role of its certificate's Secret, then freed
		// its binding.
		{"its certificate Secret's Role emptied", true, admissionv1.Update, roleKind, secretRole.Name, mkRole(secretRole.Name), secretRole, false},
		{"its own binding of a role it needs nothing of", true, admissionv1.Delete, rbKind, "its-events", nil, roleBinding("its-events", "Role", eventsRole.Name, self), true},
		{"its Role loses the reads it judges RBAC changes by", true, admissionv1.Update, roleKind, guardRole.Name,
			guardRole, mkRole(guardRole.Name, append(slices.Clone(guardRole.Rules), rbacv1.PolicyRule{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch"}})...), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.Roles = append(cluster.Roles, *guardRole, *podReader, *eventsRole, *secretRole, *viewRole, *saReader)
			cluster.RoleBindings = append(cluster.RoleBindings, *guardRB, *roleBinding(secretRole.Name, "Role", secretRole.Name, self), *allAccounts("all-accounts-guard", guardRole.Name), *allAccounts("all-accounts-pods", podReader.Name),
				*allAccounts("all-accounts-view", viewRole.Name), *allAccounts("all-accounts-sa", saReader.Name))
			cluster.ClusterRoles = append(cluster.ClusterRoles, *clusterRole(sar, vwcRule))
			cluster.ClusterRoleBindings = append(cluster.ClusterRoleBindings, *crb)
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, sts(compliant()...)), Clock: clocktesting.NewFakePassiveClock(now)}
			if tc.self {
				h.Self.Namespace, h.Self.Name = ns, self.Name
			}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, tc.op, tc.kind, tc.objName, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, "the webhook's own ServiceAccount") {
				t.Fatalf("the refusal does not say it is the guard's own access: %s", raw)
			}
		})
	}
}

// staleWatch is the webhook's StatefulSet watch behind the API server: it holds before for the
// first lag lookups, then now.
type staleWatch struct {
	before, now *webhook.Workload
	lag         int
	calls       int
}

func (s *staleWatch) Workload(_, _, _ string) (*webhook.Workload, bool, bool) {
	s.calls++
	if s.calls <= s.lag {
		return s.before, true, true
	}
	return s.now, true, true
}

// A scale-up sent right after the update that armed the set was judged on the unarmed template
// the watch still held (the second red team: 3 of 25 rounds admitted as unarmed, and the new
// ordinals' Pods then exempt through their armed owner). The scale names the set's
// resourceVersion; the review waits for the watch to hold that version, or cannot verify it.
func TestAScaleIsJudgedOnTheVersionItNames(t *testing.T) {
	unarmed := sts(append(compliant(), wt.SetEnv("NOETL_EHDB_FENCING", "shadow"))...)
	unarmed.ResourceVersion = "41"
	armed := sts(compliant()...)
	armed.ResourceVersion = "42"
	scale := func(n int32, rv string) *autoscalingv1.Scale {
		return &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
			ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName, Namespace: ns, ResourceVersion: rv}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "scale-race", Kind: metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, SubResource: "scale", Operation: admissionv1.Update,
			Namespace: ns, Name: wt.WriterName, Object: runtime.RawExtension{Object: scale(3, "42")}, OldObject: runtime.RawExtension{Object: scale(1, "42")}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lag  int
		msg  string
	}{
		{"the watch catches up: judged on the armed version", 3, "ehdb-shard-00000001 (shard 1) does not exist"},
		{"the watch never holds it: could not verify", 1 << 30, "holds version 41 of it, not 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watch := &staleWatch{before: workload(t, gvkSTS, unarmed), now: workload(t, gvkSTS, armed), lag: tc.lag}
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Workloads: watch, LookupTimeout: 300 * time.Millisecond}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed {
				t.Fatalf("the scale-up of the just-armed set admitted: %s", raw)
			}
			if !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want %q: %s", tc.msg, raw)
			}
		})
	}

	// A later version than the scale names (the set's controller wrote its status meanwhile) is
	// judged: the API server admits the scale again over the version it is written on. Waiting
	// for the exact version refused a correct scale-up of a freshly created Deployment under load.
	t.Run("the watch holds a later version: judged on it", func(t *testing.T) {
		later := armed.DeepCopy()
		later.ResourceVersion = "43"
		cluster := goodCluster()
		for _, s := range []uint32{1, 2} {
			cluster.Leases[lease(ns, s)] = wt.LiveLease(ns, s, now.Add(-5*time.Second), 1).Spec
		}
		h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true},
			Workloads: &staleWatch{now: workload(t, gvkSTS, later)}, LookupTimeout: 300 * time.Millisecond, Clock: clocktesting.NewFakePassiveClock(now)}
		srv := httptest.NewServer(webhook.NewHTTPHandler(h))
		t.Cleanup(srv.Close)
		_, out, raw := post(t, srv.URL, "application/json", body)
		if out.Response == nil || !out.Response.Allowed {
			t.Fatalf("a correct scale-up, the watch one version ahead: %s", raw)
		}
	})
}

// A Pod's labels and annotations change after its creation, and the kubelet resolves a fieldRef to
// them at every container start: `kubectl annotate` armed a bare Pod on a shard with no Lease, and
// `kubectl label` turned an armed Pod's election off, each unreviewed (the second red team; the
// guard said a Pod's environment could not change after creation).
func TestAPodsLabelsAndAnnotationsAreJudged(t *testing.T) {
	fromAnnotation := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + key + "']"}}}
	}
	fromLabel := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['" + key + "']"}}}
	}
	podWith := func(name string, e corev1.EnvVar, meta func(*corev1.Pod)) *corev1.Pod {
		p := barePod(sts(append(compliant(), envVar(e))...), name)
		meta(p)
		return saAdmitted(p)
	}
	annotated := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations = map[string]string{k: v, "unrelated": "1"} }
	}
	labelled := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} }
	}
	fencing, electionAnn, electionLabel := fromAnnotation("NOETL_EHDB_FENCING", "noetl.io/fencing"), fromAnnotation("NOETL_EHDB_ELECTION", "noetl.io/election"), fromLabel("NOETL_EHDB_ELECTION", "election")
	lowerFencing := fromLabel("noetl_ehdb_fencing", "f")
	withoutElection := func(env []corev1.EnvVar) []corev1.EnvVar {
		return slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_ELECTION" || e.Name == webhook.EnvFencing })
	}
	cases := []struct {
		name     string
		old, now *corev1.Pod
		allowed  bool
		msg      string
	}{
		{"an annotation edit arms a bare Pod on a shard with no Lease",
			podWith(wt.WriterName+"-9", fencing, annotated("noetl.io/fencing", "shadow")), podWith(wt.WriterName+"-9", fencing, annotated("noetl.io/fencing", "enforce")),
			false, "ehdb-shard-00000009 (shard 9) does not exist"},
		{"an annotation edit turns an armed Pod's election off",
			podWith(wt.WriterName+"-0", electionAnn, annotated("noetl.io/election", "true")), podWith(wt.WriterName+"-0", electionAnn, annotated("noetl.io/election", "false")),
			false, "first set NOETL_EHDB_FENCING=shadow"},
		{"a label edit turns an armed Pod's election off",
			podWith(wt.WriterName+"-0", electionLabel, labelled("election", "true")), podWith(wt.WriterName+"-0", electionLabel, labelled("election", "false")),
			false, "first set NOETL_EHDB_FENCING=shadow"},
		// Team F: the edit adds kubernetes.io/os=linux with the armed value. The kubelet checks
		// that label only when it admits the Pod, so a running Pod may be on Windows still, which
		// reads noetl_ehdb_fencing as the switch at the container's next start.
		{"a label edit arms in lower case and claims Linux (was admitted)",
			podWith(wt.WriterName+"-9", lowerFencing, func(p *corev1.Pod) {
				p.Labels = map[string]string{"f": "off"}
				p.Spec.Containers[0].Env = withoutElection(p.Spec.Containers[0].Env)
			}),
			podWith(wt.WriterName+"-9", lowerFencing, func(p *corev1.Pod) {
				p.Labels = map[string]string{"f": "enforce", corev1.LabelOSStable: "linux"}
				p.Spec.Containers[0].Env = withoutElection(p.Spec.Containers[0].Env)
			}),
			false, "election is not enabled"},
		{"an unrelated annotation edit of an armed Pod", podWith(wt.WriterName+"-0", electionAnn, annotated("noetl.io/election", "true")),
			podWith(wt.WriterName+"-0", electionAnn, func(p *corev1.Pod) { p.Annotations = map[string]string{"noetl.io/election": "true", "unrelated": "2"} }), true, ""},
		{"an annotation edit that disarms", podWith(wt.WriterName+"-9", fencing, annotated("noetl.io/fencing", "enforce")),
			podWith(wt.WriterName+"-9", fencing, annotated("noetl.io/fencing", "shadow")), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Owners: fakeOwners{}}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			// The Pod's own UPDATE, and its status subresource, which writes labels and
			// annotations too (the third red team armed a bare Pod through it).
			for _, sub := range []string{"", "status"} {
				body := wt.Review(t, admissionv1.Update, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, tc.now, tc.old)
				var rv admissionv1.AdmissionReview
				if err := json.Unmarshal(body, &rv); err != nil {
					t.Fatal(err)
				}
				rv.Request.SubResource = sub
				body, _ = json.Marshal(rv)
				_, out, raw := post(t, srv.URL, "application/json", body)
				if out.Response == nil || out.Response.Allowed != tc.allowed {
					t.Fatalf("subresource %q: allowed=%v, want %v: %s", sub, out.Response != nil && out.Response.Allowed, tc.allowed, raw)
				}
				if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
					t.Fatalf("subresource %q: want %q: %s", sub, tc.msg, raw)
				}
			}
		})
	}
}

// A Service named kubernetes in a guarded namespace takes the API server's place in every pod
// there that keeps its service links (the kubelet's getServiceEnvVarMap): refused, by name.
func TestAServiceNamedKubernetesIsRefused(t *testing.T) {
	h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	svcKind := metav1.GroupVersionKind{Version: "v1", Kind: "Service"}
	for name, allowed := range map[string]bool{"kubernetes": false, "writer-metrics": true} {
		svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		body := wt.Review(t, admissionv1.Create, svcKind, svc, nil)
		var rv admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &rv); err != nil {
			t.Fatal(err)
		}
		rv.Request.Name = name
		body, _ = json.Marshal(rv)
		_, out, raw := post(t, srv.URL, "application/json", body)
		if out.Response == nil || out.Response.Allowed != allowed {
			t.Errorf("Service %s: %s; want allowed=%v", name, raw, allowed)
		}
	}
}

// The reads the guard verifies owners with are kept in its namespaced Role, except in a rollback:
// an older chart granted fewer of them, and Helm narrows the webhook's ClusterRole (which only a
// cluster-level actor can) before its Roles.
func TestTheGuardsOwnerReadsYieldToARollback(t *testing.T) {
	self := saSubject("ehdb-election-webhook")
	reads := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}
	cm := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps", "serviceaccounts"}, Verbs: []string{"get"}}
	apps := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}, Verbs: []string{"get", "list", "watch"}}
	older := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "daemonsets"}, Verbs: []string{"get", "list", "watch"}}
	guard := mkRole("ehdb-election-webhook-guard", reads, cm, apps)
	for _, tc := range []struct {
		name    string
		unread  string
		allowed bool
	}{
		{"the ClusterRole this version's: refused", "", false},
		{"the ClusterRole an older chart's (a rollback): admitted", "this webhook may not list ClusterRoles (its ClusterRole is an older chart's?)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.Roles = append(cluster.Roles, *guard)
			cluster.RoleBindings = append(cluster.RoleBindings, *roleBinding(guard.Name, "Role", guard.Name, self))
			cluster.ClusterRolesUnread = tc.unread
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, sts(compliant()...)), Clock: clocktesting.NewFakePassiveClock(now)}
			h.Self.Namespace, h.Self.Name = ns, self.Name
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, roleKind, guard.Name, mkRole(guard.Name, reads, cm, older), guard))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
		})
	}
}
