package webhook_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The twelfth red team: a canary rollout of an armed StatefulSet held at partition 1. Its
// controller makes the pod of ordinal 0 from the current revision, not from spec.template
// (newVersionedStatefulSetPod), so when that writer crashed and its Pod was deleted, the guard
// found the replacement was not its set's template, judged it bare, and refused it as
// lease_not_live: the one Pod that could renew the Lease, 25 times, until the rollout was undone.
// Now such a Pod, with the containers of the revision its set names current, is admitted ("could
// not verify", as the guard judges templates, not revisions) on a shard whose election has minted
// before; anything else stays judged.
func TestAPodBelowTheCanaryPartitionIsItsCurrentRevisions(t *testing.T) {
	old := sts(compliant()...) // revision w-r1: what ordinal 0 runs
	canary := sts(append(compliant(), envVar(corev1.EnvVar{Name: "CANARY", Value: "1"}))...)
	canary.UID, canary.Spec.Replicas = "sts-uid", ptr.To[int32](2)
	canary.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}
	canary.Status.CurrentRevision, canary.Status.UpdateRevision = canary.Name+"-r1", canary.Name+"-r2"
	revision := func(name string, uid string, tmpl corev1.PodTemplateSpec) *appsv1.ControllerRevision {
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
		if err != nil {
			t.Fatal(err)
		}
		raw = []byte(strings.Replace(string(raw), `"template":{`, `"template":{"$patch":"replace",`, 1)) // as getPatch writes it
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: canary.Name, UID: k8stypes.UID(uid), Controller: ptr.To(true)}}},
			Data: runtime.RawExtension{Raw: raw}, Revision: 1}
	}
	cached := canary.DeepCopy() // as the webhook's watch holds it
	if _, err := webhook.StripForReaders(cached); err != nil {
		t.Fatal(err)
	}
	owners := func(revOwner string) fakeOwners {
		return fakeOwners{owners: map[string]runtime.Object{
			"StatefulSet/" + ns + "/" + canary.Name:                cached,
			"ControllerRevision/" + ns + "/" + canary.Name + "-r1": revision(canary.Name+"-r1", revOwner, old.Spec.Template),
		}}
	}
	// The set held at a partition above its replicas (a paused rollout).
	paused := owners("sts-uid")
	held := cached.DeepCopy()
	held.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](10)
	paused.owners["StatefulSet/"+ns+"/"+canary.Name] = held
	podOf := func(from *appsv1.StatefulSet, ordinal, rev string) *corev1.Pod {
		p := pod(from, canary.Name+"-"+ordinal)
		p.OwnerReferences[0].UID = "sts-uid"
		p.Labels = map[string]string{"controller-revision-hash": canary.Name + "-" + rev}
		return p
	}
	other := sts(append(compliant(), envVar(corev1.EnvVar{Name: "OTHER", Value: "x"}))...)
	// The leases: a crashed writer's, minted and expired; none (the shard was never elected: a
	// set scaled up below its partition onto the current revision); one never minted.
	expired := func(r *wt.Resolver) {
		for _, s := range []uint32{0, 1} {
			r.Leases[lease(ns, s)] = wt.LiveLease(ns, s, now.Add(-time.Hour), 3).Spec
		}
	}
	none := func(r *wt.Resolver) {}
	unminted := func(r *wt.Resolver) { r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now.Add(-time.Hour), 0).Spec }
	cases := []struct {
		name    string
		owners  fakeOwners
		leases  func(*wt.Resolver)
		obj     *corev1.Pod
		allowed bool
		msg     string
	}{
		{"ordinal 0 made from the current revision (a crashed writer's replacement)", owners("sts-uid"), expired, podOf(old, "0", "r1"), true, "current revision " + canary.Name + "-r1"},
		{"ordinal 1 made from the update revision (the canary)", owners("sts-uid"), expired, podOf(canary, "1", "r2"), true, ""},
		{"ordinal 0 naming the current revision with containers of neither", owners("sts-uid"), expired, podOf(other, "0", "r1"), false, "(shard 0) expired"},
		{"ordinal 1, above the partition, with the current revision's containers", owners("sts-uid"), expired, podOf(old, "1", "r1"), false, "(shard 1) expired"},
		{"ordinal 0 naming the update revision with the current revision's containers", owners("sts-uid"), expired, podOf(old, "0", "r2"), false, "(shard 0) expired"},
		{"a revision of that name another set controls", owners("another-uid"), expired, podOf(old, "0", "r1"), false, "(shard 0) expired"},
		// The thirteenth red team: a hand-made Pod of an ordinal the set does not have, below a
		// partition above the replicas, on a shard elected long ago (a set scaled down since).
		{"ordinal 5, below the partition but beyond the replicas, its shard elected before", paused, func(r *wt.Resolver) {
			r.Leases[lease(ns, 5)] = wt.LiveLease(ns, 5, now.Add(-time.Hour), 2).Spec
		}, podOf(old, "5", "r1"), false, "(shard 5) expired"},
		{"ordinal 0 of the paused rollout from the current revision, its shard elected before", paused, expired, podOf(old, "0", "r1"), true, "current revision"},
		{"ordinal 0 from the current revision on a shard never elected", owners("sts-uid"), none, podOf(old, "0", "r1"), false, "(shard 0) does not exist"},
		{"ordinal 0 from the current revision on a shard never minted", owners("sts-uid"), unminted, podOf(old, "0", "r1"), false, "no fencing token has been minted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := goodCluster()
			clear(cluster.Leases)
			tc.leases(cluster)
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Owners: tc.owners}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, saAdmitted(tc.obj), nil))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if tc.msg != "" && !strings.Contains(raw, tc.msg) {
				t.Fatalf("want %q in the answer: %s", tc.msg, raw)
			}
		})
	}
}
