package webhook_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The twenty-sixth red team (team C): a StatefulSet's controller makes the pods below a rollout's
// partition from the set's current revision, and nothing judged that revision as it would run.
// Created at replicas 0 armed (its order check deferred: it ran no pods), then updated in one step
// to replicas 1 and shadow under a partition above it, the set's Pod came from the armed revision,
// on a shard whose Lease had never been live; scaled up below the partition, and armed through a
// ConfigMap the revision reads, the same. Each is judged now as what the revision will run.
func TestWhatACurrentRevisionRunsIsJudged(t *testing.T) {
	const uid = "sts-uid"
	held := func(s *appsv1.StatefulSet, replicas int32) *appsv1.StatefulSet {
		s = s.DeepCopy()
		s.UID, s.Spec.Replicas = uid, ptr.To(replicas)
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](5)}}
		return s
	}
	revision := func(name string, tmpl corev1.PodTemplateSpec) *appsv1.ControllerRevision {
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
		if err != nil {
			t.Fatal(err)
		}
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: wt.WriterName, UID: k8stypes.UID(uid), Controller: ptr.To(true)}}},
			Data: runtime.RawExtension{Raw: raw}, Revision: 1}
	}
	shadow := append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "shadow"}))

	// Variant 3: created at 0 armed (revision r1, current and update), updated to 1 and shadow.
	armedAt0 := held(sts(compliant()...), 0)
	armedAt0.Status.CurrentRevision, armedAt0.Status.UpdateRevision = wt.WriterName+"-r1", wt.WriterName+"-r1"
	shadowAt1 := held(sts(shadow...), 1)
	shadowAt1.Status = armedAt0.Status
	r1 := revision(wt.WriterName+"-r1", armedAt0.Spec.Template)

	// Variant 2: mid-rollout (r1 armed current, r2 shadow update) at 1, scaled to 2 below the partition.
	rolling := held(sts(shadow...), 1)
	rolling.Status.CurrentRevision, rolling.Status.UpdateRevision, rolling.ResourceVersion = wt.WriterName+"-r1", wt.WriterName+"-r2", "7"

	// Variant 1: the revision reads its fencing switch from ConfigMap mode (shadow); the template
	// reads it too but sets shadow after it. The ConfigMap set to enforce arms the revision's pods.
	fromMode := append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", "")))
	viaMode := held(sts(fromMode...), 2)
	modeRev := revision(wt.WriterName+"-r1", viaMode.Spec.Template)
	viaMode = held(sts(append(fromMode, envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "shadow"}))...), 2)
	viaMode.Status.CurrentRevision, viaMode.Status.UpdateRevision = wt.WriterName+"-r1", wt.WriterName+"-r2"
	mode := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: map[string]string{"NOETL_EHDB_FENCING": v}}
	}

	// A canary started on an armed set (r1 its template, on every ordinal): ordinal 0 keeps r1,
	// which it ran armed already, so nothing new is armed there, live Lease or not.
	armed := held(sts(compliant()...), 2)
	armed.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0)
	armed.Status = armedAt0.Status
	canary := held(sts(append(compliant(), envVar(corev1.EnvVar{Name: "CANARY", Value: "1"}))...), 2)
	canary.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](1)
	canary.Status = armedAt0.Status

	// Team E #1: type RollingUpdate with no rollingUpdate (the API server fills it in only when the
	// type is empty): the controller makes the ordinals below status.currentReplicas from the
	// current revision.
	noRolling := func(s *appsv1.StatefulSet) *appsv1.StatefulSet {
		s = s.DeepCopy()
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
		return s
	}
	nilArmed, nilShadow := noRolling(armedAt0), noRolling(shadowAt1)
	nilArmed.Status.CurrentReplicas, nilShadow.Status.CurrentReplicas = 1, 1

	scaleBody := func(from, to int32) []byte {
		scale := func(n int32) *autoscalingv1.Scale {
			return &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
				ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName, Namespace: ns, ResourceVersion: "7"}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
		}
		body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "scale", Kind: metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
				Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, SubResource: "scale", Operation: admissionv1.Update, Namespace: ns, Name: wt.WriterName,
				Object: runtime.RawExtension{Object: scale(to)}, OldObject: runtime.RawExtension{Object: scale(from)}}})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	watched := func(s *appsv1.StatefulSet) *webhook.Workload {
		w, err := webhook.WorkloadOf(s, ns)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, tc := range []struct {
		name    string
		body    func() []byte
		rev     *appsv1.ControllerRevision
		watch   *webhook.Workload
		readers []any
		live    []uint32 // shards whose Lease is live
		allowed bool
		msg     string
	}{
		{"created at 0 armed, updated to 1 and shadow under the partition", func() []byte { return wt.Review(t, admissionv1.Update, stsKind, shadowAt1, armedAt0) },
			r1, nil, nil, nil, false, "current revision " + wt.WriterName + "-r1"},
		{"the same with the shard's Lease live", func() []byte { return wt.Review(t, admissionv1.Update, stsKind, shadowAt1, armedAt0) },
			r1, nil, nil, []uint32{0}, true, ""},
		{"no rollingUpdate: the ordinals below currentReplicas come from the current revision", func() []byte { return wt.Review(t, admissionv1.Update, stsKind, nilShadow, nilArmed) },
			r1, nil, nil, nil, false, "current revision " + wt.WriterName + "-r1"},
		{"a canary started on an armed set whose Leases lapsed", func() []byte { return wt.Review(t, admissionv1.Update, stsKind, canary, armed) },
			revision(wt.WriterName+"-r1", armed.Spec.Template), nil, nil, nil, true, ""},
		{"scaled up below the partition onto the armed revision", func() []byte { return scaleBody(1, 2) },
			r1, watched(rolling), nil, []uint32{0}, false, "ehdb-shard-00000001 (shard 1) does not exist"},
		{"the ConfigMap its current revision reads set to enforce", func() []byte { return configMapReview(t, admissionv1.Update, cmGVK, mode("enforce"), mode("shadow")) },
			modeRev, nil, []any{viaMode}, nil, false, "current revision " + wt.WriterName + "-r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := goodCluster()
			clear(cluster.Leases)
			for _, s := range tc.live {
				cluster.Leases[lease(ns, s)] = wt.LiveLease(ns, s, now, 3).Spec
			}
			cluster.ConfigMaps = map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "enforce"}}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Clock: clocktesting.NewFakePassiveClock(now),
				Owners: fakeOwners{owners: map[string]runtime.Object{"ControllerRevision/" + ns + "/" + tc.rev.Name: tc.rev}}}
			if tc.watch != nil {
				h.Workloads = idleWatch{tc.watch}
			}
			if tc.readers != nil {
				h.Readers = fakeReaders(t, tc.readers...)
			}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", tc.body())
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %.900s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if tc.msg != "" && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("the refusal does not say %q: %.900s", tc.msg, raw)
			}
		})
	}
}
