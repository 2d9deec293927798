package webhook

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// This file answers: what of a large object does the webhook's watch keep? The watches hold every
// workload and Pod of the guarded namespaces, and a namespace's admin decides how large they are:
// 60 Deployments each carrying a 1 MB env value took the webhook to 297 MB (a Deployment, its
// ReplicaSet and its Pod, each cached), past the chart's 128 Mi limit, and a webhook killed for
// its memory leaves every guarded namespace's Pods failing open. So an object larger than
// keepWhole is kept without what can make it large and that judging it as a reader does not read
// exactly: a literal env value, a command or argument, an annotation no env fieldRef reads, a
// probe or lifecycle hook. What is left out becomes unknowable, never a guess: an env value left
// out is a valueFrom of no source (the API server admits none), which resolves as unknowable, so a
// reader whose fencing switch refers to it is judged armed. Such an object is no longer equal to
// its children's templates, so it exempts none of them from the order check (sameTemplate): each
// is judged itself. The objects of a workload of ordinary size are kept whole and judged as
// before.

// keepWhole is the largest object (its protobuf size, after the kind's own strip) the watch keeps
// whole: an ordinary workload is a few KiB; one with a few hundred env entries tens of KiB.
const keepWhole = 64 << 10

// keepString is the longest string an elided object keeps (command and argument elements are cut
// to it, so a --kubeconfig flag is still seen).
const keepString = 1 << 10

// sizer is what every Kubernetes API type implements for its protobuf encoding.
type sizer interface{ Size() int }

// elideLarge leaves out what makes o larger than keepWhole (see above); o is a kind of
// PodSources, already stripped by its row. It reports whether it left anything out.
func elideLarge(o runtime.Object) bool {
	s, ok := o.(sizer)
	if !ok || s.Size() <= keepWhole {
		return false
	}
	_, meta, tmpl, ok := sourceOfObject(o)
	if !ok {
		return false
	}
	var spec *corev1.PodSpec
	var podMeta *metav1.ObjectMeta
	if p, isPod := o.(*corev1.Pod); isPod {
		spec, podMeta = &p.Spec, &p.ObjectMeta
	} else if tmpl != nil {
		spec, podMeta = &tmpl.Spec, &tmpl.ObjectMeta
	}
	if spec == nil {
		return false
	}
	read := readAnnotations(spec)
	keepRead(meta, read)
	if podMeta != meta {
		keepRead(podMeta, read)
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			elideContainer(&cs[i].Env, &cs[i].Command, &cs[i].Args)
			cs[i].LivenessProbe, cs[i].ReadinessProbe, cs[i].StartupProbe, cs[i].Lifecycle = nil, nil, nil, nil
		}
	}
	for i := range spec.EphemeralContainers {
		c := &spec.EphemeralContainers[i].EphemeralContainerCommon
		elideContainer(&c.Env, &c.Command, &c.Args)
		c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
	}
	return true
}

// elideContainer leaves out a container's literal env values longer than keepString and cuts its
// command and arguments to keepString each.
func elideContainer(env *[]corev1.EnvVar, command, args *[]string) {
	for i := range *env {
		e := &(*env)[i]
		if len(e.Value) > keepString {
			e.Value, e.ValueFrom = "", &corev1.EnvVarSource{}
		}
	}
	for _, list := range []*[]string{command, args} {
		for i, a := range *list {
			if len(a) > keepString {
				(*list)[i] = a[:keepString]
			}
		}
	}
}

// readAnnotations are the annotation keys an env fieldRef of spec's containers reads (nil for
// all of them: a fieldRef of metadata.annotations itself): the only annotations judging the object
// can depend on (a downward API volume is a file, not env).
func readAnnotations(spec *corev1.PodSpec) map[string]bool {
	read := map[string]bool{}
	all := false
	note := func(env []corev1.EnvVar) {
		for _, e := range env {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				continue
			}
			path := e.ValueFrom.FieldRef.FieldPath
			if base, key, ok := splitSubscript(path); ok && base == "metadata.annotations" {
				read[key] = true
			}
			all = all || path == "metadata.annotations"
		}
	}
	for _, c := range spec.InitContainers {
		note(c.Env)
	}
	for _, c := range spec.Containers {
		note(c.Env)
	}
	for _, c := range spec.EphemeralContainers {
		note(c.Env)
	}
	if all {
		return nil
	}
	return read
}

// keepRead drops from m the annotations not in read (none when read is nil).
func keepRead(m *metav1.ObjectMeta, read map[string]bool) {
	if read == nil {
		return
	}
	for k := range m.Annotations {
		if !read[k] {
			delete(m.Annotations, k)
		}
	}
}

// elidedValue reports whether src is a value elideLarge left out: a valueFrom with no source,
// which the API server never admits (exactly one source is required).
func elidedValue(src *corev1.EnvVarSource) bool {
	return src != nil && *src == (corev1.EnvVarSource{})
}
