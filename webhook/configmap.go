package webhook

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// maxReaders bounds the readers of one ConfigMap the guard judges in one review; above it the
// change is refused as too complex to judge.
const maxReaders = 32

// handleConfigMap judges a ConfigMap being created, updated or deleted as each guarded object that
// reads it will run after the change (issue 17, class 1): the kubelet resolves the environment at
// every container start, so the change bites at the next restart with no new Pod at all. Each
// reader is judged as an UPDATE from itself with the old content to itself with the new one: a
// change that arms it is a transition (everything arming the object itself must meet, order check
// included); a change to an armed reader must leave it meeting the requirements (an election turned
// off is refused with the removal order), and a shard it moves to faces the order check. The
// readers come from a watch-fed index of every kind in PodSources; a reader whose controller is a
// reader of the same review with the same template is judged through that controller.
func (h *Handler) handleConfigMap(ctx context.Context, req Request, log logr.Logger, start time.Time) Response {
	kind := gvkConfigMap.Kind
	change := &ConfigMapChange{Name: req.Name, New: ConfigMapFact{NotFound: true}, Old: ConfigMapFact{NotFound: true}}
	var oldCM, newCM *corev1.ConfigMap
	if req.Operation != admissionv1.Delete {
		var err error
		newCM, err = decodeConfigMap(req.Object.Raw)
		if err != nil {
			h.observe(req, kind, false, ReasonMalformed, time.Since(start))
			return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed ConfigMap: %w", err))
		}
		change.New = ConfigMapFact{Data: newCM.Data}
		if change.Name == "" {
			change.Name = newCM.Name
		}
	}
	if req.Operation != admissionv1.Create {
		// The API server always sends the old ConfigMap of an update or delete. One that cannot be
		// read is malformed: judged as if it had not existed, a delete would change nothing and a
		// change that turns an armed reader's election off would look like arming (the fuzzer's
		// DELETE with an old object of kind "Configap" was admitted).
		var err error
		oldCM, err = decodeConfigMap(req.OldObject.Raw)
		if err != nil {
			h.observe(req, kind, false, ReasonMalformed, time.Since(start))
			return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed old ConfigMap: %w", err))
		}
		change.Old = ConfigMapFact{Data: oldCM.Data}
		if change.Name == "" {
			change.Name = oldCM.Name
		}
	}
	if change.Name == rootCAConfigMap {
		if what := rootCATampering(req.Operation, req.UserInfo.Username, h.rootCAPublishers(), oldCM, newCM); what != "" {
			if msg := h.rootCARefusal(req, what); msg != "" {
				h.observe(req, kind, false, ReasonNoToken, time.Since(start))
				log.Info("decision", "allowed", false, "reason", ReasonNoToken, "why", msg)
				return denied(msg)
			}
		}
	}
	readers, err := h.Readers.ReadersOf(req.Namespace, change.Name)
	if err != nil {
		h.observe(req, kind, false, ReasonCouldNotVerify, time.Since(start))
		return denied(fmt.Sprintf("ehdb-election guard: could not tell which workloads read ConfigMap %s/%s: %v", req.Namespace, change.Name, err))
	}
	// What no reader's judgement can show: a change the guard could not date later, and an
	// immutable ConfigMap the kubelets keep.
	unverifiable := func(msg string) Response {
		h.observe(req, kind, false, ReasonCouldNotVerify, time.Since(start))
		log.Info("decision", "allowed", false, "reason", ReasonCouldNotVerify, "why", msg)
		return denied(msg)
	}
	if msg := unrecordedChange(req, oldCM, newCM, readers); msg != "" {
		return unverifiable(msg)
	}
	// A StatefulSet mid-rollout makes the pods below its partition from its current revision,
	// which may read the ConfigMap as its template does not (revisionRuns): judged as a reader.
	for _, w := range readers {
		rnow, _, why := h.revisionRuns(w, nil)
		switch {
		case why != "":
			return unverifiable(fmt.Sprintf("ehdb-election guard: could not verify the change of ConfigMap %s/%s for %s %s/%s: %s", req.Namespace, change.Name, w.Kind, w.Namespace, w.Name, why))
		case rnow != nil:
			readers = append(readers, rnow)
		}
	}
	readers = judgedThroughController(affectedReaders(change, readers))
	if deletesImmutable(req, oldCM) {
		hr, ok := h.Readers.(ConfigMapHolders)
		if !ok {
			return unverifiable(fmt.Sprintf("ehdb-election guard: could not tell which Pods hold immutable ConfigMap %s/%s: this webhook's readers do not index them", req.Namespace, change.Name))
		}
		holders, err := hr.HoldersOf(req.Namespace, change.Name)
		if err != nil {
			return unverifiable(fmt.Sprintf("ehdb-election guard: could not tell which Pods hold immutable ConfigMap %s/%s: %v", req.Namespace, change.Name, err))
		}
		if msg := keptByKubelets(req.Namespace, oldCM, readers, holders); msg != "" {
			return unverifiable(msg)
		}
	}
	ctx, cancel := h.deadline(ctx)
	defer cancel()
	var denials []Decision
	var warnings []string
	judged, lookups := 0, 0
	for _, w := range readers {
		if ctx.Err() != nil {
			denials = append(denials, Decision{Subject: "the remaining readers", Reason: ReasonCouldNotVerify,
				Unmet: []Unmet{{Reason: ReasonCouldNotVerify, Problem: "the review's deadline passed before every reader was judged.", Fix: "retry."}}})
			break
		}
		if judged == maxReaders {
			denials = append(denials, Decision{Subject: fmt.Sprintf("ConfigMap %s/%s", req.Namespace, change.Name), Reason: ReasonTooComplex,
				Unmet: []Unmet{{Reason: ReasonTooComplex, Problem: fmt.Sprintf("%d guarded objects read it; the guard judges at most %d per change.", len(readers), maxReaders),
					Fix: "set " + EnvFencing + " in the workloads' own env instead of in a ConfigMap shared by this many."}}})
			break
		}
		judged++
		// The reader's owner exempts it only when verified, as on the reader's own review (a copy:
		// the watch's object is shared).
		cp := *w
		w = &cp
		h.verifyOwner(w, false)
		load := newReviewLoad(start, w)
		d, n := Evaluate(withReviewLoad(ctx, load), h.Resolver, Input{Operation: admissionv1.Update, Object: w, Old: w, ConfigMapChange: change, Budget: NewBudget(h.WorkBudget)}, h.Policy, h.now())
		load.release()
		lookups += n
		warnings = append(warnings, d.Warnings...)
		if !d.Allowed {
			denials = append(denials, d)
		}
	}
	log.Info("decision", "allowed", len(denials) == 0, "operation", req.Operation, "readers", len(readers), "judged", judged, "lookups", lookups, "tookMs", time.Since(start).Milliseconds())
	if len(warnings) > maxListed {
		warnings = warnings[:maxListed]
	}
	if len(denials) == 0 {
		h.observe(req, kind, true, ReasonNoOpinion, time.Since(start))
		return allowed().WithWarnings(warnings...)
	}
	h.observe(req, kind, false, denials[0].Reason, time.Since(start))
	// Said of the change first: the reader's own decision reads as an arming ("refusing to arm
	// … on StatefulSet …"), which misleads when the change disarms a writer already armed.
	verb := map[admissionv1.Operation]string{admissionv1.Create: "creating", admissionv1.Delete: "deleting"}[req.Operation]
	if verb == "" {
		verb = "editing"
	}
	msg := fmt.Sprintf("ehdb-election guard: %s ConfigMap %s/%s is refused: a workload that reads it would run with %s=enforce and its requirements unmet.\n",
		verb, req.Namespace, change.Name, EnvFencing) + denials[0].Message()
	if len(denials) > 1 {
		msg += fmt.Sprintf("\n(and %d more object(s) reading ConfigMap %s/%s are refused likewise)", len(denials)-1, req.Namespace, change.Name)
	}
	return denied(msg).WithWarnings(warnings...)
}

// affectedReaders keeps the readers whose judgement the change can move. A reader is judged when
// a key whose value the change sets, alters or removes is one the guard reads for it (the filter of
// configMapNeeds: read under a name the guard reads, or one a literal value of its container refers
// to — the kubelet expands $(NAME) in literal values only, never in values taken from a ConfigMap),
// or when the ConfigMap appears or goes and the reader's reference to it is not optional (the kubelet
// starts none of its containers without it). Any other change can neither arm nor disarm a reader,
// so an edit of a ConfigMap many workloads share costs no judgement and meets no reader limit.
func affectedReaders(change *ConfigMapChange, readers []*Workload) []*Workload {
	appears := change.Old.NotFound != change.New.NotFound
	var changed []string
	for k, v := range change.New.Data {
		if old, ok := change.Old.Data[k]; !ok || old != v {
			changed = append(changed, k)
		}
	}
	for k := range change.Old.Data {
		if _, ok := change.New.Data[k]; !ok {
			changed = append(changed, k)
		}
	}
	return slices.DeleteFunc(slices.Clone(readers), func(w *Workload) bool {
		if w.finished() {
			return true
		}
		if appears && requiresConfigMap(w, change.Name) {
			return false
		}
		f := configMapNeeds(w)[change.Name]
		if f == nil {
			return false // read in a way the filter does not describe: judged
		}
		return !slices.ContainsFunc(changed, f.keep)
	})
}

// requiresConfigMap reports whether a container of w reads ConfigMap name without optional: true.
func requiresConfigMap(w *Workload, name string) bool {
	return slices.ContainsFunc(containerSources(w), func(c envSources) bool { return requiresConfigMapIn(c.env, c.envFrom, name) })
}

// requiresConfigMapIn reports whether env or envFrom reads ConfigMap name without optional: true:
// the kubelet starts no container so reading it while it is missing.
func requiresConfigMapIn(env []corev1.EnvVar, envFrom []corev1.EnvFromSource, name string) bool {
	for _, from := range envFrom {
		if r := from.ConfigMapRef; r != nil && r.Name == name && (r.Optional == nil || !*r.Optional) {
			return true
		}
	}
	for _, e := range env {
		if e.ValueFrom != nil {
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil && r.Name == name && (r.Optional == nil || !*r.Optional) {
				return true
			}
		}
	}
	return false
}

// judgedThroughController drops the readers whose controller is itself among the readers and runs
// them from the same environment: the controller's judgement is theirs (a StatefulSet's Pods, a
// Deployment's ReplicaSets and their Pods), so one change read by a set of many replicas is judged
// once per template, not once per Pod. A reader whose controller is absent, or differs, or was not
// judged for it (in deletion, running no pods, a Pod not as its controller makes them:
// madeByOwner), stays. Every owner a dropped Pod is judged through, up the chain, carries when the
// Pod's processes started and what they read then (runsAs).
func judgedThroughController(readers []*Workload) []*Workload {
	byUID := map[string]*Workload{}
	for _, w := range readers {
		if w.UID != "" {
			byUID[w.UID] = w
		}
	}
	through := map[*Workload]*Workload{}
	for _, w := range readers {
		ref := w.ControllerRef
		if ref == nil || !w.Exempt {
			continue
		}
		owner, ok := byUID[string(ref.UID)]
		if !ok || owner.Name != ref.Name || owner.Kind != ref.Kind {
			continue
		}
		if w.Kind == gvkPod.Kind {
			if sameEnvironment(w, owner) && madeByOwner(w, owner) {
				through[w] = owner
			}
		} else if held, _ := exemptionHolds(w, owner, true, true, false); held {
			through[w] = owner
		}
	}
	for w := range through {
		if w.Kind != gvkPod.Kind {
			continue
		}
		for o, seen := through[w], 0; o != nil && seen < len(readers); o, seen = through[o], seen+1 {
			o.runsAs(w)
		}
	}
	return slices.DeleteFunc(slices.Clone(readers), func(w *Workload) bool { return through[w] != nil })
}

// sameEnvironment reports whether a Pod's containers read their environment exactly as its
// controller's template says (names, env, envFrom): admission plugins change a Pod's spec in
// other ways (volumes, the node), never its containers' environment.
func sameEnvironment(p, owner *Workload) bool {
	pc, oc := p.Containers(), owner.Containers()
	if len(pc) != len(oc) {
		return false
	}
	for i := range pc {
		if pc[i].Name != oc[i].Name || !slices.EqualFunc(pc[i].Env, oc[i].Env, envVarEqual) ||
			!slices.EqualFunc(pc[i].EnvFrom, oc[i].EnvFrom, envFromEqual) {
			return false
		}
	}
	return true
}

// keptByKubelets refuses the deletion of an immutable ConfigMap that a guarded object reads a key
// of that can move it (readers, after affectedReaders), or that a Pod bound to a node references
// by any means (holders: a volume is enough), or returns "". The kubelet stops watching
// an immutable object once it has it (objectCache.Get in the kubelet's watch-based manager) and
// serves the copy to every container it starts on a node where a Pod still references the name,
// so after a delete, or a delete and a re-create with other content, those containers start with
// the old content while the guard judges the new: the seventeenth red team re-created one from
// enforce to shadow, then turned the election off in the reader, and the kubelet would have
// started it armed with the election off; the eighteenth kept the copy on a node with a Pod that
// only mounted it, and a new reader there would have started with it. Readers of no key that
// matters to them do not count; every holder does, since whatever reads the name next on its node
// gets the copy. Moving the readers to another ConfigMap, and deleting the Pods that hold it, first
// is the way.
func keptByKubelets(namespace string, old *corev1.ConfigMap, readers, holders []*Workload) string {
	// Only readers that read a key of it that matters: an unrelated workload's immutable
	// ConfigMap is deleted as freely as any other.
	keys := slices.Collect(maps.Keys(old.Data))
	var names []string
	add := func(w *Workload) {
		if name := w.Kind + " " + w.Namespace + "/" + w.Name; !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, w := range holders {
		add(w)
	}
	for _, w := range readers {
		if readsKeyOf(w, old.Name, keys) {
			add(w)
		}
	}
	if len(names) == 0 {
		return ""
	}
	if len(names) > maxListed {
		names = append(names[:maxListed], fmt.Sprintf("and %d more", len(names)-maxListed))
	}
	return fmt.Sprintf("ehdb-election guard: refusing to delete immutable ConfigMap %s/%s while %s read or reference it: a kubelet keeps serving an immutable ConfigMap's content to every container it starts on a node where a Pod still references it, after a delete or a re-create, so the guard could no longer see what those containers start with. Move the readers to another ConfigMap (and wait for their rollout) and delete the Pods that reference it, then delete it.",
		namespace, old.Name, strings.Join(names, ", "))
}

// deletesImmutable reports whether req deletes an immutable ConfigMap (old is its last content).
func deletesImmutable(req Request, old *corev1.ConfigMap) bool {
	return req.Operation == admissionv1.Delete && old != nil && old.Immutable != nil && *old.Immutable
}

// readsKeyOf reports whether w reads one of keys of ConfigMap name in a way that can move it
// (configMapNeeds), or reads it in a way the guard's filter does not describe.
func readsKeyOf(w *Workload, name string, keys []string) bool {
	f := configMapNeeds(w)[name]
	return f == nil || slices.ContainsFunc(keys, f.keep)
}

// unrecordedChange refuses a change of a ConfigMap that a running container reads a key of that
// the running-process rule judges (readByTheRunningRule), when the change leaves no record the
// RBAC review could date it by (started.go), or returns "": a key removed, or the whole ConfigMap
// deleted (a removal stamps no managedFields time), or managedFields rewritten so that the record of its last change goes back or vanishes
// (an update may send them; the eighteenth red team dropped the entry of its enforce -> shadow edit
// and then unbound the writer, whose process still held enforce). A value set to shadow is dated,
// and is the way to disarm a reader through its ConfigMap.
func unrecordedChange(req Request, old, now *corev1.ConfigMap, readers []*Workload) string {
	if old == nil || req.Operation == admissionv1.Create {
		return ""
	}
	var removed []string
	for k := range old.Data {
		if now == nil {
			removed = append(removed, k)
		} else if _, kept := now.Data[k]; !kept {
			removed = append(removed, k)
		}
	}
	back := false
	if now != nil {
		was, wasKept := lastChange(&old.ObjectMeta)
		is, isKept := lastChange(&now.ObjectMeta)
		back = wasKept && (!isKept || is.Before(was))
	}
	if len(removed) == 0 && !back {
		return ""
	}
	for _, w := range readers {
		if w.RunningSince.IsZero() {
			continue
		}
		matters := func(keys []string) bool { return readByTheRunningRule(w, old.Name, keys) }
		switch {
		case matters(removed) && now == nil:
			return fmt.Sprintf("ehdb-election guard: refusing to delete ConfigMap %s/%s while %s %s/%s, which runs, reads it: a process keeps what it read at its start, and a delete leaves no record of when, so the guard could no longer tell that it still holds it. Set the values it reads to what they should be (NOETL_EHDB_FENCING=shadow); the ConfigMap can be deleted once nothing that reads it runs.",
				req.Namespace, old.Name, w.Kind, w.Namespace, w.Name)
		case matters(removed):
			return fmt.Sprintf("ehdb-election guard: refusing to remove keys of ConfigMap %s/%s that %s %s/%s, which runs, reads: a process keeps what it read at its start, and a removal leaves no record of when, so the guard could no longer tell that it still holds it. Set the value instead (NOETL_EHDB_FENCING=shadow); a key it reads can be removed once nothing that reads it runs.",
				req.Namespace, old.Name, w.Kind, w.Namespace, w.Name)
		case back && matters(slices.Collect(maps.Keys(old.Data))):
			return fmt.Sprintf("ehdb-election guard: refusing to move back the record of ConfigMap %s/%s's last change (its managedFields times) while %s %s/%s, which runs, reads it: the guard dates what a running process read by it.",
				req.Namespace, old.Name, w.Kind, w.Namespace, w.Name)
		}
	}
	return ""
}
