package webhook

import (
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"
)

// Workload is the part of an admitted object the guard judges: the pod (or pod template) it
// runs, and what the order check needs to know about the pods it will create.
type Workload struct {
	Kind      string // "Pod", "StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob"
	Namespace string
	Name      string
	UID       string
	// ResourceVersion is the object's, as the API server or the webhook's watch holds it.
	ResourceVersion string
	// Pod describes the pod: for a Pod its own metadata and spec, for a workload its template.
	Pod PodContext
	// Replicas is set for the kinds with a replica count (defaulted to 1 when unset); for a
	// StatefulSet, with OrdinalStart, its pods are ordinals OrdinalStart .. OrdinalStart+Replicas-1.
	Replicas     int32
	OrdinalStart int32
	ServiceName  string
	// CurrentRevision is a StatefulSet's status.currentRevision while a rollout is under way
	// (it differs from status.updateRevision), "" otherwise; its controller makes the pods of
	// ordinals OrdinalStart .. OrdinalStart+CurrentBelow-1 from that revision (revision.go).
	CurrentRevision string
	CurrentBelow    int32
	// revision is a StatefulSet's status.currentRevision as it is (also when no rollout is under
	// way), updateRevision its status.updateRevision, and partition the ordinals below which its
	// controller makes pods from that revision (the rolling update's partition,
	// status.currentReplicas with no rollingUpdate; 0 for OnDelete, which makes every new pod from
	// the update revision): what revisionRuns reads.
	revision, updateRevision string
	partition                int32
	// fromRevision names the revision when the workload is a StatefulSet as revisionRuns makes it
	// (its current revision's template, the ordinals below its partition).
	fromRevision string
	// Controller is the object's controller owner ("apps/v1 Deployment name"), "" when none.
	Controller string
	// ControllerRef is the controller ownerReference itself (nil when none).
	ControllerRef *metav1.OwnerReference
	// Exempt is true when the controller is a workload whose template the guard has already
	// judged: a Deployment's ReplicaSet, a CronJob's Job, a Pod of a StatefulSet, ReplicaSet,
	// DaemonSet or Job. Such an object is the consequence of a decision already taken on its
	// owner, and re-creating it must not depend on its own Lease being live. Any other controller
	// (a ConfigMap, an operator's custom resource) exempts nothing: its object is judged itself.
	Exempt bool
	// OwnerUnverified, set on a Pod, says why the webhook could not fetch the controller that
	// would exempt it: the order check then runs, and a failure of it is "could not verify" (so
	// the Pod fails open), since the guard could not look rather than found it unjudged.
	OwnerUnverified string
	// Replacing, set with OwnerUnverified on a StatefulSet's Pod made from the set's current
	// revision (revision.go), narrows that leniency to the shards whose election has minted
	// before: a replacement of a writer that ran. A shard never elected still needs the order
	// check (the set may have been scaled up below its partition onto revision it never judged).
	Replacing bool
	// ExemptBy, set on an exempt Pod, is its controller as the webhook fetched it: the Pod is
	// accounted for only on the shards that owner was judged for (transition.go).
	ExemptBy *Workload
	// NoPods says why the object runs no pods now ("replicas: 0", "suspended"), "" while it runs
	// them. Such an object arms no shard yet: starting to run pods is the transition the order
	// check covers (transition.go), and as an owner it accounts for no child that runs them. A Pod
	// in a terminal phase (Succeeded, Failed) never starts a container again (finished).
	NoPods string
	// Paused is a Deployment's spec.paused. Running, known when RunningKnown, is what a paused
	// Deployment runs: its ReplicaSets with pods (resume.go).
	Paused       bool
	Running      []*Workload
	RunningKnown bool
	// Deleting is true once the object carries a deletionTimestamp.
	Deleting bool
	// Indexed is true for an Indexed Job (or a CronJob whose Jobs are): its controller gives each
	// pod a completion index (runs.go).
	Indexed bool
	// RunningSince, for a Pod, is the earliest start of a process of it that may still run (zero:
	// none runs); for an owner in an RBAC or ConfigMap review, that of the Pods judged through it.
	// Such a process holds the environment of its start (started.go).
	RunningSince time.Time
}

// Containers returns init containers first, then containers, then ephemeral containers: all of
// them run with the pod's ServiceAccount, and any of them can write with the fence. They are the
// containers as the pod will run them: an Indexed Job's carry the JOB_COMPLETION_INDEX variable its
// controller adds (copies, then; the object itself is never changed).
func (w *Workload) Containers() []*corev1.Container {
	if w == nil || w.Pod.Spec == nil {
		return nil
	}
	s := w.Pod.Spec
	out := make([]*corev1.Container, 0, len(s.InitContainers)+len(s.Containers)+len(s.EphemeralContainers))
	for i := range s.InitContainers {
		out = append(out, &s.InitContainers[i])
	}
	for i := range s.Containers {
		out = append(out, &s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		c := corev1.Container(s.EphemeralContainers[i].EphemeralContainerCommon)
		out = append(out, &c)
	}
	if w.Indexed && w.Pod.Template {
		for i, c := range out {
			out[i] = withCompletionIndex(c)
		}
	}
	return out
}

// containerRole names what the i-th of Containers() is, for messages.
func (w *Workload) containerRole(i int) string {
	s := w.Pod.Spec
	switch {
	case s == nil:
		return "container"
	case i < len(s.InitContainers):
		return "init container"
	case i < len(s.InitContainers)+len(s.Containers):
		return "container"
	default:
		return "ephemeral container"
	}
}

// withCompletionIndex is c as the Job controller runs it in an Indexed Job (addCompletionIndexEnvVariable):
// JOB_COMPLETION_INDEX appended as a fieldRef to the completion index, unless c defines it.
func withCompletionIndex(c *corev1.Container) *corev1.Container {
	for _, e := range c.Env {
		if e.Name == envJobCompletionIndex {
			return c
		}
	}
	cp := *c
	cp.Env = append(append([]corev1.EnvVar(nil), c.Env...), corev1.EnvVar{Name: envJobCompletionIndex,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + labelJobCompletionIndex + "']"}}})
	return &cp
}

// DecodeWorkload decodes raw JSON of the given kind. namespace is the request's namespace (an
// object being created may not carry it yet). It returns ErrUnknownKind for kinds it does not
// judge and a descriptive error for anything that is not a valid object of the kind; it never
// panics on any input.
func DecodeWorkload(gvk schema.GroupVersionKind, namespace string, raw []byte) (*Workload, error) {
	if len(raw) == 0 {
		return nil, errors.New("no object in the request")
	}
	src, ok := sourceOf(gvk)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownKind, gvk)
	}
	obj := src.New()
	if err := decodeInto(raw, obj, gvk); err != nil {
		return nil, err
	}
	return WorkloadOf(obj, namespace)
}

// WorkloadOf is the Workload of a typed object of a judged kind (as an informer holds it).
// namespace is used when the object carries none.
func WorkloadOf(obj runtime.Object, namespace string) (*Workload, error) {
	w := &Workload{Namespace: namespace}
	src, meta, tmpl, ok := sourceOfObject(obj)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrUnknownKind, obj)
	}
	gvk := src.GVK
	switch o := obj.(type) {
	case *corev1.Pod:
		w.Pod = PodContext{Template: false, Spec: &o.Spec, Meta: PodMeta{
			Name: o.Name, UID: string(o.UID), Labels: o.Labels, Annotations: o.Annotations,
		}}
		w.RunningSince = runningSince(o, w.Containers())
		if o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed {
			w.NoPods = "it has finished (phase " + string(o.Status.Phase) + ")"
		}
	case *appsv1.StatefulSet:
		w.setReplicas(o.Spec.Replicas)
		if o.Spec.Ordinals != nil {
			w.OrdinalStart = o.Spec.Ordinals.Start
		}
		w.ServiceName = o.Spec.ServiceName
		w.CurrentRevision, w.CurrentBelow = currentRevision(o)
		w.revision, w.updateRevision = o.Status.CurrentRevision, o.Status.UpdateRevision
		if o.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
			// newVersionedStatefulSetPod: below the partition, or with no rollingUpdate (the API
			// server fills it in only for an empty type) below status.currentReplicas.
			w.partition = o.Status.CurrentReplicas
			if ru := o.Spec.UpdateStrategy.RollingUpdate; ru != nil {
				w.partition = ptr.Deref(ru.Partition, 0)
			}
		}
	case *appsv1.Deployment:
		w.setReplicas(o.Spec.Replicas)
		w.Paused = o.Spec.Paused
	case *appsv1.ReplicaSet:
		w.setReplicas(o.Spec.Replicas)
	case *corev1.ReplicationController:
		w.setReplicas(o.Spec.Replicas)
	case *batchv1.Job:
		w.Indexed = o.Spec.CompletionMode != nil && *o.Spec.CompletionMode == batchv1.IndexedCompletion
		w.NoPods = jobRunsNoPods(&o.Spec, "")
		if jobFinished(&o.Status) {
			w.NoPods = "finished"
		}
	case *batchv1.CronJob:
		m := o.Spec.JobTemplate.Spec.CompletionMode
		w.Indexed = m != nil && *m == batchv1.IndexedCompletion
		if o.Spec.Suspend != nil && *o.Spec.Suspend {
			w.NoPods = "suspended"
		} else {
			w.NoPods = jobRunsNoPods(&o.Spec.JobTemplate.Spec, "its Jobs are ")
		}
	}
	w.Kind = gvk.Kind
	if w.Namespace == "" {
		w.Namespace = meta.Namespace
	}
	w.Name, w.UID, w.ResourceVersion = meta.Name, string(meta.UID), meta.ResourceVersion
	if w.Name == "" {
		w.Name = meta.GenerateName
	}
	w.Deleting = meta.DeletionTimestamp != nil
	if ref := metav1.GetControllerOfNoCopy(meta); ref != nil {
		w.Controller = ref.APIVersion + " " + ref.Kind + " " + quote(ref.Name)
		w.ControllerRef = ref.DeepCopy()
		w.Exempt = exemptingOwner(gvk.Kind, ref)
	}
	if tmpl != nil {
		w.Pod = PodContext{Template: true, Spec: &tmpl.Spec, Meta: PodMeta{
			Labels: tmpl.Labels, Annotations: tmpl.Annotations,
		}}
		if set, ok := obj.(*appsv1.StatefulSet); ok {
			w.Pod.SetName = meta.Name
			if len(set.Spec.VolumeClaimTemplates) > 0 {
				spec := tmpl.Spec // a copy: an informer's object is shared
				spec.Volumes = claimVolumes(set)
				w.Pod.Spec = &spec
			}
		}
		w.Pod.ControllerSet, w.Pod.SetBy = controllerSetKeys(w), w.Kind
	}
	w.Pod.Namespace = w.Namespace
	return w, nil
}

// currentRevision is the revision a StatefulSet's controller makes the pods below a partition
// from during a rollout, and how many ordinals that covers (newVersionedStatefulSetPod: the
// partition, or with no rollingUpdate the pods already at that revision; OnDelete makes every
// new pod from the update revision).
func currentRevision(set *appsv1.StatefulSet) (string, int32) {
	cur, upd := set.Status.CurrentRevision, set.Status.UpdateRevision
	if cur == "" || cur == upd || set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return "", 0
	}
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		return cur, ptr.Deref(ru.Partition, 0)
	}
	return cur, set.Status.CurrentReplicas
}

// claimVolumes are the volumes of a StatefulSet's pods as its controller makes them (updateStorage
// in the StatefulSet controller): each volume claim template's claim, in place of any template
// volume of the same name, then the template's other volumes. A template volume that holds a
// token would otherwise be judged where the pod mounts a claim.
func claimVolumes(set *appsv1.StatefulSet) []corev1.Volume {
	claims := map[string]bool{}
	var out []corev1.Volume
	for _, c := range set.Spec.VolumeClaimTemplates {
		if claims[c.Name] {
			continue
		}
		claims[c.Name] = true
		out = append(out, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: c.Name + "-" + set.Name + "-<ordinal>"}}})
	}
	for _, v := range set.Spec.Template.Spec.Volumes {
		if !claims[v.Name] {
			out = append(out, v)
		}
	}
	return out
}

// setReplicas records a replica count as the API server defaults it (1 when unset).
func (w *Workload) setReplicas(n *int32) {
	w.Replicas = 1
	if n != nil {
		w.Replicas = *n
	}
	w.NoPods = ""
	if w.Replicas == 0 {
		w.NoPods = "replicas: 0"
	}
}

// scaledTo is w with the replica count its scale subresource sets.
func (w Workload) scaledTo(n int32) *Workload {
	w.setReplicas(&n)
	return &w
}

// jobRunsNoPods says why a Job of spec starts no pods ("" when it does): the Job controller keeps
// a suspended Job's pods at none, and a parallelism of 0 at none.
func jobRunsNoPods(spec *batchv1.JobSpec, whose string) string {
	switch {
	case spec.Suspend != nil && *spec.Suspend:
		return whose + "suspended"
	case spec.Parallelism != nil && *spec.Parallelism == 0:
		return whose + "of parallelism 0"
	}
	return ""
}

// jobFinished reports whether a Job has finished (a Complete or Failed condition that is true): the
// Job controller never acts on a finished Job again (its syncJob returns early), so it makes no pod.
func jobFinished(st *batchv1.JobStatus) bool {
	return slices.ContainsFunc(st.Conditions, finalJobCondition)
}

// finalJobCondition reports whether c says the Job finished.
func finalJobCondition(c batchv1.JobCondition) bool {
	return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
}

// decodeConfigMap decodes a ConfigMap as the API server does (case-sensitive field names).
func decodeConfigMap(raw []byte) (*corev1.ConfigMap, error) {
	if len(raw) == 0 {
		return nil, errors.New("no object in the request")
	}
	var cm corev1.ConfigMap
	if err := decodeInto(raw, &cm, gvkConfigMap); err != nil {
		return nil, err
	}
	return &cm, nil
}

// decodeInto decodes as the API server does: case-sensitive field names (sigs.k8s.io/json), so
// the guard reads exactly the fields the object has, never a "Env" that stands for "env".
func decodeInto(raw []byte, into any, gvk schema.GroupVersionKind) error {
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &tm); err != nil {
		return fmt.Errorf("decoding %s: %w", gvk.Kind, err)
	}
	if (tm.Kind != "" && tm.Kind != gvk.Kind) || (tm.APIVersion != "" && tm.APIVersion != gvk.GroupVersion().String()) {
		return fmt.Errorf("request says %s but the object is %s %s", gvk, tm.APIVersion, tm.Kind)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, into); err != nil {
		return fmt.Errorf("decoding %s: %w", gvk.Kind, err)
	}
	return nil
}

// finished reports whether w is a Pod in a terminal phase: the API server refuses any move out of
// Succeeded or Failed and the kubelet starts none of its containers again, so no change can arm or
// disarm what it runs (the twenty-fifth red team's Succeeded Pod held a ConfigMap's arming edit).
func (w *Workload) finished() bool { return w.Kind == gvkPod.Kind && w.NoPods != "" }
