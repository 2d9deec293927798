package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Workloads finds a guarded workload as the webhook's watches hold it. The guard asks it when a
// review names a workload without carrying its pod template: a scale subresource.
type Workloads interface {
	// Workload returns the object of resource ("statefulsets") namespace/name; known is false
	// when the kind is not watched in that namespace.
	Workload(resource, namespace, name string) (w *Workload, found, known bool)
}

var gvkScale = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// scaleSource returns the kind req scales through its scale subresource (PodSource.Scale), if it
// does: a StatefulSet's new ordinals are shards the order check covers, and any of these kinds
// scaled up from 0 starts running pods (transition.go).
func scaleSource(req Request) (*PodSource, bool) {
	if req.SubResource != "scale" || req.Operation != admissionv1.Update {
		return nil, false
	}
	for i := range PodSources {
		if s := &PodSources[i]; s.Scale && s.GVK.Group == req.Resource.Group && s.Resource == req.Resource.Resource {
			return s, true
		}
	}
	return nil, false
}

func isScale(req Request) bool { _, ok := scaleSource(req); return ok }

// handleScale judges a workload scaled through its scale subresource as the same workload updated
// from the old replica count to the new one: an armed StatefulSet scaled up must have a live Lease
// for every ordinal it adds, and any armed workload scaled up from 0 one for every shard it runs.
// The pod template comes from the watch; a workload the watch does not hold cannot be verified,
// and that is refused (workloads fail closed).
func (h *Handler) handleScale(ctx context.Context, req Request, log logr.Logger, start time.Time) Response {
	src, _ := scaleSource(req)
	kind := src.GVK.Kind
	var newScale, oldScale autoscalingv1.Scale
	if err := decodeInto(req.Object.Raw, &newScale, gvkScale); err != nil {
		return h.answer(req, log, kind, start, malformedDecision(fmt.Errorf("object: %w", err)), 0)
	}
	if err := decodeInto(req.OldObject.Raw, &oldScale, gvkScale); err != nil {
		return h.answer(req, log, kind, start, malformedDecision(fmt.Errorf("oldObject: %w", err)), 0)
	}
	from, to := oldScale.Spec.Replicas, newScale.Spec.Replicas
	if to <= from || (kind != gvkStatefulSet.Kind && from > 0) {
		// Scaling down starts nothing, and the pods of the other kinds share one shard: more of
		// them add none.
		return h.answer(req, log, kind, start, Decision{Allowed: true, Reason: ReasonNoOpinion}, 0)
	}
	name := req.Name
	if name == "" {
		name = newScale.Name
	}
	// The scale names the workload's resourceVersion: its template is the watch's object of that
	// version or a later one, never an older one. An update that arms a set and a scale-up sent
	// right after it were judged on the unarmed template the watch still held (the second red
	// team: 3 of 25 rounds admitted as unarmed, and the new ordinals' Pods then exempt). The watch
	// trails the API server by milliseconds: wait for it, within the review's deadline. A later
	// version (its controller wrote its status meanwhile) is as good: the API server admits an
	// update inside its compare-and-swap loop, so a scale admitted over a version the object has
	// left is judged again over the one it is written on.
	ctx, cancel := h.deadline(ctx)
	defer cancel()
	var cur *Workload
	found, known := false, false
	for h.Workloads != nil {
		cur, found, known = h.Workloads.Workload(req.Resource.Resource, req.Namespace, name)
		if !found || oldScale.ResourceVersion == "" || atLeast(cur.ResourceVersion, oldScale.ResourceVersion) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	stale := found && oldScale.ResourceVersion != "" && !atLeast(cur.ResourceVersion, oldScale.ResourceVersion)
	if !found || stale {
		why := "the webhook does not watch " + req.Resource.Resource + " in " + req.Namespace
		switch {
		case stale:
			why = fmt.Sprintf("the webhook's watch holds version %s of it, not %s, which the scale names, or a later one", cur.ResourceVersion, oldScale.ResourceVersion)
		case known:
			why = "the webhook's watch does not hold it (yet)"
		}
		return h.answer(req, log, kind, start, Decision{Subject: fmt.Sprintf("%s %s/%s", kind, req.Namespace, name), Reason: ReasonCouldNotVerify,
			Unmet: []Unmet{{Reason: ReasonCouldNotVerify, Problem: fmt.Sprintf("could not verify the scale-up of %s %s/%s from %d to %d replicas: %s.", kind, req.Namespace, name, from, to, why),
				Fix: "retry; if it persists, check the webhook's watches (its readiness says which)."}}}, 0)
	}
	old, now := cur.scaledTo(from), cur.scaledTo(to)
	// A ReplicaSet is scaled by its Deployment's controller through its spec, not this path; one
	// scaled here under a Deployment at 0 is accounted for by no owner (unjudgedOwner).
	h.verifyOwner(now, false)
	d, lookups := h.decide(ctx, Input{Operation: admissionv1.Update, Object: now, Old: old})
	d, lookups = h.judgeRevision(ctx, start, now, old, d, lookups)
	return h.answer(req, log, kind, start, d, lookups)
}

// atLeast reports whether resourceVersion rv is want or later. Versions are compared as the API
// server defines them (resourceversion.CompareResourceVersion); a malformed one only equals itself.
func atLeast(rv, want string) bool {
	c, err := resourceversion.CompareResourceVersion(rv, want)
	if err != nil {
		return rv == want
	}
	return c >= 0
}

// malformedDecision is the answer to a review the guard cannot read.
func malformedDecision(err error) Decision {
	return Decision{Reason: ReasonMalformed, Subject: "the request", Unmet: []Unmet{{Reason: ReasonMalformed, Problem: err.Error() + ".", Fix: "send an admission.k8s.io/v1 AdmissionReview the API server would send."}}}
}

// answer records and renders a decision of one of the reviews routed outside Handle's main path.
func (h *Handler) answer(req Request, log logr.Logger, kind string, start time.Time, d Decision, lookups int) Response {
	h.observe(req, kind, d.Allowed, d.Reason, time.Since(start))
	kv := []any{"allowed", d.Allowed, "reason", d.Reason, "lookups", lookups, "tookMs", time.Since(start).Milliseconds()}
	if len(d.Unmet) > 0 {
		unmet := make([]string, len(d.Unmet))
		for i, u := range d.Unmet {
			unmet[i] = string(u.Reason) + ": " + u.Problem
		}
		kv = append(kv, "unmet", unmet)
	}
	log.Info("decision", kv...)
	if d.Allowed {
		return allowed().WithWarnings(d.Warnings...)
	}
	if d.Reason == ReasonMalformed {
		return errored(400, errors.New("ehdb-election guard: malformed AdmissionReview: "+d.Unmet[0].Problem))
	}
	return denied(d.Message()).WithWarnings(d.Warnings...)
}
