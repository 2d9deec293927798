package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// This file answers: did a StatefulSet's controller make this Pod from the set's current
// revision? During a rollout held by a partition the controller makes the pods below it from the
// ControllerRevision status.currentRevision names, not from spec.template
// (newVersionedStatefulSetPod), and labels them with that revision's name. Such a Pod is not its
// owner's template, so its owner exempts it from nothing; but refusing it is wrong too: it is
// the replacement of a crashed writer below the partition, and only it can renew the Lease the
// order check then wants live (the twelfth red team deleted one, and its shard stayed down until
// the rollout was undone). The guard judges a set's template, not its revisions, so it cannot say
// the revision was order-checked for this shard: the Pod's order check is "could not verify",
// which a Pod passes with a warning (Pods fail open), while the rest of it is judged as ever; but
// only on a shard whose election has minted before (electedBefore). A shard never elected is new
// to the set (scaled up below the partition onto the current revision, which the set's own review
// judged as its template): its order check stands.

// Revisions reads the pod template of a StatefulSet's ControllerRevision. The webhook's Owners
// implement it too (a GET; a revision is read only for a Pod its set's template does not match).
type Revisions interface {
	// RevisionTemplate returns the pod template ControllerRevision name in namespace holds,
	// when its controller is the object with UID owner. found is false when there is no such
	// revision; known is false when the webhook cannot tell.
	RevisionTemplate(namespace, name string, owner types.UID) (tmpl *corev1.PodTemplateSpec, found, known bool)
}

// StatefulSetRevisionTemplate decodes what a StatefulSet's ControllerRevision holds: a strategic
// merge patch that replaces spec.template (getPatch in the StatefulSet controller), and nothing
// else of the set.
func StatefulSetRevisionTemplate(rev *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	if len(rev.Data.Raw) == 0 {
		return nil, errors.New("ControllerRevision " + rev.Name + " holds no data")
	}
	var patch struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(rev.Data.Raw, &patch); err != nil {
		return nil, fmt.Errorf("decoding ControllerRevision %s: %w", rev.Name, err)
	}
	if patch.Spec.Template == nil {
		return nil, errors.New("ControllerRevision " + rev.Name + " holds no pod template")
	}
	return patch.Spec.Template, nil
}

// labelRevision is the label the StatefulSet controller gives each pod: the name of the
// ControllerRevision it made the pod from.
const labelRevision = appsv1.StatefulSetRevisionLabel

// fromCurrentRevision says how Pod p was made by its StatefulSet owner from the set's current
// revision, below the partition of a rollout ("" when it was not, or the guard cannot tell): the
// Pod names that revision, the set is mid-rollout with p's ordinal among those it makes from it,
// and p's containers that can arm are the revision's (podExemptionHolds against it).
func (h *Handler) fromCurrentRevision(p, owner *Workload, creating bool) string {
	revs, ok := h.Owners.(Revisions)
	if !ok || owner == nil || owner.Kind != gvkStatefulSet.Kind || owner.CurrentRevision == "" || p.Pod.Meta.Labels[labelRevision] != owner.CurrentRevision {
		return ""
	}
	n, ok := setOrdinal(p, owner)
	// Below the partition and among the set's ordinals: the controller makes no pod beyond its
	// replicas (the thirteenth red team's hand-made Pod of ordinal 8 under a set of 2, partition 10).
	if !ok || n < int64(owner.OrdinalStart) ||
		n >= int64(owner.OrdinalStart)+int64(min(owner.CurrentBelow, owner.Replicas)) {
		return ""
	}
	tmpl, found, known := revs.RevisionTemplate(owner.Namespace, owner.CurrentRevision, types.UID(owner.UID))
	switch {
	case !known:
		return fmt.Sprintf("its controller %s, whose current revision %s (from which it makes the pods below its partition) the webhook could not read,", p.Controller, owner.CurrentRevision)
	case !found:
		return ""
	}
	rev := *owner // a copy with the revision's template: only its containers are compared
	rev.Pod.Spec, rev.Pod.Meta.Labels, rev.Pod.Meta.Annotations = &tmpl.Spec, tmpl.Labels, tmpl.Annotations
	if ok, _ := podExemptionHolds(p, &rev, true, true, creating); !ok {
		return ""
	}
	return fmt.Sprintf("its controller %s, which made it from its current revision %s (as it makes the pods below its partition during a rollout; the guard judges a set's template, not its revisions),", p.Controller, owner.CurrentRevision)
}

// electedBefore splits shards into those whose Lease in ns exists with an epoch of at least 1 (the
// shard's election has minted: a Pod there replaces a writer that ran) and the rest.
func electedBefore(f *Facts, ns string, shards []uint32) (elected, fresh []uint32) {
	for _, s := range shards {
		lf, ok := f.Leases[types.NamespacedName{Namespace: ns, Name: electionenv.LeaseName(s)}]
		if ok && lf.Err == nil && !lf.NotFound && lf.Spec.LeaseTransitions != nil && *lf.Spec.LeaseTransitions >= 1 {
			elected = append(elected, s)
		} else {
			fresh = append(fresh, s)
		}
	}
	return elected, fresh
}

// revisionRuns is what a StatefulSet under review runs from its current revision once the change
// lands: the set with that revision's template, for the ordinals below its partition (now), and
// what it ran from the same revision before (old; nil when it ran nothing from it). The set's own
// review judges its template; the pods below a partition come from the revision instead
// (newVersionedStatefulSetPod), and nothing judged that revision as it will run: the
// twenty-fifth red team created a set at replicas 0 armed (its order check deferred: it ran no
// pods), then in one update set replicas 1 and shadow with a partition above it; the controller
// made the pod from the armed revision, which no order check had covered, and its Pod was
// admitted as a crashed writer's replacement. Scaled up below the partition, or armed there
// through a ConfigMap the revision reads, is the same arming (handleScale, handleConfigMap).
// why is set when the revision could not be read: the change cannot be verified.
func (h *Handler) revisionRuns(now, old *Workload) (rnow, rold *Workload, why string) {
	revs, ok := h.Owners.(Revisions)
	if !ok || now == nil || now.Kind != gvkStatefulSet.Kind || now.revision == "" {
		return nil, nil, ""
	}
	below := min(now.partition, now.Replicas)
	if below <= 0 {
		return nil, nil, ""
	}
	tmpl, found, known := revs.RevisionTemplate(now.Namespace, now.revision, types.UID(now.UID))
	switch {
	case !known:
		return nil, nil, fmt.Sprintf("its current revision %s, from which its controller makes the pods below its partition, could not be read", now.revision)
	case !found:
		return nil, nil, "" // the controller then makes every pod from the update revision
	case now.Pod.Spec != nil && sameTemplate(now.Pod, PodContext{Template: true, Spec: &tmpl.Spec, Meta: PodMeta{Labels: tmpl.Labels, Annotations: tmpl.Annotations}}, nil):
		return nil, nil, "" // the set's own template: judged as such
	}
	fromRevision := func(w *Workload, n int32) *Workload {
		r := *w
		r.Pod = PodContext{Template: true, Spec: &tmpl.Spec, Meta: PodMeta{Labels: tmpl.Labels, Annotations: tmpl.Annotations}}
		r.setReplicas(&n)
		r.Name = w.Name // the pods' names and hostnames: <set>-<ordinal>
		r.CurrentRevision, r.CurrentBelow, r.revision, r.fromRevision = "", 0, "", w.revision
		return &r
	}
	rnow = fromRevision(now, below)
	if old != nil && old.revision == now.revision && old.NoPods == "" {
		// It ran the revision below its partition, or on every ordinal when no rollout was under
		// way (the revision was its template: a canary started on an armed set arms nothing new).
		b := min(old.partition, old.Replicas)
		if old.updateRevision == old.revision {
			b = old.Replicas
		}
		if b > 0 {
			rold = fromRevision(old, b)
		}
	}
	return rnow, rold, ""
}

// judgeRevision judges, for a StatefulSet review whose own judgement d admitted it, what the set
// runs from its current revision once the change lands (revisionRuns), as an update of those pods
// from what it ran so before: its refusal is the review's.
func (h *Handler) judgeRevision(ctx context.Context, start time.Time, now, old *Workload, d Decision, lookups int) (Decision, int) {
	if !d.Allowed {
		return d, lookups
	}
	rnow, rold, why := h.revisionRuns(now, old)
	switch {
	case why != "":
		return Decision{Subject: fmt.Sprintf("%s %s/%s", now.Kind, now.Namespace, now.Name), Reason: ReasonCouldNotVerify, Warnings: d.Warnings,
			Unmet: []Unmet{{Reason: ReasonCouldNotVerify, Problem: "could not verify what it runs below its partition: " + why + ".", Fix: "retry; if it persists, check the webhook's access to controllerrevisions."}}}, lookups
	case rnow == nil:
		return d, lookups
	}
	load := newReviewLoad(start, rnow, rold)
	defer load.release()
	rd, n := h.decide(withReviewLoad(ctx, load), Input{Operation: admissionv1.Update, Object: rnow, Old: rold, Budget: NewBudget(h.WorkBudget)})
	rd.Warnings = append(d.Warnings, rd.Warnings...)
	if rd.Allowed {
		rd.Reason = d.Reason
	}
	return rd, lookups + n
}
