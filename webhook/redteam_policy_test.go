package webhook_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The adversarial cases of issue 12 that are pure policy: each row is an attack (or an unlucky
// operator's object) and the answer the guard must give.

func controlledBy(apiVersion, kind string) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "anchor", UID: "0b1e2f", Controller: ptr.To(true)}}
	}
}

func fieldEnv(name, path string) func(*appsv1.StatefulSet) {
	return envVar(corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}})
}

func noAutomount(s *appsv1.StatefulSet) {
	s.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(false)
}

func projectedToken(mount bool) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Volumes = append(s.Spec.Template.Spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{
			Projected: kubeAPIAccess("")}})
		if mount {
			c := &s.Spec.Template.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
		}
	}
}

func job(s *appsv1.StatefulSet, ownerKind string) *batchv1.Job {
	tpl := s.Spec.Template
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: map[string]string{"CronJob": "batch/v1", "Deployment": "apps/v1"}[ownerKind], Kind: ownerKind, Name: "o", UID: "u", Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: tpl}}
}

func TestPolicyRedTeam(t *testing.T) {
	withShard := wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")
	rows := []row{
		// --- budgets ------------------------------------------------------------------------
		{name: "20000000 replicas without a shard: refused at once, no lookup per ordinal", sts: []func(*appsv1.StatefulSet){wt.Replicas(20000000)},
			unmet: []webhook.Reason{webhook.ReasonTooComplex}, msg: []string{"20000000 replicas", "at most 128 shards", "Fix: run at most 128 replicas"}, lookups: 6},
		{name: "2147483647 replicas", sts: []func(*appsv1.StatefulSet){wt.Replicas(2147483647)}, unmet: []webhook.Reason{webhook.ReasonTooComplex}, lookups: 6},
		{name: "129 replicas: one above the limit", sts: []func(*appsv1.StatefulSet){wt.Replicas(129)}, unmet: []webhook.Reason{webhook.ReasonTooComplex}, lookups: -1},
		{name: "128 replicas: judged, every shard's Lease", sts: []func(*appsv1.StatefulSet){wt.Replicas(128)},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist", "and 117 more"}, lookups: 6 + 128},
		{name: "20000000 replicas with an explicit shard: one Lease", sts: []func(*appsv1.StatefulSet){wt.Replicas(20000000), withShard},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: 7},
		{name: "more ConfigMaps than the guard reads", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			for i := range 33 {
				s.Spec.Template.Spec.Containers[0].EnvFrom = append(s.Spec.Template.Spec.Containers[0].EnvFrom, cmEnvFrom("cm-"+strings.Repeat("x", i), ""))
			}
		}}, unmet: []webhook.Reason{webhook.ReasonTooComplex}, msg: []string{"33 ConfigMaps", "at most 32"}, lookups: 0},
		// env overrides envFrom (the kubelet applies env last, the last entry of a name winning): a
		// literal NOETL_EHDB_FENCING=off leaves nothing in the ConfigMaps to arm it. It was refused as
		// too complex.
		{name: "33 ConfigMaps under a literal fencing=off: unarmed for certain", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			for i := range 33 {
				s.Spec.Template.Spec.Containers[0].EnvFrom = append(s.Spec.Template.Spec.Containers[0].EnvFrom, cmEnvFrom("cm-"+strings.Repeat("x", i), ""))
			}
		}, wt.SetEnv("NOETL_EHDB_FENCING", "off"), onOS(corev1.Linux)}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "33 ConfigMaps under a fencing value that refers to them: judged too complex", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			for i := range 33 {
				s.Spec.Template.Spec.Containers[0].EnvFrom = append(s.Spec.Template.Spec.Containers[0].EnvFrom, cmEnvFrom("cm-"+strings.Repeat("x", i), ""))
			}
		}, wt.SetEnv("NOETL_EHDB_FENCING", "$(MODE)")}, unmet: []webhook.Reason{webhook.ReasonTooComplex}, msg: []string{"33 ConfigMaps"}, lookups: 0},

		{name: "2000 Secret sources and 2000 references: resolved without quadratic work", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), unsetEnv("NOETL_EHDB_ELECTION"),
			func(s *appsv1.StatefulSet) {
				c := &s.Spec.Template.Spec.Containers[0]
				for i := range 2000 {
					c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("s%d", i)}}})
					c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("V%d", i), Value: "$(NOETL_EHDB_ELECTION)$(HOSTNAME)"})
				}
			}},
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable, webhook.ReasonElectionUnknowable}, msg: []string{"1996 more source(s)"}, warn: []string{"KUBERNETES_SERVICE_HOST"}, lookups: -1},
		{name: "1500 Secret prefixes of distinct lengths, 300 long references: bounded by the work budget", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			// Within the API server's 3 MiB: every lookup of a 1600-byte name must try 1500 prefixes.
			c := &s.Spec.Template.Spec.Containers[0]
			for i := 1; i <= 1500; i++ {
				c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: strings.Repeat("N", i), SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}})
			}
			for i := range 300 {
				c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("V%d", i), Value: "$(" + strings.Repeat("N", 1600) + ")"})
			}
		}}, unmet: []webhook.Reason{webhook.ReasonTooComplex}, msg: []string{"per-review work budget"}, lookups: 0},

		// --- no bypass ----------------------------------------------------------------------
		{name: "a StatefulSet controlled by a ConfigMap is order-checked", sts: []func(*appsv1.StatefulSet){controlledBy("v1", "ConfigMap")},
			cluster: func(r *wt.Resolver) { clear(r.Leases) }, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive},
			warn: []string{`controlled by v1 ConfigMap "anchor"`}, lookups: -1},
		{name: "a StatefulSet controlled by a custom resource is order-checked", sts: []func(*appsv1.StatefulSet){controlledBy("db.example.com/v1", "Writer")},
			cluster: func(r *wt.Resolver) { clear(r.Leases) }, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, warn: []string{"db.example.com/v1 Writer"}, lookups: -1},
		{name: "a Job of a CronJob is not order-checked", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, batchv1.SchemeGroupVersion.WithKind("Job"), job(sts(append(compliant(), withShard)...), "CronJob"))}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"order check skipped", "has this pod template and was judged on it"}, lookups: -1},
		{name: "a Job claiming a Deployment as controller is order-checked", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, batchv1.SchemeGroupVersion.WithKind("Job"), job(sts(append(compliant(), withShard)...), "Deployment"))}
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, warn: []string{"apps/v1 Deployment"}, lookups: -1},
		{name: "update from an unknowable fencing value to literal enforce gets the order check",
			old:     []func(*appsv1.StatefulSet){envVar(secretKey("NOETL_EHDB_FENCING", "writer-env", "fencing"))},
			cluster: func(r *wt.Resolver) { clear(r.Leases) }, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, lookups: -1},
		{name: "update from a ConfigMap-sourced enforce to literal enforce is not a transition",
			old: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))},
			cluster: func(r *wt.Resolver) {
				clear(r.Leases)
				r.ConfigMaps = map[string]map[string]string{"flags": {"fencing": "enforce"}}
			},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},

		// --- right answers ------------------------------------------------------------------
		{name: "automountServiceAccountToken false on the pod, no projected token", sts: []func(*appsv1.StatefulSet){noAutomount},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"cannot authenticate to the API server", "spec.template.spec.automountServiceAccountToken is false", "Fix: remove automountServiceAccountToken: false"}, lookups: -1},
		{name: "automount false with a projected token the container mounts", sts: []func(*appsv1.StatefulSet){noAutomount, projectedToken(true)},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "automount false with a projected token volume the container does not mount", sts: []func(*appsv1.StatefulSet){noAutomount, projectedToken(false)},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, lookups: -1},
		{name: "automount false on the ServiceAccount", cluster: func(r *wt.Resolver) { r.NoAutomount = map[string]bool{wt.WriterSA: true} },
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`ServiceAccount \"noetl-cmdbus-writer\" automountServiceAccountToken is false`}, lookups: -1},
		{name: "automount false on the ServiceAccount, true on the pod", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(true)
		}}, cluster: func(r *wt.Resolver) { r.NoAutomount = map[string]bool{wt.WriterSA: true} }, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "least privilege: get and update by resourceNames, create namespace-wide", sts: []func(*appsv1.StatefulSet){wt.Replicas(2)}, cluster: func(r *wt.Resolver) {
			clear(r.Allowed)
			r.Grant(ns, wt.WriterSA, ns, "create", "list", "watch")
			r.GrantNamed(ns, wt.WriterSA, ns, "ehdb-shard-00000000", "get", "update")
			r.GrantNamed(ns, wt.WriterSA, ns, "ehdb-shard-00000001", "get", "update")
			r.Leases[lease(ns, 1)] = wt.LiveLease(ns, 1, now, 1).Spec
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "least privilege for the wrong shard", sts: []func(*appsv1.StatefulSet){wt.Replicas(2)}, cluster: func(r *wt.Resolver) {
			clear(r.Allowed)
			r.Grant(ns, wt.WriterSA, ns, "create")
			r.GrantNamed(ns, wt.WriterSA, ns, "ehdb-shard-00000000", "get", "update")
			r.Leases[lease(ns, 1)] = wt.LiveLease(ns, 1, now, 1).Spec
		}, unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}, msg: []string{"may not get, update coordination.k8s.io leases", "ehdb-shard-00000001"}, lookups: -1},
		{name: "create cannot be granted by name", cluster: func(r *wt.Resolver) {
			clear(r.Allowed)
			r.GrantNamed(ns, wt.WriterSA, ns, "ehdb-shard-00000000", "get", "update", "create")
		}, unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}, msg: []string{"may not create coordination"}, lookups: -1},
		{name: "an authorizer evaluation error is could-not-verify, not unbound", cluster: func(r *wt.Resolver) {
			clear(r.Allowed)
			r.EvaluationError = "webhook authorizer: connection refused"
		}, unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, msg: []string{"could not verify that ServiceAccount", "the authorizer could not decide (webhook authorizer: connection refused)"}, lookups: -1},
		{name: "shard from the pod-index label, per ordinal", sts: []func(*appsv1.StatefulSet){wt.Replicas(3), fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.labels['apps.kubernetes.io/pod-index']")},
			cluster: func(r *wt.Resolver) { r.Leases[lease(ns, 1)] = wt.LiveLease(ns, 1, now, 1).Spec },
			unmet:   []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000002 (shard 2) does not exist"}, lookups: -1},
		{name: "shard from the pod-index label, all Leases live", sts: []func(*appsv1.StatefulSet){wt.Replicas(2), fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.labels['apps.kubernetes.io/pod-index']")},
			cluster: func(r *wt.Resolver) { r.Leases[lease(ns, 1)] = wt.LiveLease(ns, 1, now, 1).Spec },
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "HOSTNAME from metadata.name, per ordinal", sts: []func(*appsv1.StatefulSet){wt.Replicas(2), fieldEnv("HOSTNAME", "metadata.name")},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist"}, lookups: -1},
		{name: "shard from the pod-name label is no number", sts: []func(*appsv1.StatefulSet){fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.labels['statefulset.kubernetes.io/pod-name']")},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{`NOETL_EHDB_ELECTION_SHARD=\"noetl-cmdbus-writer-0\"`}, lookups: -1},
		{name: "a literal U+FFFF cannot pose as an ordinal", sts: []func(*appsv1.StatefulSet){wt.SetEnv("IDX", "\uffff"), fieldEnv("POD", "metadata.name"),
			appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", Value: "$(IDX)"})},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, lookups: -1},
		{name: "a Pod the guard cannot verify is admitted with a warning", cluster: func(r *wt.Resolver) { r.SAErr = errors.New("connection refused") }, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, pod(sts(compliant()...), "noetl-cmdbus-writer-0"))}
		}, allowed: true, reason: webhook.ReasonUnverifiedPod, warn: []string{"could not verify this Pod and admits it", "connection refused"}, lookups: -1},
		{name: "a Pod with a real problem and a failed lookup is refused", cluster: func(r *wt.Resolver) { r.AccessErr = errors.New("timeout") }, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, pod(sts(wt.Armed(), wt.ServiceAccount(wt.WriterSA)), "noetl-cmdbus-writer-0"))}
		}, unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonCouldNotVerify}, lookups: -1},
		{name: "a workload the guard cannot verify is still refused", cluster: func(r *wt.Resolver) { r.SAErr = errors.New("connection refused") },
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, lookups: -1},

		// --- arming through a ConfigMap -----------------------------------------------------
		{name: "a ConfigMap edit that arms a reader gets the order check", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: cmChange("shadow", "enforce", true),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"(through ConfigMap noetl/flags, which it reads)"}, lookups: -1},
		{name: "a ConfigMap created with enforce for a reader that waited on it", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: cmChange("", "enforce", false),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, lookups: -1},
		{name: "a ConfigMap edit that arms a reader with its Lease live", input: cmChange("off", "enforce", true), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a ConfigMap edit of a reader already enforcing: judged, no shard added, no order check", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: cmChange("enforce", " Enforce", true),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: 6},
		{name: "a ConfigMap edit that disarms", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: cmChange("enforce", "shadow", true),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// cmChange is a review of ConfigMap "flags" (key fencing: from -> to; from "" with existed=false
// is a create) as the reference writer, which reads NOETL_EHDB_FENCING from it, sees it.
func cmChange(from, to string, existed bool) func(t testing.TB) webhook.Input {
	return func(t testing.TB) webhook.Input {
		w := workload(t, gvkSTS, sts(append(compliant(), envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)))...))
		old := webhook.ConfigMapFact{NotFound: true}
		if existed {
			old = webhook.ConfigMapFact{Data: map[string]string{"fencing": from}}
		}
		return webhook.Input{Operation: admissionv1.Update, Object: w, Old: w, ConfigMapChange: &webhook.ConfigMapChange{
			Name: "flags", Old: old, New: webhook.ConfigMapFact{Data: map[string]string{"fencing": to}}}}
	}
}
