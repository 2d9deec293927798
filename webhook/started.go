package webhook

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file answers: what environment does a running container hold?
//
// The one of its start. The kubelet resolves a container's environment once, when it starts it
// (makeEnvironmentVariables, from generateRunContainerOptions), and a process's environment never
// changes after exec; so a ConfigMap edit, or an edit of the Pod's labels or annotations that a
// fieldRef reads, reaches a container only at its next start. The guard judges a workload as it
// will next start (a ConfigMap change is judged for every reader so), but an RBAC or
// ServiceAccount change bites the processes running now: a writer whose ConfigMap was set from
// enforce to shadow still runs armed until it restarts, and unbinding its account then fails its
// shard. So an RBAC review counts a running container as possibly armed when what it read at its
// start may differ from what the guard reads now:
//
//   - its fencing switch comes from a ConfigMap that changed after (or shortly before) the
//     container started. "Changed" is the API server's record, the latest managedFields time (or
//     the creation); every update that changes a value stamps its manager's time, and the
//     ConfigMap review keeps the record honest while a reader runs (unrecordedChange): an update
//     that moves it back (managedFields sent by hand) or removes a key that matters to the reader
//     (a removal stamps nothing) is refused, and so is a delete. A ConfigMap with no record at all
//     counts as changed.
//   - its fencing switch comes from the Pod's own labels or annotations: those can change with no
//     record the guard can trust (a removal stamps nothing, and an update of the Pod's
//     managedFields alone is not sent to the webhook), so it always may differ.
//
// "Started" is the kubelet's report, status.containerStatuses[].state.running.startedAt, on the
// node's clock; a container of a Pod bound to a node that is not reported running may have
// started at any time since the Pod was created (runningSince). startSkew covers the node's clock being behind the API server's
// and the kubelet's ConfigMap cache lagging behind the change: a node clock ahead by more than that
// can hide a change (the same assumption the kubelet's certificate rotation and every token's
// expiry make about node clocks).

// startSkew is how much earlier than a container's reported start a change must be for the guard
// to take it as read by that start.
const startSkew = time.Minute

// runningSince is the earliest instant a process of p may have started that still runs (zero when
// none can run now): the startedAt of a container the kubelet reports running, and the Pod's
// creation for any other container of a Pod bound to a node and not finished. A report trails the
// truth: the kubelet hands the status to its status manager before it starts the containers
// (SyncPod), and reports a start only on a later sync, after its PLEG relist (1 s) and a status
// patch, so a container reported waiting, terminated (to be restarted) or not at all may be
// running already (the nineteenth red team removed a key in that window and then unbound the
// writer). A Pod in graceful deletion runs until its containers stop.
// containers are the Pod's containers (Workload.Containers).
func runningSince(p *corev1.Pod, containers []*corev1.Container) time.Time {
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return time.Time{}
	}
	running := map[string]time.Time{}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if r := s.State.Running; r != nil && !r.StartedAt.IsZero() {
				running[s.Name] = r.StartedAt.Time
			}
		}
	}
	var since time.Time
	for _, c := range containers {
		t, ok := running[c.Name]
		if !ok {
			t = p.CreationTimestamp.Time
		}
		if t.IsZero() { // no time given (only ever in a request built by hand): since always
			t = time.Unix(1, 0)
		}
		if since.IsZero() || t.Before(since) {
			since = t
		}
	}
	return since
}

// lastChange is the latest time managedFields records for an update, or the creation; ok is
// false when the object has no managedFields at all (reset), so its changes cannot be dated.
func lastChange(meta *metav1.ObjectMeta) (time.Time, bool) {
	if len(meta.ManagedFields) == 0 {
		return time.Time{}, false
	}
	last := meta.CreationTimestamp.Time
	for _, m := range meta.ManagedFields {
		if m.Time == nil {
			continue
		}
		if m.Time.After(last) {
			last = m.Time.Time
		}
	}
	return last, true
}

// stripPodForReaders keeps of a Pod's status only what runningSince reads, and none of its
// managedFields: the watch holds every Pod of the guarded namespaces.
func stripPodForReaders(p *corev1.Pod) {
	p.ManagedFields = nil
	keep := func(list []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(list))
		for _, s := range list {
			out = append(out, corev1.ContainerStatus{Name: s.Name, State: corev1.ContainerState{Running: s.State.Running}})
		}
		return out
	}
	p.Status = corev1.PodStatus{Phase: p.Status.Phase, InitContainerStatuses: keep(p.Status.InitContainerStatuses),
		ContainerStatuses: keep(p.Status.ContainerStatuses), EphemeralContainerStatuses: keep(p.Status.EphemeralContainerStatuses)}
}

// runsAs makes owner, judged in place of its Pod p, carry when p's running processes started.
func (owner *Workload) runsAs(p *Workload) {
	if p.RunningSince.IsZero() {
		return
	}
	if owner.RunningSince.IsZero() || p.RunningSince.Before(owner.RunningSince) {
		owner.RunningSince = p.RunningSince
	}
}

// fencingFromPodMetadata reports whether c's fencing switch may come from the Pod's labels or
// annotations: an entry of its name (up to case) that reads them, or one its value refers to.
func fencingFromPodMetadata(c *corev1.Container) bool {
	fromMeta := func(e *corev1.EnvVar) bool {
		r := e.ValueFrom
		if r == nil || r.FieldRef == nil {
			return false
		}
		base, _, _ := splitSubscript(r.FieldRef.FieldPath) // as fieldRefValue reads the path
		return base == "metadata.labels" || base == "metadata.annotations"
	}
	for i := range c.Env {
		e := &c.Env[i]
		if !mayBeName(e.Name, EnvFencing) {
			continue
		}
		if fromMeta(e) {
			return true
		}
		if strings.Contains(e.Value, "$(") && slices.ContainsFunc(c.Env, func(x corev1.EnvVar) bool { return fromMeta(&x) }) {
			return true
		}
	}
	return false
}

// readSinceStart says why c, running since w.RunningSince, may hold another fencing switch than
// the guard resolves now, or "": a ConfigMap the review read for it (f) changed after startSkew
// before that start, or at a time the API server did not record, or the switch comes from the
// Pod's labels or annotations.
func readSinceStart(w *Workload, c *corev1.Container, f *Facts) string {
	since := w.RunningSince
	if since.IsZero() {
		return ""
	}
	if !f.Now.IsZero() && since.After(f.Now.Add(startSkew)) {
		// A start reported in the future is a node clock ahead of this one: it dates nothing
		// (the twentieth red team's start 3 minutes ahead hid the change after it).
		since = time.Unix(1, 0)
	}
	after := func(t time.Time) bool { return !t.Before(since.Add(-startSkew)) }
	started := "it has run since " + since.UTC().Format(time.RFC3339)
	for _, name := range referencedConfigMaps(c) {
		cm, ok := f.ConfigMaps[name]
		switch {
		case !ok || cm.Err != nil:
			continue // not read for this container: nothing in it can matter (or already unknowable)
		case cm.NotFound:
			// An optional one the kubelet starts the container without: its absence says nothing.
			if requiresConfigMapIn(c.Env, c.EnvFrom, name) {
				return fmt.Sprintf("%s, and ConfigMap %q, which it could not have started without, has been deleted since", started, name)
			}
		case cm.Changed.IsZero():
			return fmt.Sprintf("%s, and ConfigMap %q has no record of when it last changed", started, name)
		case after(cm.Changed):
			return fmt.Sprintf("%s, and ConfigMap %q changed at %s", started, name, cm.Changed.UTC().Format(time.RFC3339))
		}
	}
	if fencingFromPodMetadata(c) {
		return started + ", and its fencing switch comes from the Pod's labels or annotations, which can change under it with no record to date them by"
	}
	return ""
}

// asRunning is, for a review that bites the processes running now (Input.asRunsNow), each
// container of the object as its running process holds it: one that may read its fencing switch
// from what has changed since it started counts as armed, since what it read then cannot be known.
// A container that fixes the switch to a literal, or cannot set it, holds the same switch as it did
// at its start.
func asRunning(in Input, views []containerView, f *Facts) {
	if !in.asRunsNow() {
		return
	}
	w := in.Object
	names := envNamesOf(&w.Pod)
	for i := range views {
		v := &views[i]
		if v.armed || unarmedLiterally(v.c, names) || !mayArmContainer(v.c) {
			continue
		}
		if why := readSinceStart(w, v.c, f); why != "" {
			v.armed, v.unknowable = true, true
			v.why = fmt.Sprintf("%s as its process read it at its start cannot be known (%s; a process keeps the environment of its start: restart it, a minute or more after the change, to have it read the current one)", EnvFencing, why)
		}
	}
}
