package webhook

import (
	"errors"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds the guard judges, by group/version/kind as the API server sends them (the webhook
// configuration asks for v1, and matchPolicy Equivalent converts other versions to it).
var (
	gvkPod         = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvkStatefulSet = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	gvkDeployment  = appsv1.SchemeGroupVersion.WithKind("Deployment")
	gvkDaemonSet   = appsv1.SchemeGroupVersion.WithKind("DaemonSet")
	gvkReplicaSet  = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	gvkJob         = batchv1.SchemeGroupVersion.WithKind("Job")
	gvkCronJob     = batchv1.SchemeGroupVersion.WithKind("CronJob")
	gvkRC          = schema.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}
	gvkConfigMap   = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

// PodSource is one kind that makes pods, with everything the guard needs to know about it. The
// table PodSources is the one place a kind is known: Known, the decoder, the owner exemptions,
// the ConfigMap readers and their informers, the metrics' labels and (tested against it) the
// chart's webhook rules and RBAC all derive from it, so adding a kind is one row.
type PodSource struct {
	GVK schema.GroupVersionKind
	// Resource is the plural the API server routes it by (webhook rules, RBAC, watches).
	Resource string
	// New returns an empty object of the kind.
	New func() runtime.Object
	// of returns the object's metadata and its pod template (nil for a Pod, which is its own pod).
	of func(runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool)
	// TemplatePath is where the pod spec sits in the object, for messages.
	TemplatePath string
	// ExemptBy lists the controller kinds that create objects of this kind from a pod template
	// the guard judged on the controller (Deployment → ReplicaSet, CronJob → Job, ...).
	ExemptBy []Exemption
	// Reader is true when the guard watches objects of this kind as ConfigMap readers: every kind,
	// since a container re-reads its ConfigMaps at every start (bare Pods and ReplicaSets too).
	Reader bool
	// Scale is true when the kind's replica count has a scale subresource (kubectl scale, an
	// autoscaler), reviewed as the object scaled (scale.go).
	Scale bool
	// strip clears what judging a reader does not need (StripForReaders).
	strip func(runtime.Object)
}

// Exemption is one controller kind whose objects' pod template is copied into this kind's, with
// the labels the copy gains on the way (read from the controllers' and the API server's source).
type Exemption struct {
	Owner schema.GroupVersionKind
	// AddedLabels are set on the copy's template over the owner's: they do not make the
	// templates differ.
	AddedLabels []string
}

// exemptBy lists owner kinds that add no labels.
func exemptBy(owners ...schema.GroupVersionKind) []Exemption {
	out := make([]Exemption, len(owners))
	for i, o := range owners {
		out[i] = Exemption{Owner: o}
	}
	return out
}

// PodSources is the table of the kinds the guard judges.
var PodSources = []PodSource{
	{GVK: gvkPod, Resource: "pods", New: func() runtime.Object { return &corev1.Pod{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			p, ok := o.(*corev1.Pod)
			if !ok {
				return nil, nil, false
			}
			return &p.ObjectMeta, nil, true
		},
		TemplatePath: "spec", Reader: true,
		ExemptBy: exemptBy(gvkStatefulSet, gvkReplicaSet, gvkDaemonSet, gvkJob, gvkRC),
		strip: func(o runtime.Object) {
			stripPodForReaders(o.(*corev1.Pod))
		}},
	{GVK: gvkStatefulSet, Resource: "statefulsets", Scale: true, New: func() runtime.Object { return &appsv1.StatefulSet{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			s, ok := o.(*appsv1.StatefulSet)
			if !ok {
				return nil, nil, false
			}
			return &s.ObjectMeta, &s.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			s := o.(*appsv1.StatefulSet)
			// The rollout is kept: the pods below a partition are its current revision's
			// (currentRevision, revision.go).
			s.ManagedFields, s.Status = nil, appsv1.StatefulSetStatus{
				CurrentRevision: s.Status.CurrentRevision, UpdateRevision: s.Status.UpdateRevision, CurrentReplicas: s.Status.CurrentReplicas}
			// The claims replace template volumes of their names in every pod (claimVolumes):
			// kept in the template, so the cache holds the volumes the pods have.
			if len(s.Spec.VolumeClaimTemplates) > 0 {
				s.Spec.Template.Spec.Volumes = claimVolumes(s)
			}
			s.Spec.VolumeClaimTemplates = nil
		}},
	{GVK: gvkDeployment, Resource: "deployments", Scale: true, New: func() runtime.Object { return &appsv1.Deployment{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			d, ok := o.(*appsv1.Deployment)
			if !ok {
				return nil, nil, false
			}
			return &d.ObjectMeta, &d.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			d := o.(*appsv1.Deployment)
			d.ManagedFields, d.Status = nil, appsv1.DeploymentStatus{}
		}},
	{GVK: gvkDaemonSet, Resource: "daemonsets", New: func() runtime.Object { return &appsv1.DaemonSet{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			d, ok := o.(*appsv1.DaemonSet)
			if !ok {
				return nil, nil, false
			}
			return &d.ObjectMeta, &d.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			d := o.(*appsv1.DaemonSet)
			d.ManagedFields, d.Status = nil, appsv1.DaemonSetStatus{}
		}},
	{GVK: gvkReplicaSet, Resource: "replicasets", Scale: true, New: func() runtime.Object { return &appsv1.ReplicaSet{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			r, ok := o.(*appsv1.ReplicaSet)
			if !ok {
				return nil, nil, false
			}
			return &r.ObjectMeta, &r.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			r := o.(*appsv1.ReplicaSet)
			r.ManagedFields, r.Status = nil, appsv1.ReplicaSetStatus{}
		},
		// The Deployment controller copies its template and adds pod-template-hash.
		ExemptBy: []Exemption{{Owner: gvkDeployment, AddedLabels: []string{"pod-template-hash"}}}},
	{GVK: gvkRC, Resource: "replicationcontrollers", Scale: true, New: func() runtime.Object { return &corev1.ReplicationController{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			r, ok := o.(*corev1.ReplicationController)
			if !ok {
				return nil, nil, false
			}
			if r.Spec.Template == nil {
				return &r.ObjectMeta, &corev1.PodTemplateSpec{}, true
			}
			return &r.ObjectMeta, r.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			r := o.(*corev1.ReplicationController)
			r.ManagedFields, r.Status = nil, corev1.ReplicationControllerStatus{}
		}},
	{GVK: gvkJob, Resource: "jobs", New: func() runtime.Object { return &batchv1.Job{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			j, ok := o.(*batchv1.Job)
			if !ok {
				return nil, nil, false
			}
			return &j.ObjectMeta, &j.Spec.Template, true
		},
		TemplatePath: "spec.template.spec", Reader: true,
		// The CronJob controller copies jobTemplate.spec; the Job's defaulting (generateSelector)
		// adds the job-name and controller-uid labels, old and new spelling.
		ExemptBy: []Exemption{{Owner: gvkCronJob, AddedLabels: []string{"batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid", "job-name", "controller-uid"}}},
		strip: func(o runtime.Object) {
			j := o.(*batchv1.Job)
			// A finished Job makes no pods (Workload.NoPods): its final condition is kept.
			var final []batchv1.JobCondition
			for _, c := range j.Status.Conditions {
				if finalJobCondition(c) {
					final = append(final, batchv1.JobCondition{Type: c.Type, Status: c.Status})
				}
			}
			j.ManagedFields, j.Status = nil, batchv1.JobStatus{Conditions: final}
		}},
	{GVK: gvkCronJob, Resource: "cronjobs", New: func() runtime.Object { return &batchv1.CronJob{} },
		of: func(o runtime.Object) (*metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
			c, ok := o.(*batchv1.CronJob)
			if !ok {
				return nil, nil, false
			}
			return &c.ObjectMeta, &c.Spec.JobTemplate.Spec.Template, true
		},
		TemplatePath: "spec.jobTemplate.spec.template.spec", Reader: true,
		strip: func(o runtime.Object) {
			c := o.(*batchv1.CronJob)
			c.ManagedFields, c.Status = nil, batchv1.CronJobStatus{}
		}},
}

// ErrUnknownKind is returned by DecodeWorkload for a kind the guard has no opinion on.
var ErrUnknownKind = errors.New("kind not judged by this guard")

// sourceOf returns the row of gvk.
func sourceOf(gvk schema.GroupVersionKind) (*PodSource, bool) {
	for i := range PodSources {
		if PodSources[i].GVK == gvk {
			return &PodSources[i], true
		}
	}
	return nil, false
}

// sourceOfKind returns the row of a kind name ("StatefulSet").
func sourceOfKind(kind string) (*PodSource, bool) {
	for i := range PodSources {
		if PodSources[i].GVK.Kind == kind {
			return &PodSources[i], true
		}
	}
	return nil, false
}

// SourceOfKind returns the row of a kind name, for the watches.
func SourceOfKind(kind string) (PodSource, bool) {
	s, ok := sourceOfKind(kind)
	if !ok {
		return PodSource{}, false
	}
	return *s, true
}

// sourceOfObject returns the row of a typed object and its metadata and template.
func sourceOfObject(obj runtime.Object) (*PodSource, *metav1.ObjectMeta, *corev1.PodTemplateSpec, bool) {
	for i := range PodSources {
		if meta, tmpl, ok := PodSources[i].of(obj); ok {
			return &PodSources[i], meta, tmpl, true
		}
	}
	return nil, nil, nil, false
}

// Known reports whether gvk is a kind the guard judges.
func Known(gvk schema.GroupVersionKind) bool {
	_, ok := sourceOf(gvk)
	return ok
}

// templatePath is where kind's pod spec sits, for messages.
func templatePath(kind string) string {
	if s, ok := sourceOfKind(kind); ok {
		return s.TemplatePath
	}
	return "spec.template.spec"
}

// exemptionOf returns the chain along which a controller reference of an object of the given
// kind may exempt it: the only chains along which a controller copies a template the guard judged.
func exemptionOf(kind string, ref *metav1.OwnerReference) (Exemption, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return Exemption{}, false
	}
	s, ok := sourceOfKind(kind)
	if !ok {
		return Exemption{}, false
	}
	i := slices.IndexFunc(s.ExemptBy, func(e Exemption) bool { return e.Owner == gv.WithKind(ref.Kind) })
	if i < 0 {
		return Exemption{}, false
	}
	return s.ExemptBy[i], true
}

// exemptingOwner reports whether ref names a controller kind that may exempt an object of kind.
func exemptingOwner(kind string, ref *metav1.OwnerReference) bool {
	_, ok := exemptionOf(kind, ref)
	return ok
}

// ReaderKinds are the workload kinds whose readers the guard watches (PodSource.Reader).
var ReaderKinds = func() []runtime.Object {
	var out []runtime.Object
	for _, s := range PodSources {
		if s.Reader {
			out = append(out, s.New())
		}
	}
	return out
}()

// StripForReaders is an informer transform that keeps only what judging a reader needs (metadata
// without managed fields, the pod template, replicas and ordinals), and of an object larger than
// keepWhole less (elideLarge), so a cache of every workload in the guarded namespaces stays small.
func StripForReaders(obj any) (any, error) {
	if o, ok := obj.(runtime.Object); ok {
		if s, _, _, ok := sourceOfObject(o); ok && s.strip != nil {
			s.strip(o)
			elideLarge(o)
		}
	}
	return obj, nil
}
