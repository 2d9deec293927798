package webhook

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/electionenv"
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
	for i := range c.Env {
		e := &c.Env[i]
		if !mayBeName(e.Name, EnvFencing) {
			continue
		}
		if fromPodMetadata(e) {
			return true
		}
		if strings.Contains(e.Value, "$(") && readsPodMetadata(c) {
			return true
		}
	}
	return false
}

// startedAt is the start the guard dates w's running processes' reads by, and how it says so;
// zero when none runs.
func startedAt(w *Workload, f *Facts) (time.Time, string) {
	since := w.RunningSince
	if since.IsZero() {
		return since, ""
	}
	if !f.Now.IsZero() && since.After(f.Now.Add(startSkew)) {
		// A start reported in the future is a node clock ahead of this one: it dates nothing
		// (the twentieth red team's start 3 minutes ahead hid the change after it).
		since = time.Unix(1, 0)
	}
	return since, "it has run since " + since.UTC().Format(time.RFC3339)
}

// changedSinceStart is, for each ConfigMap c reads that a review read (f), why the content its
// process read at its start, running since w.RunningSince, may differ from what the guard reads
// now: it changed after startSkew before that start, or at a time the API server did not record,
// or it was deleted although c could not have started without it. started says since when.
func changedSinceStart(w *Workload, c *corev1.Container, f *Facts) (changed map[string]string, order []string, started string) {
	since, started := startedAt(w, f)
	if since.IsZero() {
		return nil, nil, ""
	}
	after := func(t time.Time) bool { return !t.Before(since.Add(-startSkew)) }
	for _, name := range referencedConfigMaps(c) {
		cm, ok := f.ConfigMaps[name]
		why := ""
		switch {
		case !ok || cm.Err != nil:
			continue // not read for this container: nothing in it can matter (or already unknowable)
		case cm.NotFound:
			// An optional one the kubelet starts the container without: its absence says nothing.
			if requiresConfigMapIn(c.Env, c.EnvFrom, name) {
				why = fmt.Sprintf("ConfigMap %q, which it could not have started without, has been deleted since", name)
			}
		case cm.Changed.IsZero():
			why = fmt.Sprintf("ConfigMap %q has no record of when it last changed", name)
		case after(cm.Changed):
			why = fmt.Sprintf("ConfigMap %q changed at %s", name, cm.Changed.UTC().Format(time.RFC3339))
		}
		if why != "" {
			if changed == nil {
				changed = map[string]string{}
			}
			changed[name] = why
			order = append(order, name)
		}
	}
	return changed, order, started
}

// readSinceStart says why c, running since w.RunningSince, may hold another fencing switch than
// the guard resolves now, or "": a ConfigMap it reads changed since its start (changedSinceStart),
// or the switch comes from the Pod's labels or annotations.
func readSinceStart(w *Workload, c *corev1.Container, f *Facts) string {
	changed, order, started := changedSinceStart(w, c, f)
	switch {
	case started == "":
		return ""
	case len(order) > 0:
		return started + ", and " + changed[order[0]]
	case fencingFromPodMetadata(c):
		return started + ", and its fencing switch comes from the Pod's labels or annotations, which can change under it with no record to date them by"
	}
	return ""
}

// electionCoordinates are the variables that decide whether a writer's election runs and which
// Lease it takes: on or off, the namespace, the shard, and what the parser falls back on for the
// last two.
var electionCoordinates = []string{electionenv.EnvElection, electionenv.EnvNamespace, electionenv.EnvPodNamespace, electionenv.EnvShard, electionenv.EnvHostname}

// electsElsewhere says why the election of v's running process, which started before what it reads
// changed (changedSinceStart, or the Pod's labels and annotations a fieldRef reads), may run in
// another namespace, on another shard, or at all, than the guard resolves now from env (cms, the
// facts at hand), or "". It resolves the environment again with every such source unknown: a
// coordinate that then differs from env's was read from what changed. The RBAC review then holds
// the process to everything its account reaches (RBACChange.takenFrom): before it, a ConfigMap
// setting NOETL_EHDB_ELECTION_NAMESPACE to another namespace where the account is bound too let the
// old namespace's RoleBinding go under the running writer (a gap left open after the twentieth red
// team).
func electsElsewhere(w *Workload, v *containerView, cms ConfigMapSource, f *Facts, budget *Budget) string {
	changed, order, started := changedSinceStart(w, v.c, f)
	meta := readsPodMetadata(v.c)
	if started == "" || (len(order) == 0 && !meta) {
		return ""
	}
	src := func(name string) (ConfigMapFact, bool) {
		if why, ok := changed[name]; ok {
			return ConfigMapFact{Err: errors.New(why)}, true
		}
		return cms(name)
	}
	// moved names the first coordinate that differs when env is resolved again over pod.
	moved := func(pod *PodContext) string {
		run := resolveEnv(v.c, pod, src, budget)
		for _, name := range electionCoordinates {
			was, wasSet := run.Lookup(name)
			is, isSet := v.env.Lookup(name)
			if wasSet != isSet || was.Known() != is.Known() || was.Text != is.Text || was.PerOrdinal != is.PerOrdinal {
				return name
			}
		}
		return ""
	}
	if len(order) > 0 {
		if name := moved(&w.Pod); name != "" {
			return fmt.Sprintf("%s as its process read it at its start cannot be known (%s, and %s; a process keeps the environment of its start: restart it, a minute or more after the change, to have it read the current one)", name, started, changed[order[0]])
		}
	}
	if meta {
		pod := w.Pod
		pod.sinceStart = "the Pod's labels and annotations can change under a running process with no record to date them by"
		if name := moved(&pod); name != "" {
			// No restart dates a label: the way out is the removal order, or a source that can be
			// dated (the red team's pod-index label was refused for as long as the writer ran armed,
			// and the refusal said to restart it).
			return fmt.Sprintf("%s as its process read it at its start cannot be known (%s, and it reads it from the Pod's labels or annotations, which can change under it with no record to date them by; set %s=shadow and roll it out before this change, or have it read %s from HOSTNAME, a literal or a ConfigMap)", name, started, EnvFencing, name)
		}
	}
	return ""
}

// readByTheRunningRule reports whether a key of ConfigMap name can reach, in a container of w,
// what the running-process rule judges: the fencing switch or an election coordinate (up to
// case), directly or through a $(reference) of theirs. Other keys (the lease duration, say) can be
// removed under a running reader: the RBAC review never dates them.
func readByTheRunningRule(w *Workload, name string, keys []string) bool {
	for _, c := range containerSources(w) {
		// The judged names and, to a fixed point, every name a value of theirs refers to: the
		// kubelet expands each value over the earlier ones, so B -> A="$(B)" -> the switch="$(A)"
		// reads B (the twenty-third red team removed B's key under a running writer).
		names := map[string]bool{strings.ToUpper(EnvFencing): true}
		for _, j := range electionCoordinates {
			names[strings.ToUpper(j)] = true
		}
		for grew := true; grew; {
			grew = false
			for _, e := range c.env {
				if !names[strings.ToUpper(e.Name)] {
					continue
				}
				for _, ref := range references(e.Value) {
					if r := strings.ToUpper(ref); !names[r] {
						names[r], grew = true, true
					}
				}
			}
		}
		for _, key := range keys {
			for _, from := range c.envFrom {
				if from.ConfigMapRef != nil && from.ConfigMapRef.Name == name && names[strings.ToUpper(from.Prefix+key)] {
					return true
				}
			}
			for _, e := range c.env {
				if r := e.ValueFrom; e.Value == "" && r != nil && r.ConfigMapKeyRef != nil && r.ConfigMapKeyRef.Name == name && r.ConfigMapKeyRef.Key == key && names[strings.ToUpper(e.Name)] {
					return true
				}
			}
		}
	}
	return false
}

// readsPodMetadata reports whether an env entry of c reads the Pod's labels or annotations.
func readsPodMetadata(c *corev1.Container) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return fromPodMetadata(&e) })
}

// fromPodMetadata reports whether e reads the Pod's labels or annotations (as fieldRefValue reads
// the path).
func fromPodMetadata(e *corev1.EnvVar) bool {
	r := e.ValueFrom
	if r == nil || r.FieldRef == nil {
		return false
	}
	base, _, _ := splitSubscript(r.FieldRef.FieldPath)
	return base == "metadata.labels" || base == "metadata.annotations"
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
