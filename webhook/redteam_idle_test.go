package webhook_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The third red team's open gap (issue 17): an object that runs no pods — a Deployment,
// ReplicaSet or ReplicationController at `replicas: 0`, a suspended Job or CronJob, a Job of
// parallelism 0, a StatefulSet at 0 whose pods share one explicit shard — was judged armed when it
// was created or its template armed, and never again: created while its Lease was live, then
// scaled up or resumed after the Lease died, it was admitted, and its pods (exempt through it)
// ran armed on a dead election. The rule now: the shards an object runs armed are none while it
// runs no pods, so starting to run them is the transition the order check covers.

// idle is the armed writer (one explicit shard) as obj of kind, edited.
func idle(kind schema.GroupVersionKind, edit func(obj runtime.Object)) func(testing.TB) *webhook.Workload {
	return func(t testing.TB) *webhook.Workload {
		s := sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...)
		tpl := s.Spec.Template
		var obj runtime.Object
		switch kind {
		case gvkSTS:
			obj = s
		case gvkDep:
			obj = deployment(s)
		case gvkRS:
			obj = &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
				ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}, Spec: appsv1.ReplicaSetSpec{Selector: s.Spec.Selector, Template: tpl}}
		case gvkRC:
			obj = replicationController(s)
		case gvkJob:
			j := job(s, "CronJob")
			j.OwnerReferences = nil
			obj = j
		case gvkCJ:
			j := job(s, "CronJob")
			obj = &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}, Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: j.Spec}}}
		}
		if edit != nil {
			edit(obj)
		}
		return workload(t, kind, obj)
	}
}

func replicas(n int32) func(runtime.Object) {
	return func(obj runtime.Object) {
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			o.Spec.Replicas = ptr.To(n)
		case *appsv1.Deployment:
			o.Spec.Replicas = ptr.To(n)
		case *appsv1.ReplicaSet:
			o.Spec.Replicas = ptr.To(n)
		case *corev1.ReplicationController:
			o.Spec.Replicas = ptr.To(n)
		}
	}
}

func suspended(on bool) func(runtime.Object) {
	return func(obj runtime.Object) {
		switch o := obj.(type) {
		case *batchv1.Job:
			o.Spec.Suspend = ptr.To(on)
		case *batchv1.CronJob:
			o.Spec.Suspend = ptr.To(on)
		}
	}
}

func TestAnObjectThatRunsNoPodsArmsWhenItStarts(t *testing.T) {
	dead := func(r *wt.Resolver) { clear(r.Leases) }
	update := func(kind schema.GroupVersionKind, old, now func(runtime.Object)) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Update, Old: idle(kind, old)(t), Object: idle(kind, now)(t)}
		}
	}
	create := func(kind schema.GroupVersionKind, now func(runtime.Object)) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: idle(kind, now)(t)}
		}
	}
	both := func(fs ...func(runtime.Object)) func(runtime.Object) {
		return func(o runtime.Object) {
			for _, f := range fs {
				f(o)
			}
		}
	}
	parallelism := func(n int32) func(runtime.Object) {
		return func(o runtime.Object) { o.(*batchv1.Job).Spec.Parallelism = ptr.To(n) }
	}
	jobsSuspended := func(o runtime.Object) { o.(*batchv1.CronJob).Spec.JobTemplate.Spec.Suspend = ptr.To(true) }
	image := func(o runtime.Object) {
		if d, ok := o.(*appsv1.Deployment); ok {
			d.Spec.Template.Spec.Containers[0].Image = "writer:2"
		}
	}
	const orderChecked = "ehdb-shard-00000000 (shard 0) does not exist"
	const idleWarning = "runs no pods"
	refused := []webhook.Reason{webhook.ReasonLeaseNotLive}
	rows := []row{
		// Starting to run pods is the transition.
		{name: "a Deployment scaled 0 → 1 after its Lease died", cluster: dead, input: update(gvkDep, replicas(0), replicas(1)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a ReplicaSet scaled 0 → 2 after its Lease died", cluster: dead, input: update(gvkRS, replicas(0), replicas(2)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a ReplicationController scaled 0 → 1 after its Lease died", cluster: dead, input: update(gvkRC, replicas(0), replicas(1)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a StatefulSet on one explicit shard scaled 0 → 1 after its Lease died", cluster: dead, input: update(gvkSTS, replicas(0), replicas(1)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a suspended Job resumed after its Lease died", cluster: dead, input: update(gvkJob, suspended(true), suspended(false)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a Job's parallelism raised from 0 after its Lease died", cluster: dead, input: update(gvkJob, parallelism(0), parallelism(1)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a suspended CronJob resumed after its Lease died", cluster: dead, input: update(gvkCJ, suspended(true), suspended(false)), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		{name: "a CronJob whose Jobs were made suspended, changed to make them run", cluster: dead, input: update(gvkCJ, jobsSuspended, nil), unmet: refused, msg: []string{orderChecked}, lookups: -1},
		// With a live Lease each of them starts.
		{name: "a Deployment scaled 0 → 1 with its Lease live", input: update(gvkDep, replicas(0), replicas(1)), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a suspended Job resumed with its Lease live", input: update(gvkJob, suspended(true), suspended(false)), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		// While it runs no pods nothing is armed yet: no Lease is asked for (a writer scaled to 0
		// has let its Lease expire), and the scale-up is judged.
		{name: "a Deployment created at replicas 0 on a dead Lease", cluster: dead, input: create(gvkDep, replicas(0)), allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{idleWarning}, lookups: -1},
		{name: "a Deployment at replicas 0 edited, its Lease long dead", cluster: dead, input: update(gvkDep, replicas(0), both(replicas(0), image)), allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{idleWarning}, lookups: -1},
		{name: "a suspended Job created on a dead Lease", cluster: dead, input: create(gvkJob, suspended(true)), allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{idleWarning}, lookups: -1},
		// What stays as it was: one shard's pods added to or taken away, and the rest of the rules.
		{name: "a Deployment scaled 1 → 3 with its Lease dead (the same shard)", cluster: dead, input: update(gvkDep, replicas(1), replicas(3)), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a Deployment scaled 1 → 0", cluster: dead, input: update(gvkDep, replicas(1), replicas(0)), allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{idleWarning}, lookups: -1},
		{name: "a Deployment at replicas 0 still needs its election on", input: create(gvkDep, both(replicas(0), func(o runtime.Object) {
			c := &o.(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_ELECTION" })
		})), unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, warn: []string{idleWarning}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// idleWatch is a Workloads that holds one object, at the resourceVersion the scale names.
type idleWatch struct{ w *webhook.Workload }

func (f idleWatch) Workload(_, _, _ string) (*webhook.Workload, bool, bool) { return f.w, true, true }

// The scale subresource of the kinds whose pods share a shard reaches the guard too: `kubectl
// scale deployment --replicas=1` from 0 is the same transition as the spec edit.
func TestAOneShardKindScaledFromZeroThroughItsScale(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	for _, tc := range []struct {
		kind      schema.GroupVersionKind
		resource  metav1.GroupVersionResource
		from, to  int32
		allowed   bool
		wantInMsg string
	}{
		{gvkDep, metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, 0, 1, false, "ehdb-shard-00000000 (shard 0) does not exist"},
		{gvkRS, metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, 0, 3, false, "ehdb-shard-00000000 (shard 0) does not exist"},
		{gvkRC, metav1.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}, 0, 1, false, "ehdb-shard-00000000 (shard 0) does not exist"},
		{gvkSTS, metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, 0, 1, false, "ehdb-shard-00000000 (shard 0) does not exist"},
		{gvkDep, metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, 1, 4, true, ""},
	} {
		t.Run(tc.resource.Resource, func(t *testing.T) {
			cur := idle(tc.kind, replicas(tc.from))(t)
			cur.ResourceVersion = "7"
			scale := func(n int32) *autoscalingv1.Scale {
				return &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
					ObjectMeta: metav1.ObjectMeta{Name: cur.Name, Namespace: ns, ResourceVersion: "7"}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
			}
			body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "scale", Kind: metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
					Resource: tc.resource, SubResource: "scale", Operation: admissionv1.Update, Namespace: ns, Name: cur.Name,
					Object: runtime.RawExtension{Object: scale(tc.to)}, OldObject: runtime.RawExtension{Object: scale(tc.from)}}})
			if err != nil {
				t.Fatal(err)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Workloads: idleWatch{cur}}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("%s scaled %d → %d: allowed=%v, want %v: %s", tc.kind.Kind, tc.from, tc.to, out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.wantInMsg) {
				t.Fatalf("want %q: %s", tc.wantInMsg, raw)
			}
		})
	}
}

// An owner that runs no pods accounts for none: a ReplicaSet scaled up under a Deployment at 0
// (scaled directly, not by the Deployment controller, which scales it only after the Deployment,
// judged), a Job resumed under a CronJob that makes its Jobs suspended, and a Pod naming a
// ReplicaSet at 0 are each judged themselves.
func TestAnOwnerThatRunsNoPodsAccountsForNone(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	withShard := wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")
	tpl := deployment(sts(append(compliant(), withShard)...)).Spec.Template
	dep := func(n int32) *appsv1.Deployment {
		return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "dep-uid"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(n), Template: *tpl.DeepCopy()}}
	}
	rs := func(n int32) *appsv1.ReplicaSet {
		t := tpl.DeepCopy()
		t.Labels["pod-template-hash"] = "5d9c7b8f6"
		return &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
			ObjectMeta: metav1.ObjectMeta{Name: "w-5d9c7b8f6", Namespace: ns, UID: "rs-uid", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: "dep-uid", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(n), Template: *t}}
	}
	jobTpl := tpl.DeepCopy()
	jobTpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	cron := func(jobsSuspended bool) *batchv1.CronJob {
		return &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "cron-uid"},
			Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Suspend: ptr.To(jobsSuspended), Template: *jobTpl.DeepCopy()}}}}
	}
	jobOf := func(suspend bool) *batchv1.Job {
		t := jobTpl.DeepCopy()
		t.Labels["batch.kubernetes.io/job-name"], t.Labels["job-name"] = "c-29000000", "c-29000000"
		t.Labels["batch.kubernetes.io/controller-uid"], t.Labels["controller-uid"] = "job-uid", "job-uid"
		return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Name: "c-29000000", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "CronJob", Name: "c", UID: "cron-uid", Controller: ptr.To(true)}}},
			Spec: batchv1.JobSpec{Suspend: ptr.To(suspend), Template: *t}}
	}
	podOfRS := func() *corev1.Pod {
		p := barePod(sts(append(compliant(), withShard)...), "w-5d9c7b8f6-abcde")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "w-5d9c7b8f6", UID: "rs-uid", Controller: ptr.To(true)}}
		return saAdmitted(p)
	}
	const orderChecked = "ehdb-shard-00000000 (shard 0) does not exist"
	rsKind := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}
	jobKind := metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	runOwnerCases(t, cluster, orderChecked, []ownerCase{
		{"a ReplicaSet scaled 0 → 1 under its Deployment at 0", map[string]runtime.Object{"Deployment/" + ns + "/w": dep(0)}, rsKind, rs(1), rs(0), false},
		{"a ReplicaSet scaled 0 → 1 by the controller of its Deployment at 1 (crashed writer's Lease dead)", map[string]runtime.Object{"Deployment/" + ns + "/w": dep(1)}, rsKind, rs(1), rs(0), true},
		{"a ReplicaSet scaled down under its Deployment at 0", map[string]runtime.Object{"Deployment/" + ns + "/w": dep(0)}, rsKind, rs(0), rs(1), true},
		{"a Job resumed under a CronJob that makes its Jobs suspended", map[string]runtime.Object{"CronJob/" + ns + "/c": cron(true)}, jobKind, jobOf(false), jobOf(true), false},
		{"a Job of a CronJob whose Jobs run", map[string]runtime.Object{"CronJob/" + ns + "/c": cron(false)}, jobKind, jobOf(false), nil, true},
		{"a Pod naming a real ReplicaSet at 0", map[string]runtime.Object{"ReplicaSet/" + ns + "/w-5d9c7b8f6": rs(0)}, podKind, podOfRS(), nil, false},
		{"a Pod of a real ReplicaSet at 1", map[string]runtime.Object{"ReplicaSet/" + ns + "/w-5d9c7b8f6": rs(1)}, podKind, podOfRS(), nil, true},
	})
}
