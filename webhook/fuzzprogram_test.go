package webhook_test

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// This file answers: which admission review does one FuzzAdmissionReview input stand for?
//
// An input that starts with '{' is the body itself, as the API server (or anyone who can reach
// the webhook) might send it. Any other input is a program of at most fuzzMaxProgram choices
// that builds a review of one subject the guard judges — a workload of every kind, ephemeral
// containers, a StatefulSet's scale, a ConfigMap, RBAC and ServiceAccounts — and may then
// corrupt its bytes. Why programs: the engine minimizes every new interesting input by running
// the target on candidates about n²/2 times for an input of n bytes (internal/fuzz
// minimizeBytes), so a 1.3 KB review body costs it ~10⁶ runs — a minute of no fuzzing per new
// input — while a 64-byte program costs ~4,000; and a program reaches the semantic variants
// (a different kind, key, verb or operation) that byte mutations of JSON almost never produce.

// Bounds of FuzzAdmissionReview's inputs; the body a program builds is bounded by construction
// (a few containers and keys of fixed alphabets), so its work per input is that of one small
// review.
const (
	fuzzMaxProgram = 64
	fuzzMaxRaw     = 1 << 10
)

// fuzzBytes reads a program as a stream of small choices; past its end every choice is 0, so
// every input is a program and the shortest are the simplest reviews.
type fuzzBytes struct {
	data []byte
	i    int
}

func (b *fuzzBytes) pick(n int) int {
	if b.i >= len(b.data) {
		return 0
	}
	v := int(b.data[b.i]) % n
	b.i++
	return v
}

func (b *fuzzBytes) byte() byte {
	if b.i >= len(b.data) {
		return 0
	}
	v := b.data[b.i]
	b.i++
	return v
}

func (b *fuzzBytes) more() bool { return b.i < len(b.data) }

// fuzzBody is the review body an input stands for (see the top of this file). A program reads,
// in order: the subject, the envelope, the byte edits, then the subject's own choices, whose last
// (a container's env) takes whatever is left.
func fuzzBody(data []byte) []byte {
	if len(data) > 0 && data[0] == '{' {
		return data
	}
	b := &fuzzBytes{data: data}
	subject := b.pick(6)
	namespace := []string{ns, ns, "other", ""}[b.pick(4)]
	naming := b.pick(4) // 0, 1: the object's own name; 2: another; 3: none
	dryRun := b.pick(2) == 1
	edits := readEdits(b)
	var req *admissionv1.AdmissionRequest
	switch subject {
	case 0:
		req = workloadRequest(b)
	case 1:
		req = ephemeralRequest(b)
	case 2:
		req = configMapRequest(b)
	case 3:
		req = rbacRequest(b)
	case 4:
		req = scaleRequest(b)
	case 5:
		req = bindingRequest(b)
	}
	if req.Namespace != "" {
		req.Namespace = namespace
	}
	switch naming {
	case 2:
		req.Name = "other"
	case 3:
		req.Name = ""
	}
	req.UID = "8f8a0c4c-0000-4000-8000-000000000001"
	req.DryRun = ptr.To(dryRun)
	raw, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		panic(err) // typed objects always marshal
	}
	for _, e := range edits {
		raw = e.apply(raw)
	}
	return raw
}

// edit is one byte edit of a built body: what a buggy or hostile client sends near a valid
// review (a key in another case, a cut, a stray or missing byte).
type edit struct {
	op    int
	at, v byte // at: where, in 256ths of the body
}

// readEdits reads none (most programs) to three edits.
func readEdits(b *fuzzBytes) []edit {
	n := max(0, b.pick(8)-4)
	out := make([]edit, n)
	for i := range out {
		out[i] = edit{op: b.pick(4), at: b.byte(), v: b.byte()}
	}
	return out
}

func (e edit) apply(raw []byte) []byte {
	if len(raw) == 0 {
		return raw
	}
	at := int(e.at) * len(raw) / 256
	switch e.op {
	case 0:
		return append(raw[:at:at], raw[at+1:]...)
	case 1:
		return append(raw[:at:at], append([]byte{e.v}, raw[at:]...)...)
	case 2:
		raw[at] ^= 0x20 // ASCII case
		return raw
	default:
		return raw[:at]
	}
}

// The objects programs are made of: the reference writer's names, and others.
var (
	fzKinds    = []metav1.GroupVersionKind{{Version: "v1", Kind: "Pod"}, stsKind, {Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: "apps", Version: "v1", Kind: "DaemonSet"}, {Group: "apps", Version: "v1", Kind: "ReplicaSet"}, {Group: "batch", Version: "v1", Kind: "Job"}, {Group: "batch", Version: "v1", Kind: "CronJob"}, {Version: "v1", Kind: "ReplicationController"}}
	fzAccounts = []string{"", "default", wt.WriterSA}
	fzOwners   = []metav1.OwnerReference{{}, {APIVersion: "apps/v1", Kind: "StatefulSet", Name: wt.WriterName, UID: "u-sts", Controller: ptr.To(true)},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u-d", Controller: ptr.To(true)}, {APIVersion: "batch/v1", Kind: "CronJob", Name: "c", UID: "u-c", Controller: ptr.To(true)}}
	fzCMKeys   = []string{"fencing", "NOETL_EHDB_FENCING", "NOETL_EHDB_ELECTION", "NOETL_EHDB_ELECTION_SHARD", "NOETL_EHDB_ELECTION_NAMESPACE", "election", "MODE"}
	fzCMNames  = []string{"flags", "cm0", "missing"}
	fzRBACObjs = []string{chartRole, wt.WriterSA, "other"}
)

// fzWriter is the reference writer without what the guard never reads (image, ports, the grace
// period, all labels but app): a body half the size is half the decoding per input.
func fzWriter(opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := sts(opts...)
	labels := map[string]string{"app": wt.WriterName}
	s.Labels, s.Spec.Template.Labels = labels, labels
	spec := &s.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = nil
	spec.Containers[0].Image, spec.Containers[0].Ports = "", nil
	return s
}

// podSpec is the reference writer's pod spec with a program's containers and account.
func podSpec(b *fuzzBytes) corev1.PodSpec {
	spec := fzWriter().Spec.Template.Spec
	spec.ServiceAccountName = fzAccounts[b.pick(len(fzAccounts))]
	switch b.pick(4) {
	case 1:
		spec.HostNetwork = true
	case 2:
		spec.AutomountServiceAccountToken = ptr.To(false)
	case 3:
		spec.Hostname = "writer"
	}
	return spec
}

// withEnv gives one container of spec — the writer's, a second one, or an init container — the
// rest of the program as its env.
func withEnv(b *fuzzBytes, spec *corev1.PodSpec) {
	where := b.pick(3)
	c := envProgram(b)
	switch where {
	case 0:
		w := &spec.Containers[0]
		w.Env, w.EnvFrom = append(w.Env, c.Env...), c.EnvFrom
	case 1:
		c.Name = "sidecar"
		spec.Containers = append(spec.Containers, c)
	case 2:
		c.Name = "init"
		spec.InitContainers = append(spec.InitContainers, c)
	}
}

// workloadRequest is a CREATE or UPDATE of a workload of any judged kind.
func workloadRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	kind := fzKinds[b.pick(len(fzKinds))]
	op := []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete}[b.pick(3)]
	owner := fzOwners[b.pick(len(fzOwners))]
	replicas := []*int32{nil, ptr.To[int32](0), ptr.To[int32](3), ptr.To[int32](2147483647)}[b.pick(4)]
	oldOpts := [][]func(*appsv1.StatefulSet){nil, compliant(), {wt.Armed()}}[b.pick(3)]
	spec := podSpec(b)
	withEnv(b, &spec)
	obj := asKind(kind, spec, owner, replicas)
	req := &admissionv1.AdmissionRequest{Kind: kind, Operation: op, Namespace: ns, Name: wt.WriterName, Object: runtime.RawExtension{Object: obj}}
	if op != admissionv1.Create {
		old := fzWriter(oldOpts...)
		old.Spec.Replicas = replicas
		req.OldObject = runtime.RawExtension{Object: asKind(kind, old.Spec.Template.Spec, owner, replicas)}
	}
	if op == admissionv1.Delete {
		req.Object = runtime.RawExtension{}
	}
	return req
}

// asKind wraps a pod spec in an object of kind, named as the reference writer.
func asKind(kind metav1.GroupVersionKind, spec corev1.PodSpec, owner metav1.OwnerReference, replicas *int32) runtime.Object {
	s := fzWriter()
	s.Spec.Template.Spec = spec
	s.Spec.Replicas = replicas
	var obj runtime.Object
	switch kind.Kind {
	case "Pod":
		p := pod(s, wt.WriterName+"-0")
		p.OwnerReferences = nil
		obj = p
	case "StatefulSet":
		obj = s
	case "Deployment":
		obj = deployment(s)
	case "DaemonSet":
		obj = &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}, ObjectMeta: s.ObjectMeta,
			Spec: appsv1.DaemonSetSpec{Selector: s.Spec.Selector, Template: s.Spec.Template}}
	case "ReplicaSet":
		obj = &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}, ObjectMeta: s.ObjectMeta,
			Spec: appsv1.ReplicaSetSpec{Replicas: replicas, Selector: s.Spec.Selector, Template: s.Spec.Template}}
	case "Job":
		obj = &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: s.ObjectMeta,
			Spec: batchv1.JobSpec{Completions: replicas, Template: s.Spec.Template}}
	case "CronJob":
		obj = &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, ObjectMeta: s.ObjectMeta,
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: s.Spec.Template}}}}
	default:
		obj = replicationController(s)
	}
	if owner.Kind != "" {
		obj.(metav1.Object).SetOwnerReferences([]metav1.OwnerReference{owner})
	}
	return obj
}

// ephemeralRequest is an UPDATE of pods/ephemeralcontainers adding one container to the writer's
// Pod, or the same subresource asked with another operation.
func ephemeralRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	s := fzWriter([][]func(*appsv1.StatefulSet){nil, compliant(), {wt.Armed()}}[b.pick(3)]...)
	old := pod(s, wt.WriterName+"-0")
	op := admissionv1.Update
	if b.pick(8) == 7 {
		op = admissionv1.Create
	}
	c := envProgram(b)
	now := old.DeepCopy()
	now.Spec.EphemeralContainers = append(now.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "busybox", Env: c.Env, EnvFrom: c.EnvFrom}})
	return &admissionv1.AdmissionRequest{Kind: fzKinds[0], Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "ephemeralcontainers",
		Operation: op, Namespace: ns, Name: old.Name, Object: runtime.RawExtension{Object: now}, OldObject: runtime.RawExtension{Object: old}}
}

// cmData is up to three keys of the ConfigMap alphabet.
func cmData(b *fuzzBytes) map[string]string {
	d := map[string]string{}
	for n := b.pick(4); n > 0; n-- {
		d[fzCMKeys[b.pick(len(fzCMKeys))]] = fzValues[b.pick(len(fzValues))]
	}
	return d
}

// configMapRequest is a CREATE, UPDATE or DELETE of a ConfigMap (the readers' "flags" or another).
func configMapRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	op := []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete}[b.pick(3)]
	name := fzCMNames[b.pick(len(fzCMNames))]
	cm := func(d map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: d}
	}
	req := &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Operation: op, Namespace: ns, Name: name}
	// The old content first: most programs start from the cluster's (the election on).
	old := map[string]string{"NOETL_EHDB_ELECTION": "true", "fencing": "shadow"}
	if b.pick(2) == 1 {
		old = cmData(b)
	}
	if op != admissionv1.Create {
		req.OldObject = runtime.RawExtension{Object: cm(old)}
	}
	if op != admissionv1.Delete {
		req.Object = runtime.RawExtension{Object: cm(cmData(b))}
	}
	return req
}

// rbacRequest is a CREATE, UPDATE or DELETE of the chart's Role or RoleBinding, another, a
// ClusterRole or ClusterRoleBinding, or a ServiceAccount.
func rbacRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	op := []admissionv1.Operation{admissionv1.Update, admissionv1.Delete, admissionv1.Create}[b.pick(3)]
	name := fzRBACObjs[b.pick(len(fzRBACObjs))]
	req := &admissionv1.AdmissionRequest{Operation: op, Namespace: ns, Name: name}
	var old, now runtime.Object
	switch b.pick(5) {
	case 0:
		req.Kind = rbKind
		old, now = fuzzBinding(b, name), fuzzBinding(b, name)
	case 1:
		req.Kind = roleKind
		old, now = mkRole(name, fuzzRules(b)...), mkRole(name, fuzzRules(b)...)
	case 2:
		req.Kind, req.Namespace = crbKind, ""
		o, n := fuzzBinding(b, name), fuzzBinding(b, name)
		old = &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: o.RoleRef, Subjects: o.Subjects}
		now = &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: n.RoleRef, Subjects: n.Subjects}
	case 3:
		// A piece of the bound cluster's aggregated roles (fuzzAggregated), in or out of their
		// selectors, or one of them, its selector kept or changed.
		req.Kind, req.Namespace, req.Name = crKind, "", fzClusterRoles[b.pick(len(fzClusterRoles))]
		old, now = fuzzClusterRole(b, req.Name), fuzzClusterRole(b, req.Name)
	case 4:
		req.Kind = saGVK
		sa := func(automount *bool) *corev1.ServiceAccount {
			return &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, AutomountServiceAccountToken: automount}
		}
		mounts := []*bool{nil, ptr.To(false), ptr.To(true)}
		old, now = sa(mounts[b.pick(3)]), sa(mounts[b.pick(3)])
	}
	if op != admissionv1.Create {
		req.OldObject = runtime.RawExtension{Object: old}
	}
	if op != admissionv1.Delete {
		req.Object = runtime.RawExtension{Object: now}
	}
	return req
}

// fzAggLabel is the label the bound cluster's aggregated ClusterRoles select their pieces by.
const fzAggLabel = "example.com/aggregate-to-fuzz"

// fuzzClusterRole is a ClusterRole with rules of the lease alphabet, labelled into the aggregated
// roles' selector or not, and itself aggregating by it or not.
func fuzzClusterRole(b *fuzzBytes, name string) *rbacv1.ClusterRole {
	cr := &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: fuzzRules(b)}
	if b.pick(2) == 1 {
		cr.Labels = map[string]string{fzAggLabel: []string{"true", "false"}[b.pick(2)]}
	}
	if b.pick(3) == 2 {
		cr.AggregationRule = selecting([]string{fzAggLabel, "example.com/elsewhere"}[b.pick(2)])
	}
	return cr
}

// fzClusterRoles are the names a program's ClusterRole change edits: the bound cluster's
// (fuzzAggregated, fzWildRole), and one it does not have.
var fzClusterRoles = []string{"fz-piece", "fz-aggregated", "fz-outer", "other", fzWildRole}

// fuzzAggregated are the bound cluster's ClusterRoles: a piece, a role aggregating it and a role
// aggregating both, so a ClusterRole change walks a chain. None is bound to anyone, so no
// ClusterRole change may take the writer's access.
func fuzzAggregated() []rbacv1.ClusterRole {
	return []rbacv1.ClusterRole{
		*clusterRole("fz-piece", map[string]string{fzAggLabel: "true"}, nil, leaseRule),
		*clusterRole("fz-aggregated", map[string]string{fzAggLabel: "true"}, selecting(fzAggLabel), leaseRule),
		*clusterRole("fz-outer", nil, selecting(fzAggLabel), leaseRule),
	}
}

// fuzzBinding is a RoleBinding of a program's role to up to two of its subjects; the first
// choice 0 is the chart's own binding of the writer.
func fuzzBinding(b *fuzzBytes, name string) *rbacv1.RoleBinding {
	roleRefs := []rbacv1.RoleRef{{APIGroup: rbacv1.GroupName, Kind: "Role", Name: chartRole}, {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: chartRole},
		{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "other"}, {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fzWildRole}}
	subjects := []rbacv1.Subject{saSubject(wt.WriterSA), saSubject("other"), {Kind: "ServiceAccount", Name: wt.WriterSA}, {Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: "elsewhere"},
		{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}, {Kind: "User", APIGroup: rbacv1.GroupName, Name: "system:serviceaccount:" + ns + ":" + wt.WriterSA}}
	rb := roleBinding(name, "Role", chartRole)
	rb.RoleRef = roleRefs[b.pick(len(roleRefs))]
	switch b.pick(4) {
	case 0:
		rb.Subjects = []rbacv1.Subject{subjects[0]}
	case 1:
		rb.Subjects = []rbacv1.Subject{subjects[b.pick(len(subjects))]}
	case 2:
		rb.Subjects = []rbacv1.Subject{subjects[b.pick(len(subjects))], subjects[b.pick(len(subjects))]}
	}
	return rb
}

// fuzzRules are the chart's lease rule, or up to two rules of the lease alphabet.
func fuzzRules(b *fuzzBytes) []rbacv1.PolicyRule {
	if b.pick(2) == 0 {
		return []rbacv1.PolicyRule{fzChartLeaseRule}
	}
	groups := [][]string{{"coordination.k8s.io"}, {"*"}, {""}}
	resources := [][]string{{"leases"}, {"*"}, {"leases/status"}, {"configmaps"}}
	verbs := [][]string{{"get", "list", "watch", "create", "update"}, {"*"}, {"get", "update"}, {"create", "list", "watch"}, {"get"},
		{"get", "list", "watch", "create", "update", webhook.VerbElect}, {"update", webhook.VerbWildcardProbe}}
	names := [][]string{nil, {"ehdb-shard-00000000"}, {"ehdb-shard-00000001"}}
	var rules []rbacv1.PolicyRule
	for n := b.pick(3); n > 0; n-- {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: groups[b.pick(len(groups))], Resources: resources[b.pick(len(resources))],
			Verbs: verbs[b.pick(len(verbs))], ResourceNames: names[b.pick(len(names))]})
	}
	return rules
}

// scaleRequest is the scale subresource of a kind with a replica count (StatefulSet, Deployment,
// ReplicaSet, ReplicationController) changed from one replica count to another.
func scaleRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	counts := []int32{0, 1, 3, 2147483647}
	to, from := counts[b.pick(4)], counts[b.pick(4)]
	res := fzScaled[b.pick(len(fzScaled))]
	scale := func(n int32) *autoscalingv1.Scale {
		return &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName, Namespace: ns, UID: types.UID("u-sts")},
			Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	}
	return &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, Resource: res,
		SubResource: "scale", Operation: admissionv1.Update, Namespace: ns, Name: wt.WriterName,
		Object: runtime.RawExtension{Object: scale(to)}, OldObject: runtime.RawExtension{Object: scale(from)}}
}

// fzBindingLabels are the values a Binding's label e takes: the bound cluster's Pod reads its
// election from it (fzScaleTargets).
var fzBindingLabels = []string{"true", "false", "", "1", "TRUE", "no", " true "}

// bindingRequest binds the bound cluster's Pod (fzScaleTargets) with a Binding that may carry the
// label its election reads, the node's topology labels and an annotation.
func bindingRequest(b *fuzzBytes) *admissionv1.AdmissionRequest {
	bd := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName, Namespace: ns},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
	if b.pick(2) == 1 {
		bd.Labels = map[string]string{"e": fzBindingLabels[b.pick(len(fzBindingLabels))]}
	}
	if b.pick(2) == 1 {
		if bd.Labels == nil {
			bd.Labels = map[string]string{}
		}
		bd.Labels["topology.kubernetes.io/zone"] = string(rune('0' + b.pick(8)))
	}
	if b.pick(2) == 1 {
		bd.Annotations = map[string]string{"note": string(rune('a' + b.pick(4)))}
	}
	return &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: "binding", Operation: admissionv1.Create, Namespace: ns, Name: wt.WriterName, Object: runtime.RawExtension{Object: bd}}
}

// fzScaled are the resources whose scale subresource the guard reviews.
var fzScaled = []metav1.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "replicasets"}, {Version: "v1", Resource: "replicationcontrollers"},
}

// fzScaleTargets is the bound cluster's watch of the scaled workloads: each resource's object
// named as the reference writer is the compliant writer of that kind on shard 1, which has no
// Lease, so any of them scaled up from 0 starts a shard whose election is not live.
type fzScaleTargets map[string]*webhook.Workload

func newScaleTargets(t testing.TB) fzScaleTargets {
	out := fzScaleTargets{}
	kinds := map[string]metav1.GroupVersionKind{"statefulsets": {Group: "apps", Version: "v1", Kind: "StatefulSet"}, "deployments": {Group: "apps", Version: "v1", Kind: "Deployment"},
		"replicasets": {Group: "apps", Version: "v1", Kind: "ReplicaSet"}, "replicationcontrollers": {Version: "v1", Kind: "ReplicationController"}}
	for res, kind := range kinds {
		s := fzWriter(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "1"))...)
		w, err := webhook.WorkloadOf(asKind(kind, s.Spec.Template.Spec, metav1.OwnerReference{}, nil), ns)
		if err != nil {
			t.Fatal(err)
		}
		out[res] = w
	}
	// The Pod a Binding binds: the compliant writer of shard 0 (live in the bound cluster), its
	// election on from its label e.
	p := saAdmitted(barePod(fzWriter(append(compliant(), envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['e']"}}}))...), wt.WriterName))
	p.Spec.Hostname, p.Labels = wt.WriterName+"-0", map[string]string{"e": "true"}
	w, err := webhook.WorkloadOf(p, ns)
	if err != nil {
		t.Fatal(err)
	}
	out["pods"] = w
	return out
}

func (f fzScaleTargets) Workload(resource, namespace, name string) (*webhook.Workload, bool, bool) {
	w, ok := f[resource]
	if !ok || namespace != ns || name != wt.WriterName {
		return nil, false, ok
	}
	return w, true, true
}
