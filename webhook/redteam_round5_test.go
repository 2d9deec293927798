package webhook_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The fifth red team (issue 17) on the local control plane.

// An owner exempts only through a template the guard judged. An object in deletion is not judged
// (its edits are admitted, so a finalizer's removal cannot be held), so one armed after its
// deletion began — its template edited while a finalizer holds it — exempts nothing: a
// ReplicaSet made by hand naming it (no built-in controller acts for an owner in deletion) and its
// Pods were admitted with the order check skipped on a shard with no Lease.
func TestAnOwnerInDeletionExemptsNothing(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	tpl := deployment(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...)).Spec.Template
	deleting := func(obj metav1.Object) {
		obj.SetDeletionTimestamp(ptr.To(metav1.Now()))
		obj.SetFinalizers([]string{"example.com/hold"})
	}
	dep := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "dep-uid"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: *tpl.DeepCopy()}}
	deleting(dep)
	rsTpl := tpl.DeepCopy()
	rsTpl.Labels["pod-template-hash"] = "5d9c7b8f6"
	rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "w-x", Namespace: ns, UID: "rs-uid", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: "dep-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Template: *rsTpl}}
	deletingRS := rs.DeepCopy()
	deleting(deletingRS)
	pod := barePod(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...), "w-x-abcde")
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "w-x", UID: "rs-uid", Controller: ptr.To(true)}}
	runOwnerCases(t, cluster, "ehdb-shard-00000000 (shard 0) does not exist", []ownerCase{
		{"a ReplicaSet naming a Deployment in deletion", map[string]runtime.Object{"Deployment/" + ns + "/w": dep}, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, rs, nil, false},
		{"a Pod naming a ReplicaSet in deletion", map[string]runtime.Object{"ReplicaSet/" + ns + "/w-x": deletingRS}, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, saAdmitted(pod), nil, false},
	})
}

// A deletion finishes when the last finalizer of an object in deletion is removed: an UPDATE, which
// the guard judged as an update (no change of rules, subjects or data), so a RoleBinding, a
// ServiceAccount or a ConfigMap put in deletion while nothing armed used it, then used by an armed
// writer, was removed from under it. Such an UPDATE is judged as the DELETE it completes.
func TestTheUpdateThatCompletesADeletionIsJudgedAsTheDelete(t *testing.T) {
	armed := sts(compliant()...)
	electionFrom := sts(append(compliant(), unsetEnv("NOETL_EHDB_ELECTION"), envVar(cmKey("NOETL_EHDB_ELECTION", "elect", "on", true)))...)
	inDeletion := func(o metav1.Object, finalizers ...string) {
		o.SetDeletionTimestamp(ptr.To(metav1.Now()))
		o.SetFinalizers(finalizers)
	}
	rb := func(finalizers ...string) *rbacv1.RoleBinding {
		b := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))
		inDeletion(b, finalizers...)
		return b
	}
	sa := func(finalizers ...string) *corev1.ServiceAccount {
		s := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA, Namespace: ns}}
		inDeletion(s, finalizers...)
		return s
	}
	cm := func(finalizers ...string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "elect", Namespace: ns}, Data: map[string]string{"on": "true"}}
		inDeletion(c, finalizers...)
		return c
	}
	const hold = "example.com/hold"
	for _, tc := range []struct {
		name     string
		readers  []any
		kind     metav1.GroupVersionKind
		objName  string
		obj, old runtime.Object
		allowed  bool
		msg      string
	}{
		{"the last finalizer of the writer's RoleBinding removed", []any{armed}, rbKind, chartRole, rb(), rb(hold), false, "refusing to disarm"},
		{"the last finalizer of the writer's ServiceAccount removed", []any{armed}, saGVK, wt.WriterSA, sa(), sa(hold), false, "refusing to disarm"},
		{"a finalizer of the writer's RoleBinding removed, another kept", []any{armed}, rbKind, chartRole, rb("other"), rb(hold, "other"), true, ""},
		{"the last finalizer of a RoleBinding no armed writer needs removed", []any{sts(append(compliant(), wt.SetEnv("NOETL_EHDB_FENCING", "shadow"))...)}, rbKind, chartRole, rb(), rb(hold), true, ""},
		{"the last finalizer of the ConfigMap the writer's election reads removed", []any{electionFrom}, cmGVK, "elect", cm(), cm(hold), false, "election is not enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.ConfigMaps = map[string]map[string]string{"elect": {"on": "true"}}
			readers := fakeReaders(t, tc.readers...)
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: readers, Readers: readers, Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, tc.kind, tc.objName, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want %q: %s", tc.msg, raw)
			}
		})
	}
}

var cmGVK = metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

// ownedWatch is a Workloads that also lists an owner's ReplicaSets.
type ownedWatch struct{ owned []runtime.Object }

func (ownedWatch) Workload(_, _, _ string) (*webhook.Workload, bool, bool) { return nil, false, true }

func (o ownedWatch) OwnedBy(resource, namespace string, owner types.UID) ([]*webhook.Workload, bool) {
	var out []*webhook.Workload
	for _, obj := range o.owned {
		w, err := webhook.WorkloadOf(obj, namespace)
		if err == nil && w.ControllerRef != nil && w.ControllerRef.UID == owner {
			out = append(out, w)
		}
	}
	return out, true
}

// A paused Deployment's controller makes no ReplicaSet for its template (deployment sync.go), so
// its pods start when it is resumed: created paused while its Lease was live, resumed after the
// Lease died, it was admitted armed→armed and its pods ran on a dead election (the fifth red
// team; also a paused Deployment moved to another shard). The resume is judged against what the
// Deployment runs then — its ReplicaSets that have pods — so pausing, fixing and resuming a
// writer whose shard is down (its replacement's own) stays open.
func TestAResumedDeploymentIsJudgedOnWhatItRan(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	onShard := func(shard string, edit func(*appsv1.StatefulSet)) corev1.PodTemplateSpec {
		opts := append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", shard))
		if edit != nil {
			opts = append(opts, edit)
		}
		return deployment(sts(opts...)).Spec.Template
	}
	dep := func(paused bool, tpl corev1.PodTemplateSpec) *appsv1.Deployment {
		return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "dep-uid"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Paused: paused, Template: tpl}}
	}
	rsOf := func(tpl corev1.PodTemplateSpec, n int32) *appsv1.ReplicaSet {
		t := tpl.DeepCopy()
		t.Labels["pod-template-hash"] = "h"
		return &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
			ObjectMeta: metav1.ObjectMeta{Name: "w-h", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: "dep-uid", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(n), Template: *t}}
	}
	logLevel := func(s *appsv1.StatefulSet) { wt.SetEnv("LOG_LEVEL", "debug")(s) }
	depKind := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	for _, tc := range []struct {
		name      string
		workloads webhook.Workloads
		old, now  *appsv1.Deployment
		allowed   bool
		msg       string
	}{
		{"created paused, resumed after its Lease died (no ReplicaSet yet)", ownedWatch{},
			dep(true, onShard("7", nil)), dep(false, onShard("7", nil)), false, "ehdb-shard-00000007 (shard 7) does not exist"},
		{"paused and moved to another shard, resumed after that shard's Lease died", ownedWatch{[]runtime.Object{rsOf(onShard("7", nil), 1)}},
			dep(true, onShard("8", nil)), dep(false, onShard("8", nil)), false, "ehdb-shard-00000008 (shard 8) does not exist"},
		{"paused, its ReplicaSet of another shard at 0, resumed", ownedWatch{[]runtime.Object{rsOf(onShard("8", nil), 0)}},
			dep(true, onShard("8", nil)), dep(false, onShard("8", nil)), false, "ehdb-shard-00000008 (shard 8) does not exist"},
		{"paused, what it runs unknown (no watch of its ReplicaSets), resumed", nil,
			dep(true, onShard("7", nil)), dep(false, onShard("7", nil)), false, "ehdb-shard-00000007 (shard 7) does not exist"},
		// The way out of an outage stays open: its pods already run armed on that shard.
		{"paused, fixed, resumed while its shard is down", ownedWatch{[]runtime.Object{rsOf(onShard("7", nil), 1)}},
			dep(true, onShard("7", logLevel)), dep(false, onShard("7", logLevel)), true, ""},
		{"paused and resumed unchanged while its shard is down", ownedWatch{[]runtime.Object{rsOf(onShard("7", nil), 1)}},
			dep(true, onShard("7", nil)), dep(false, onShard("7", nil)), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Workloads: tc.workloads}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Update, depKind, tc.now, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want %q: %s", tc.msg, raw)
			}
		})
	}
}
