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
	// server's webhook timeout (the chart uses 5 s); 0 means 4 s. A request that says its own
	// deadline (the API server's ?timeout=) gets the earlier of the two.
	LookupTimeout time.Duration
	// Readers finds the guarded workloads that read a ConfigMap under review; nil: the guard
	// has no opinion on ConfigMaps.
	Readers ConfigMapReaders
	// Owners verifies the Deployment or CronJob a ReplicaSet or Job names as its controller
	// before that exempts it from the order check; nil: owners are trusted as named.
	Owners Owners
	// MaxInFlight bounds the reviews one process works on at once (NewHTTPHandler); a review
	// that finds no slot before its deadline gets HTTP 429, which the API server treats as a
	// webhook failure (workloads fail closed, Pods fail open). 0 means DefaultMaxInFlight.
	MaxInFlight int
	// WorkBudget is the steps one review may spend resolving environments (Budget); 0 means
	// DefaultBudget. A smaller budget refuses complex armed objects sooner, never admits more.
	WorkBudget int64
}

// DefaultMaxInFlight is the reviews one webhook process works on at once by default.
const DefaultMaxInFlight = 32

// maxReaders bounds the readers of one ConfigMap the guard judges in one review; above it the
// change is refused as too complex to judge.
const maxReaders = 32

var _ admission.Handler = (*Handler)(nil)

// NewWebhook wraps h for a controller-runtime webhook server (it recovers panics into a 500).
func NewWebhook(h *Handler) *admission.Webhook {
	return &admission.Webhook{Handler: h}
}

// Handle implements admission.Handler. A panic anywhere in judging is recovered here: the review
// is refused (a workload) or admitted with a warning (a Pod, which fails open), never left to
// kill the process or hang the API server's call.
func (h *Handler) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		kind := KindOther
		if Known(schema.GroupVersionKind(req.Kind)) || schema.GroupVersionKind(req.Kind) == gvkConfigMap {
			kind = req.Kind.Kind
		}
		msg := fmt.Sprintf("ehdb-election guard: internal error judging %s %s/%s: %v", req.Kind.Kind, req.Namespace, req.Name, r)
		h.logger(ctx).Error(fmt.Errorf("panic: %v", r), "recovered a panic while judging a review", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "uid", req.UID)
		if schema.GroupVersionKind(req.Kind) == gvkPod {
			h.Metrics.observe(kind, true, ReasonUnverifiedPod, time.Since(start))
			resp = admission.Allowed("").WithWarnings(truncate(msg+" (Pods fail open)", 240))
			return
		}
		h.Metrics.observe(kind, false, ReasonInternalError, time.Since(start))
		resp = admission.Errored(http.StatusInternalServerError, errors.New(msg))
	}()
	log := h.logger(ctx)
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
	case gvk == gvkConfigMap && h.Readers != nil && req.SubResource == "" &&
		(req.Operation == admissionv1.Create || req.Operation == admissionv1.Update):
		return h.handleConfigMap(ctx, req, log, start)
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
	h.verifyOwner(obj)
	in := Input{Operation: req.Operation, Object: obj, Budget: NewBudget(h.WorkBudget)}
	if req.Operation == admissionv1.Update {
		old, err := DecodeWorkload(gvk, req.Namespace, req.OldObject.Raw)
		if err != nil {
			// Judged as if it had been unarmed: the order check then runs, the strict reading.
			log.Info("old object unreadable; judging the update as a transition to armed", "error", err.Error())
		} else {
			in.Old = old
		}
	}

	// The ConfigMaps the review reads: only the keys its containers can make matter, charged to
	// the process's budget until the review is answered (configmapread.go).
	load := newReviewLoad(start, in.Object, in.Old)
	defer load.release()
	d, lookups := h.decide(withReviewLoad(ctx, load), in)

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

// verifyOwner withdraws the exemption of a ReplicaSet or Job whose controller is not found, with
// that UID, among the watched Deployments or CronJobs: it is then judged like any other object.
func (h *Handler) verifyOwner(w *Workload) {
	if h.Owners == nil || !w.Exempt || w.ControllerRef == nil || w.Kind == gvkPod.Kind {
		return
	}
	ref := w.ControllerRef
	if exists, known := h.Owners.OwnerExists(ref.Kind, w.Namespace, ref.Name, ref.UID); known && !exists {
		w.Exempt = false
		w.Controller += " (not found with uid " + string(ref.UID) + ")"
	}
}

func (h *Handler) logger(ctx context.Context) logr.Logger {
	if h.Log.GetSink() != nil {
		return h.Log
	}
	return logf.FromContext(ctx)
}

func (h *Handler) now() time.Time {
	if h.Clock != nil {
		return h.Clock.Now()
	}
	return time.Now()
}

// deadline bounds one review's lookups: LookupTimeout, or the request's own deadline if earlier.
func (h *Handler) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := h.LookupTimeout
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	return context.WithTimeout(ctx, timeout)
}

// Judge decides in as a review would (its ConfigMap reads filtered and budgeted), without HTTP.
func (h *Handler) Judge(ctx context.Context, in Input) Decision {
	load := newReviewLoad(time.Now(), in.Object, in.Old)
	defer load.release()
	if in.Budget == nil {
		in.Budget = NewBudget(h.WorkBudget)
	}
	d, _ := h.decide(withReviewLoad(ctx, load), in)
	return d
}

// decide bounds the lookups in time and evaluates.
func (h *Handler) decide(ctx context.Context, in Input) (Decision, int) {
	ctx, cancel := h.deadline(ctx)
	defer cancel()
	return Evaluate(ctx, h.Resolver, in, h.Policy, h.now())
}

// handleConfigMap judges a ConfigMap being created or updated as each guarded workload that reads
// it would see it: a change that arms a reader (its fencing value becomes enforce, from anything
// else) must meet everything arming the workload itself must meet, order check included. The
// readers come from a watch-fed index; their other ConfigMaps are looked up as usual.
func (h *Handler) handleConfigMap(ctx context.Context, req admission.Request, log logr.Logger, start time.Time) admission.Response {
	kind := gvkConfigMap.Kind
	newCM, err := decodeConfigMap(req.Object.Raw)
	if err != nil {
		h.Metrics.observe(kind, false, ReasonMalformed, time.Since(start))
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed ConfigMap: %w", err))
	}
	change := &ConfigMapChange{Name: req.Name, New: ConfigMapFact{Data: newCM.Data}, Old: ConfigMapFact{NotFound: true}}
	if change.Name == "" {
		change.Name = newCM.Name
	}
	if req.Operation == admissionv1.Update {
		if oldCM, err := decodeConfigMap(req.OldObject.Raw); err == nil {
			change.Old = ConfigMapFact{Data: oldCM.Data}
		} else {
			log.Info("old ConfigMap unreadable; judging the update as if it had not existed", "error", err.Error())
		}
	}
	readers, err := h.Readers.ReadersOf(req.Namespace, change.Name)
	if err != nil {
		h.Metrics.observe(kind, false, ReasonCouldNotVerify, time.Since(start))
		return admission.Denied(fmt.Sprintf("ehdb-election guard: could not tell which workloads read ConfigMap %s/%s: %v", req.Namespace, change.Name, err))
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
				Unmet: []Unmet{{Reason: ReasonTooComplex, Problem: fmt.Sprintf("%d guarded workloads read it; the guard judges at most %d per change.", len(readers), maxReaders),
					Fix: "set " + EnvFencing + " in the workloads' own env instead of in a ConfigMap shared by this many."}}})
			break
		}
		judged++
		load := newReviewLoad(start, w)
		d, n := Evaluate(withReviewLoad(ctx, load), h.Resolver, Input{Operation: admissionv1.Update, Object: w, Old: w, ConfigMapChange: change, Budget: NewBudget(h.WorkBudget)}, h.Policy, h.now())
		load.release()
		lookups += n
		warnings = append(warnings, d.Warnings...)
		if !d.Allowed {
			denials = append(denials, d)
		}
	}
	log.Info("decision", "allowed", len(denials) == 0, "readers", len(readers), "judged", judged, "lookups", lookups, "tookMs", time.Since(start).Milliseconds())
	warnings = append([]string{"the guard judged this ConfigMap for the StatefulSets, Deployments, DaemonSets, CronJobs and Jobs that read it; bare Pods and ReplicaSets reading it are not checked (README limits)."}, warnings...)
	if len(warnings) > maxListed {
		warnings = warnings[:maxListed]
	}
	if len(denials) == 0 {
		h.Metrics.observe(kind, true, ReasonNoOpinion, time.Since(start))
		return admission.Allowed("").WithWarnings(warnings...)
	}
	h.Metrics.observe(kind, false, denials[0].Reason, time.Since(start))
	msg := denials[0].Message()
	if len(denials) > 1 {
		msg += fmt.Sprintf("\n(and %d more workload(s) reading ConfigMap %s/%s are refused likewise)", len(denials)-1, req.Namespace, change.Name)
	}
	return admission.Denied(msg).WithWarnings(warnings...)
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
