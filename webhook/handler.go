package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the guard is served.
const Path = "/validate"

// maxRounds bounds the lookup rounds of one admission: ConfigMaps, then the ServiceAccount,
// namespace-wide access and Leases, then access to single Leases by name, plus slack for
// ConfigMaps discovered late. Anything still missing after it is a failed lookup to Decide.
const maxRounds = 5

// Handler is the thin transport around Decide: decode, gather facts, decide, answer, record.
type Handler struct {
	Resolver Resolver
	Policy   Policy
	// Clock judges Lease liveness; nil means the real clock.
	Clock clock.PassiveClock
	// Metrics may be nil.
	Metrics *Metrics
	// Log receives one line per decision; the zero Logger means the one in the request context
	// (controller-runtime puts the request's identity there).
	Log logr.Logger
	// LookupTimeout bounds all lookups of one admission, so the guard answers before the API
	// server's webhook timeout (the chart uses 5 s); 0 means 4 s.
	LookupTimeout time.Duration
}

var _ admission.Handler = (*Handler)(nil)

// NewWebhook wraps h for a controller-runtime webhook server (it recovers panics into a 500).
func NewWebhook(h *Handler) *admission.Webhook {
	return &admission.Webhook{Handler: h}
}

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	log := h.Log
	if log.GetSink() == nil {
		log = logf.FromContext(ctx)
	}
	gvk := schema.GroupVersionKind(req.Kind)
	kind := KindOther
	if Known(gvk) {
		kind = gvk.Kind
	}
	log = log.WithValues("kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name,
		"operation", req.Operation, "uid", req.UID, "dryRun", req.DryRun != nil && *req.DryRun)

	allow := func(reason Reason, msg string) admission.Response {
		h.Metrics.observe(kind, true, reason, time.Since(start))
		log.Info("allowed: no opinion", "reason", reason, "why", msg)
		return admission.Allowed("")
	}
	malformed := func(err error) admission.Response {
		h.Metrics.observe(kind, false, ReasonMalformed, time.Since(start))
		log.Info("denied: malformed request", "reason", ReasonMalformed, "error", err.Error())
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed AdmissionReview: %w", err))
	}

	switch {
	case req.UID == "" && req.Kind.Kind == "":
		return malformed(errors.New("no request (want an admission.k8s.io/v1 AdmissionReview with .request set)"))
	case !Known(gvk):
		return allow(ReasonNoOpinion, "the guard does not judge "+gvk.String())
	case req.SubResource != "":
		return allow(ReasonNoOpinion, "subresource "+req.SubResource+" cannot change a pod template")
	case req.Operation != admissionv1.Create && req.Operation != admissionv1.Update:
		return allow(ReasonNoOpinion, "operation "+string(req.Operation)+" cannot arm anything")
	case req.Operation == admissionv1.Update && gvk == gvkPod:
		return allow(ReasonNoOpinion, "a Pod's environment cannot change after creation")
	}

	obj, err := DecodeWorkload(gvk, req.Namespace, req.Object.Raw)
	if err != nil {
		return malformed(fmt.Errorf("object: %w", err))
	}
	in := Input{Operation: req.Operation, Object: obj}
	if req.Operation == admissionv1.Update {
		old, err := DecodeWorkload(gvk, req.Namespace, req.OldObject.Raw)
		if err != nil {
			// Judged as if it had been unarmed: the order check then runs, the strict reading.
			log.Info("old object unreadable; judging the update as a transition to armed", "error", err.Error())
		} else {
			in.Old = old
		}
	}

	d, lookups := h.decide(ctx, in)

	h.Metrics.observe(kind, d.Allowed, d.Reason, time.Since(start))
	kv := []any{"allowed", d.Allowed, "reason", d.Reason, "lookups", lookups, "tookMs", time.Since(start).Milliseconds()}
	if len(d.Armed) > 0 {
		kv = append(kv, "armed", d.Armed)
	}
	if len(d.Unmet) > 0 {
		unmet := make([]string, len(d.Unmet))
		for i, u := range d.Unmet {
			unmet[i] = string(u.Reason) + ": " + u.Problem
		}
		kv = append(kv, "unmet", unmet)
	}
	if len(d.Warnings) > 0 {
		kv = append(kv, "warnings", d.Warnings)
	}
	log.Info("decision", kv...)

	if d.Allowed {
		return admission.Allowed("").WithWarnings(d.Warnings...)
	}
	return admission.Denied(d.Message()).WithWarnings(d.Warnings...)
}

// decide bounds the lookups in time and evaluates.
func (h *Handler) decide(ctx context.Context, in Input) (Decision, int) {
	now := time.Now()
	if h.Clock != nil {
		now = h.Clock.Now()
	}
	timeout := h.LookupTimeout
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return Evaluate(ctx, h.Resolver, in, h.Policy, now)
}

// Evaluate gathers facts with r, round by round, until the policy needs nothing more, then
// decides at now. It returns the decision and the number of lookups made.
func Evaluate(ctx context.Context, r Resolver, in Input, p Policy, now time.Time) (Decision, int) {
	facts := NewFacts(now)
	if in.Budget == nil {
		in.Budget = NewBudget(0)
	}
	lookups := 0
	for round := 0; round < maxRounds && ctx.Err() == nil; round++ {
		q := Needs(in, facts, p)
		if q.Empty() {
			break
		}
		lookups += q.Size()
		facts.Merge(r.Resolve(ctx, q))
	}
	return Decide(in, facts, p), lookups
}
