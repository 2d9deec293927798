package webhook

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// This file answers "what does binding a Pod to its node change that the Pod's containers read?".
// Binding (pods/binding, the scheduler's path) sets spec.nodeName and copies the Binding's
// annotations and labels onto the Pod, over its own (pkg/registry/core/pod/storage), and the
// PodTopologyLabels admission plugin adds the node's topology labels to every Binding. A fieldRef
// reads them at every container start, so a Binding can arm a Pod, move its shard or turn its
// election off just as a label edit can (the ninth red team turned an armed Pod's election off with
// a Binding's label). It is judged like that edit: the Pod as the watch holds it, against the Pod
// as the binding leaves it.

// isBinding reports whether req binds a Pod to a node: through the Pod's binding subresource (the
// scheduler's path), or the older namespaced bindings resource (POST .../bindings, what `kubectl
// create` of a Binding sends), which binds the same way (the tenth red team's path around it).
func isBinding(req Request) bool {
	return req.Resource.Group == "" && req.Operation == admissionv1.Create &&
		(req.SubResource == subresourceBinding && req.Resource.Resource == "pods" || req.SubResource == "" && req.Resource.Resource == "bindings")
}

func (h *Handler) handleBinding(ctx context.Context, req Request, log logr.Logger, start time.Time) Response {
	kind := gvkPod.Kind
	var b corev1.Binding
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &b); err != nil {
		h.observe(req, kind, false, ReasonMalformed, time.Since(start))
		return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed Binding: %w", err))
	}
	if len(b.Labels) == 0 && len(b.Annotations) == 0 {
		h.observe(req, kind, true, ReasonNoOpinion, time.Since(start))
		return allowed()
	}
	// Pods fail open: a Pod the guard cannot find is admitted with a warning, as on its own review.
	unverified := func(why string) Response {
		h.observe(req, kind, true, ReasonUnverifiedPod, time.Since(start))
		log.Info("allowed: could not verify the binding", "why", why)
		return allowed().WithWarnings(truncate(fmt.Sprintf("ehdb-election guard: could not verify what binding Pod %s/%s changes: %s (Pods fail open)", req.Namespace, req.Name, why), 240))
	}
	if h.Workloads == nil {
		return unverified("this webhook does not watch Pods")
	}
	name := req.Name
	if name == "" {
		name = b.Name // the bindings resource names the Pod in the Binding
	}
	old, found, known := h.Workloads.Workload("pods", req.Namespace, name)
	switch {
	case !known:
		return unverified("its Pods are not watched here")
	case !found:
		return unverified("the Pod was not found")
	}
	now := boundBy(old, &b)
	h.verifyOwner(now, false)
	return h.respond(ctx, req, log, start, kind, Input{Operation: admissionv1.Update, Subresource: subresourceBinding, Object: now, Old: old, Budget: NewBudget(h.WorkBudget)})
}

// boundBy is Pod p as binding b leaves it: on b's node, with b's annotations and labels over its
// own. p is not changed.
func boundBy(p *Workload, b *corev1.Binding) *Workload {
	cp := *p
	if p.Pod.Spec != nil {
		spec := *p.Pod.Spec
		spec.NodeName = b.Target.Name
		cp.Pod.Spec = &spec
	}
	cp.Pod.Meta.Labels, cp.Pod.Meta.Annotations = maps.Clone(p.Pod.Meta.Labels), maps.Clone(p.Pod.Meta.Annotations)
	if len(b.Labels) > 0 && cp.Pod.Meta.Labels == nil {
		cp.Pod.Meta.Labels = map[string]string{}
	}
	if len(b.Annotations) > 0 && cp.Pod.Meta.Annotations == nil {
		cp.Pod.Meta.Annotations = map[string]string{}
	}
	maps.Copy(cp.Pod.Meta.Labels, b.Labels)
	maps.Copy(cp.Pod.Meta.Annotations, b.Annotations)
	return &cp
}
