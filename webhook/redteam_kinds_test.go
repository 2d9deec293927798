package webhook_test

import (
	"errors"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// Issue 17, classes 4 (kinds and paths not reviewed) and 3 (what the kubelet or a controller
// decides, trusted from the template): each row is an object that was judged wrongly before.

var (
	gvkRC  = corev1.SchemeGroupVersion.WithKind("ReplicationController")
	gvkJob = batchv1.SchemeGroupVersion.WithKind("Job")
)

func replicationController(s *appsv1.StatefulSet) *corev1.ReplicationController {
	tpl := s.Spec.Template
	return &corev1.ReplicationController{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ReplicationController"},
		ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: ns},
		Spec:       corev1.ReplicationControllerSpec{Replicas: ptr.To[int32](2), Selector: s.Spec.Template.Labels, Template: &tpl}}
}

// barePod is the writer's pod template as a Pod of its own, named name, controlled by no one.
func barePod(s *appsv1.StatefulSet, name string) *corev1.Pod {
	p := pod(s, name)
	p.OwnerReferences = nil
	return p
}

func indexedJob(s *appsv1.StatefulSet) *batchv1.Job {
	j := job(s, "CronJob")
	j.OwnerReferences = nil
	j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	j.Spec.Completions = ptr.To[int32](1)
	return j
}

func hostNetwork(s *appsv1.StatefulSet) { s.Spec.Template.Spec.HostNetwork = true }

// ephemeral is an UPDATE of the pods/ephemeralcontainers subresource adding c to the writer's pod.
func ephemeral(s *appsv1.StatefulSet, podName string, c corev1.EphemeralContainer) func(testing.TB) webhook.Input {
	return func(t testing.TB) webhook.Input {
		old := pod(s, podName)
		now := old.DeepCopy()
		now.Spec.EphemeralContainers = append(now.Spec.EphemeralContainers, c)
		return webhook.Input{Operation: admissionv1.Update, Subresource: "ephemeralcontainers",
			Object: workload(t, gvkPod, now), Old: workload(t, gvkPod, old)}
	}
}

var errBoom = errors.New("boom")

func TestKindsAndPathsRedTeam(t *testing.T) {
	withShard7 := wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7") // shard 7 has no Lease
	// The armed ephemeral containers mount the pod's token volume: the ServiceAccount plugin gives
	// them none (TestTheContainerAuthenticatesAsItsAccount), and these rows are about other rules.
	token := []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: saDir, ReadOnly: true}}
	armedDebug := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "busybox", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}, VolumeMounts: token}}
	unarmedDebug := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}
	rows := []row{
		// --- class 4: ReplicationController ---------------------------------------------------
		{name: "an armed ReplicationController without a Lease is refused", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkRC, replicationController(sts(append(compliant(), withShard7)...)))}
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ReplicationController noetl/rc", "ehdb-shard-00000007 (shard 7) does not exist"}, lookups: -1},
		{name: "a ReplicationController's Pod is exempt from the order check, like a ReplicaSet's", input: func(t testing.TB) webhook.Input {
			p := pod(sts(append(compliant(), withShard7)...), "rc-x7k2p")
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "v1", "ReplicationController"
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},

		// --- class 4: ephemeral containers ----------------------------------------------------
		{name: "an armed ephemeral container without the election is refused", input: ephemeral(sts(compliant()...), wt.WriterName+"-0", armedDebug),
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{"ephemeral container \"debug\"", "election is not enabled"}, lookups: -1},
		{name: "an ephemeral container that arms an unarmed pod faces the order check", input: ephemeral(sts(wt.ServiceAccount(wt.WriterSA), withShard7), wt.WriterName+"-0",
			corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox", Env: []corev1.EnvVar{
				{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}, {Name: "NOETL_EHDB_ELECTION_SHARD", Value: "7"}}, VolumeMounts: token}}),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000007 (shard 7) does not exist"}, lookups: -1},
		{name: "ephemeral containers fail closed: a lookup failure is not admitted", cluster: func(r *wt.Resolver) { r.SAErr, r.AccessErr, r.LeaseErr = errBoom, errBoom, errBoom },
			input: ephemeral(sts(wt.ServiceAccount(wt.WriterSA)), wt.WriterName+"-0", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}}, VolumeMounts: token}}),
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify, webhook.ReasonCouldNotVerify, webhook.ReasonCouldNotVerify}, lookups: -1},
		{name: "an unarmed ephemeral container on an unarmed pod is no business of the guard", input: ephemeral(sts(), wt.WriterName+"-0", unarmedDebug),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},

		// --- class 4: arming that adds shards -------------------------------------------------
		{name: "an armed StatefulSet created with replicas 0 arms no shard", sts: []func(*appsv1.StatefulSet){wt.Replicas(0)},
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"runs no pods"}, lookups: -1},
		{name: "replicas 0 -> 3 of an armed StatefulSet needs the new ordinals' Leases", sts: []func(*appsv1.StatefulSet){wt.Replicas(3)}, old: []func(*appsv1.StatefulSet){wt.Replicas(0)},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist", "ehdb-shard-00000002 (shard 2) does not exist"}, lookups: -1},
		{name: "scaling an armed StatefulSet up from 1 to 2 checks only the new ordinal", sts: []func(*appsv1.StatefulSet){wt.Replicas(2)}, old: []func(*appsv1.StatefulSet){wt.Replicas(1)},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist"}, lookups: -1},
		{name: "scaling an armed StatefulSet up with every new Lease live is admitted", sts: []func(*appsv1.StatefulSet){wt.Replicas(2)}, old: []func(*appsv1.StatefulSet){wt.Replicas(1)},
			cluster: func(r *wt.Resolver) { r.Leases[lease(ns, 1)] = wt.LiveLease(ns, 1, now, 1).Spec },
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "scaling an armed StatefulSet down adds no shard", sts: []func(*appsv1.StatefulSet){wt.Replicas(1)}, old: []func(*appsv1.StatefulSet){wt.Replicas(3)},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},

		// --- class 4: a bare Pod whose election will certainly decline -----------------------
		{name: "an armed bare Pod whose own name gives no shard is refused", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, barePod(sts(compliant()...), "writer-debug"))}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"the pod hostname \"writer-debug\" gives the election no shard"}, lookups: -1},
		{name: "an armed bare Pod whose spec.hostname gives no shard is refused, whatever its name", input: func(t testing.TB) webhook.Input {
			p := barePod(sts(compliant()...), "writer-0")
			p.Spec.Hostname = "writer"
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"the pod hostname \"writer\""}, lookups: -1},
		{name: "an armed bare Pod named after shard 0 is admitted", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, barePod(sts(compliant()...), "writer-0"))}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},

		// --- class 3: the kubelet's hostname ---------------------------------------------------
		{name: "a host-network StatefulSet's pods have the node's hostname: no shard to check", sts: []func(*appsv1.StatefulSet){hostNetwork},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"host network", "its hostname is the node's"}, lookups: -1},
		{name: "a host-network StatefulSet with an explicit shard is judged on it", sts: []func(*appsv1.StatefulSet){hostNetwork, wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a host-network bare Pod named w-7 is not shard 7: no shard for its order check", input: func(t testing.TB) webhook.Input {
			s := sts(append(compliant(), hostNetwork)...)
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, barePod(s, "w-7"))}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"host network"}, lookups: -1},
		{name: "a template spec.hostname the StatefulSet controller overwrites is not the hostname", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", ""),
			func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Hostname = "pinned-7" }},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},

		// --- class 3: fields a controller sets per Pod -----------------------------------------
		{name: "an Indexed Job's completion-index annotation is never its template value", input: func(t testing.TB) webhook.Input {
			s := sts(append(compliant(), fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.annotations['batch.kubernetes.io/job-completion-index']"))...)
			j := indexedJob(s)
			j.Spec.Template.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": "0"}
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkJob, j)}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"job-completion-index", "set by the Job controller"}, lookups: -1},
		{name: "an Indexed Job's JOB_COMPLETION_INDEX is the controller's, not the template's reference", input: func(t testing.TB) webhook.Input {
			s := sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "$(JOB_COMPLETION_INDEX)"))...)
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkJob, indexedJob(s))}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, lookups: -1},
		{name: "a StatefulSet template's pod-index label is the controller's, not the template's", sts: []func(*appsv1.StatefulSet){wt.Replicas(2),
			fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.labels['apps.kubernetes.io/pod-index']"),
			func(s *appsv1.StatefulSet) { s.Spec.Template.Labels["apps.kubernetes.io/pod-index"] = "0" }},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist"}, lookups: -1},
		{name: "a Deployment template's pod-template-hash label is the controller's", input: func(t testing.TB) webhook.Input {
			s := sts(append(compliant(), fieldEnv("NOETL_EHDB_ELECTION_SHARD", "metadata.labels['pod-template-hash']"))...)
			s.Spec.Template.Labels["pod-template-hash"] = "0"
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkDep, deployment(s))}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"pod-template-hash"}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// Issue 17, class 5: a workload applied before the ConfigMap it reads (a common GitOps order) is
// not refused. The missing ConfigMap arms nothing now: no container that needs it starts until it
// exists, and its creation is a reviewed ConfigMap change.
func TestMissingConfigMapArmsNothingNow(t *testing.T) {
	plain := func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Env = nil // no NOETL_* variable at all
	}
	rows := []row{
		{name: "an unrelated Deployment envFrom a ConfigMap that does not exist yet", input: func(t testing.TB) webhook.Input {
			s := sts(plain, envFrom(cmEnvFrom("app-config", "")))
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkDep, deployment(s))}
		}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 1},
		{name: "a writer whose fencing key is not in its ConfigMap yet", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)), unsetEnv("NOETL_EHDB_ELECTION")},
			cluster: func(r *wt.Resolver) { r.ConfigMaps = map[string]map[string]string{"flags": {"other": "x"}} },
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 1},
		{name: "a missing ConfigMap does not hide a literal enforce", sts: []func(*appsv1.StatefulSet){envFrom(cmEnvFrom("app-config", "")), unsetEnv("NOETL_EHDB_ELECTION")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// Issue 17, class 9: Lease liveness for the order check is judged on the webhook's own clock (the
// watch saw the Lease renew within its leaseDurationSeconds), not renewTime — written by the
// holder's clock — against the webhook's wall clock.
func TestLeaseLivenessOnTheWebhooksClock(t *testing.T) {
	renewing := func(renewTime time.Time, seen time.Duration) func(r *wt.Resolver) {
		return func(r *wt.Resolver) {
			r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, renewTime, 1).Spec // leaseDurationSeconds 15
			r.Renewals = map[types.NamespacedName]time.Time{}
			if seen >= 0 {
				r.Renewals[lease(ns, 0)] = now.Add(-seen)
			}
		}
	}
	rows := []row{
		{name: "a holder whose clock is 1m40 behind, seen renewing 5 s ago, is live", cluster: renewing(now.Add(-100*time.Second), 5*time.Second),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a holder whose clock is an hour ahead, last seen renewing 20 s ago, is not live", cluster: renewing(now.Add(time.Hour), 20*time.Second),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"last seen renewing 20s ago by this webhook's clock"}, lookups: -1},
		{name: "a Lease never seen renewing since the webhook started is not live", cluster: renewing(now, -1),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"has not been seen renewing by this webhook"}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}
