package webhook_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The sixth red team (issue 17) on the local control plane.

// A ConfigMap or RBAC change is judged for the Pods its owner does not account for: the review
// dropped every Pod whose controller was among the readers with the same env, so a Pod of a
// StatefulSet held in deletion (whose edits are not judged, and whose Pods keep running: the
// garbage collector keeps them, the StatefulSet controller leaves them), and a Pod with another
// hostname (another shard) adopted by a ReplicaSet, were judged by nobody; the kubelet re-reads
// the ConfigMap at the next container start.
func TestChangesAreJudgedForThePodsTheirOwnerDoesNotAccountFor(t *testing.T) {
	electionFrom := func(cm string) []func(*appsv1.StatefulSet) {
		return append(compliant(), unsetEnv("NOETL_EHDB_ELECTION"), envVar(cmKey("NOETL_EHDB_ELECTION", cm, "on", false)))
	}
	set := sts(electionFrom("elect")...)
	set.UID = "sts-uid"
	deletingSet := set.DeepCopy()
	deletingSet.DeletionTimestamp, deletingSet.Finalizers = ptr.To(metav1.Now()), []string{"example.com/hold"}
	podOf := func(owner *appsv1.StatefulSet) *corev1.Pod {
		p := pod(owner, owner.Name+"-0")
		p.OwnerReferences[0].UID = owner.UID
		p.Spec.Hostname, p.Spec.Subdomain = p.Name, owner.Spec.ServiceName
		p.Labels = map[string]string{"app": "w", "statefulset.kubernetes.io/pod-name": p.Name, "apps.kubernetes.io/pod-index": "0"}
		return saAdmitted(p)
	}
	cm := func(on string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "elect", Namespace: ns}, Data: map[string]string{"on": on}}
	}
	// The adopted Pod: a ReplicaSet whose pods take their shard from the template's hostname w-0
	// (live); the Pod has hostname w-7 (no Lease), and both read fencing from ConfigMap mode.
	fencingFrom := append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), envVar(cmKey("NOETL_EHDB_FENCING", "mode", "fencing", false)))
	rsTpl := sts(fencingFrom...).Spec.Template
	rsTpl.Spec.Hostname = "w-0"
	rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "rs", Namespace: ns, UID: "rs-uid"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Template: rsTpl}}
	adopted := barePod(sts(fencingFrom...), "rs-x7")
	adopted.Spec.Hostname = "w-7"
	adopted.Labels = rsTpl.Labels
	adopted.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptr.To(true)}}
	mode := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "mode", Namespace: ns}, Data: map[string]string{"fencing": v}}
	}
	// The seventh red team: Pods adopted or labelled so that what their env or their credentials
	// read differs from their owner's template — another ServiceAccount, a pod-index label that is
	// not the ordinal in the name, another node — through fields the guard did not compare.
	otherAccount := saAdmitted(func() *corev1.Pod {
		p := adopted.DeepCopy()
		p.Name, p.Spec.Hostname, p.Spec.ServiceAccountName = "rs-sa", "w-0", "rt-nobind"
		return p
	}())
	fromIndex := append(fencingFrom, envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}}))
	indexed := sts(fromIndex...)
	indexed.UID = "sts-uid"
	relabelled := podOf(indexed)
	relabelled.Labels["apps.kubernetes.io/pod-index"] = "7"
	fromNode := append(fencingFrom, envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}))
	nodeTpl := sts(fromNode...).Spec.Template
	nodeTpl.Spec.NodeName = "0"
	nodeRS := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "rs", Namespace: ns, UID: "rs-uid"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Template: nodeTpl}}
	onNode7 := barePod(sts(fromNode...), "rs-n7")
	onNode7.Spec.NodeName, onNode7.Labels = "7", nodeTpl.Labels
	onNode7.OwnerReferences = adopted.OwnerReferences
	// Adopted with the token of another account mounted where client-go reads it: the owner's
	// template holds the plugin's token, so the edit was judged on credentials the Pod has not.
	otherToken := func() *corev1.Pod {
		p := adopted.DeepCopy()
		p.Name, p.Spec.Hostname = "rs-tok", "w-0"
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "stolen", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "default-token"}}})
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "stolen", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
		return saAdmitted(p)
	}()
	// The twenty-fifth red team (team A): a Pod adopted under a ReplicaSet whose template pins it
	// to Linux (spec.os), itself pinned to nothing: on a Windows node its containers read the
	// ConfigMap's noetl_ehdb_fencing as the fencing switch, which on Linux is another variable.
	fromMode := append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), wt.ServiceAccount("rt-nobind"),
		envFrom(corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "mode"}}}))
	linuxTpl := sts(fromMode...).Spec.Template
	linuxTpl.Spec.Hostname, linuxTpl.Spec.OS = "w-0", &corev1.PodOS{Name: corev1.Linux}
	linuxRS := rs.DeepCopy()
	linuxRS.Spec.Template = linuxTpl
	unpinned := barePod(sts(fromMode...), "rs-os")
	unpinned.Spec.Hostname, unpinned.Labels, unpinned.OwnerReferences = "w-0", linuxTpl.Labels, adopted.OwnerReferences
	lowerCase := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "mode", Namespace: ns},
		Data: map[string]string{"fencing": "shadow", "noetl_ehdb_fencing": "enforce"}}
	for _, tc := range []struct {
		name     string
		readers  []any
		kind     metav1.GroupVersionKind
		objName  string
		obj, old runtime.Object
		msg      string
	}{
		{"a Pod not pinned to Linux adopted under a Linux ReplicaSet, armed by a ConfigMap key only Windows reads", []any{linuxRS, saAdmitted(unpinned)}, cmGVK, "mode", lowerCase, mode("shadow"), "rt-nobind"},
		{"a Pod adopted with another ServiceAccount, armed by a ConfigMap edit", []any{rs, otherAccount}, cmGVK, "mode", mode("enforce"), mode("shadow"), "rt-nobind"},
		{"a StatefulSet Pod relabelled to pod-index 7, armed by a ConfigMap edit", []any{indexed, relabelled}, cmGVK, "mode", mode("enforce"), mode("shadow"), "ehdb-shard-00000007 (shard 7) does not exist"},
		{"a Pod adopted on another node, armed by a ConfigMap edit", []any{nodeRS, saAdmitted(onNode7)}, cmGVK, "mode", mode("enforce"), mode("shadow"), "ehdb-shard-00000007 (shard 7) does not exist"},
		{"election turned off under a Pod of a StatefulSet in deletion", []any{deletingSet, podOf(deletingSet)}, cmGVK, "elect", cm("false"), cm("true"), "election is not enabled"},
		{"the RoleBinding deleted under a Pod of a StatefulSet in deletion", []any{deletingSet, podOf(deletingSet)}, rbKind, chartRole, nil, roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA)), "refusing to disarm"},
		{"a Pod adopted with another shard's hostname, armed by a ConfigMap edit", []any{rs, saAdmitted(adopted)}, cmGVK, "mode", mode("enforce"), mode("shadow"), "ehdb-shard-00000007 (shard 7) does not exist"},
		{"a Pod adopted with another account's token at the token path, armed by a ConfigMap edit", []any{rs, otherToken}, cmGVK, "mode", mode("enforce"), mode("shadow"), "cannot authenticate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ownerRS := rs
			if r, ok := tc.readers[0].(*appsv1.ReplicaSet); ok {
				ownerRS = r
			}
			cluster := rbacCluster()
			cluster.ConfigMaps = map[string]map[string]string{"elect": {"on": "true"}, "mode": {"fencing": "enforce"}}
			readers := fakeReaders(t, tc.readers...)
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: readers, Readers: readers, Clock: clocktesting.NewFakePassiveClock(now),
				Owners: fakeOwners{owners: map[string]runtime.Object{"ReplicaSet/" + ns + "/rs": ownerRS, "StatefulSet/" + ns + "/" + set.Name: deletingSet}}}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			op := admissionv1.Update
			if tc.obj == nil {
				op = admissionv1.Delete
			}
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, op, tc.kind, tc.objName, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want it refused (%q): %s", tc.msg, raw)
			}
		})
	}
}

// An owner not judged for pods that run exempts nothing: a finished Job (its controller never acts
// on it again) and a paused Deployment (its controller makes no ReplicaSet while paused) exempted a
// Pod or a ReplicaSet made by hand in their name, on a shard with no Lease.
func TestOwnersThatMakeNothingExemptNothing(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	withShard := wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")
	jobTpl := sts(append(compliant(), withShard)...).Spec.Template
	jobTpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	finished := &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: ns, UID: "job-uid"},
		Spec:   batchv1.JobSpec{Template: jobTpl},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded"}}}}
	jobPod := barePod(sts(append(compliant(), withShard)...), "j-forged")
	jobPod.Spec.RestartPolicy = corev1.RestartPolicyNever
	jobPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "job-uid", Controller: ptr.To(true)}}
	depTpl := deployment(sts(append(compliant(), withShard)...)).Spec.Template
	paused := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "dep-uid"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Paused: true, Template: *depTpl.DeepCopy()}}
	rsTpl := depTpl.DeepCopy()
	rsTpl.Labels["pod-template-hash"] = "h"
	rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "w-h", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: "dep-uid", Controller: ptr.To(true)}}},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Template: *rsTpl}}
	runOwnerCases(t, cluster, "ehdb-shard-00000000 (shard 0) does not exist", []ownerCase{
		{"a Pod made in the name of a finished Job", map[string]runtime.Object{"Job/" + ns + "/j": finished}, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, saAdmitted(jobPod), nil, false},
		{"a ReplicaSet made in the name of a paused Deployment", map[string]runtime.Object{"Deployment/" + ns + "/w": paused}, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, rs, nil, false},
		// Scaling the ReplicaSets a paused Deployment has is its controller's own path.
		{"a paused Deployment's ReplicaSet scaled by its controller", map[string]runtime.Object{"Deployment/" + ns + "/w": paused}, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, rs, func() runtime.Object {
			o := rs.DeepCopy()
			o.Spec.Replicas = ptr.To[int32](2)
			return o
		}(), true},
	})
}

// No refusal quotes a ConfigMap value, not even one that is enforce in its own case and spacing.
func TestArmedFromAConfigMapIsNotQuoted(t *testing.T) {
	const odd = "  EnFoRcE\t "
	cluster := goodCluster()
	cluster.ConfigMaps = map[string]map[string]string{"mode": {"fencing": odd}}
	w := workload(t, gvkSTS, sts(append(compliant(), unsetEnv("NOETL_EHDB_ELECTION"), envVar(cmKey("NOETL_EHDB_FENCING", "mode", "fencing", false)))...))
	d, _ := webhook.Evaluate(t.Context(), cluster, webhook.Input{Operation: admissionv1.Create, Object: w}, webhook.Policy{RequireLiveLease: true}, now)
	if d.Allowed {
		t.Fatal("armed with election off: admitted")
	}
	if all := d.Message() + strings.Join(d.Warnings, "\n") + strings.Join(d.Armed, "\n"); strings.Contains(all, "EnFoRcE") {
		t.Fatalf("the refusal quotes the ConfigMap's value:\n%s", all)
	}
}

// The Pods of an Indexed Job carry the hostname its controller gives each (<job>-<index>), never
// the template's, which the guard judged on the Job as unknowable: they are judged through their
// Job. Each was judged itself, so a ConfigMap edit that 40 of them read was refused as too
// complex (the seventh red team), unarmed as they are.
func TestAnIndexedJobsPodsAreJudgedThroughTheirJob(t *testing.T) {
	j := indexedJob(sts(wt.SetEnv("NOETL_EHDB_FENCING", "shadow"), envFrom(cmEnvFrom("shared", ""))))
	j.Name, j.UID, j.Spec.Completions, j.Spec.Parallelism = "idx", "job-uid", ptr.To[int32](40), ptr.To[int32](40)
	readers := []any{j}
	for i := range 40 {
		p := barePod(sts(wt.SetEnv("NOETL_EHDB_FENCING", "shadow"), envFrom(cmEnvFrom("shared", ""))), "idx-"+strconv.Itoa(i)+"-abcde")
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Hostname = "idx-" + strconv.Itoa(i) // the Job controller's
		p.Labels = j.Spec.Template.Labels
		p.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(i)}
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}})
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "idx", UID: "job-uid", Controller: ptr.To(true)}}
		readers = append(readers, saAdmitted(p))
	}
	shared := func(level string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns},
			Data: map[string]string{"NOETL_LOG_LEVEL": level}}
	}
	cluster := goodCluster()
	cluster.ConfigMaps = map[string]map[string]string{"shared": {"NOETL_LOG_LEVEL": "debug"}}
	idx := fakeReaders(t, readers...)
	h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: idx, Accounts: idx, Clock: clocktesting.NewFakePassiveClock(now)}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Update, cmGVK, "shared", shared("debug"), shared("info")))
	if out.Response == nil || !out.Response.Allowed {
		t.Fatalf("a log-level edit read by an unarmed Indexed Job's 40 Pods: %s", raw)
	}
}
