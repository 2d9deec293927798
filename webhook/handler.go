package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	kjson "sigs.k8s.io/json"
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
	// Metrics records every decision (package webhook/metrics: Prometheus); nil records none.
	Metrics Recorder
	// Log receives one line per decision; the zero Logger means the one in the request context
	// (logr.FromContext), if any. logr.Discard() is that zero Logger too (its sink is nil), so it
	// does not silence the handler: a logger whose sink drops every line does.
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
	// Workloads finds a StatefulSet whose scale subresource is under review; nil: scale-ups
	// cannot be verified and are refused.
	Workloads Workloads
	// Accounts finds the guarded objects that run as the ServiceAccounts an RBAC or
	// ServiceAccount change touches; nil: the guard has no opinion on RBAC (rbacreview.go).
	Accounts AccountUsers
	// ClusterRoleScopes are the namespaces whose RoleBindings may grant a ClusterRole under
	// review to a guarded account: the guarded namespaces, or "*" for every namespace.
	ClusterRoleScopes []string
	// Invalidate, when set, is called once an RBAC or ServiceAccount change is admitted, so the
	// resolver's positive cache forgets answers the change may have made stale.
	Invalidate func()
	// Self is the webhook's own ServiceAccount: an RBAC change that takes its access away is
	// refused while it serves (rbacself.go). Empty: not protected.
	Self types.NamespacedName
	// MaxInFlight bounds the reviews one process works on at once (NewHTTPHandler); a review
	// that finds no slot before its deadline gets HTTP 429, which the API server treats as a
	// webhook failure (workloads fail closed, Pods fail open). 0 means DefaultMaxInFlight.
	MaxInFlight int
	// MaxConnections is the connections the server in front of the handler keeps open at once
	// (HTTP/1.1: one request each); each may read the first part of its body from a reserve
	// sized for them all (NewHTTPHandler). 0 means DefaultMaxConnections.
	MaxConnections int
	// WorkBudget is the steps one review may spend resolving environments (Budget); 0 means
	// DefaultBudget. A smaller budget refuses complex armed objects sooner, never admits more.
	WorkBudget int64
	// RootCAPublishers are the users whose writes of kube-root-ca.crt's CA are the cluster's
	// (rootca.go); nil means DefaultRootCAPublishers.
	RootCAPublishers []string
}

func (h *Handler) rootCAPublishers() []string {
	if h.RootCAPublishers == nil {
		return DefaultRootCAPublishers()
	}
	return h.RootCAPublishers
}

// DefaultMaxInFlight is the reviews one webhook process works on at once by default.
const DefaultMaxInFlight = 32

// Handle answers one review (NewHTTPHandler serves it over HTTP). A panic anywhere in judging is recovered here: the review
// is refused (a workload) or admitted with a warning (a Pod, which fails open), never left to
// kill the process or hang the API server's call.
func (h *Handler) Handle(ctx context.Context, req Request) (resp Response) {
	start := time.Now()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		kind := metricKind(req)
		msg := fmt.Sprintf("ehdb-election guard: internal error judging %s %s/%s: %v", req.Kind.Kind, req.Namespace, req.Name, r)
		h.logger(ctx).Error(fmt.Errorf("panic: %v", r), "recovered a panic while judging a review", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "uid", req.UID)
		if schema.GroupVersionKind(req.Kind) == gvkPod {
			h.observe(req, kind, true, ReasonUnverifiedPod, time.Since(start))
			resp = allowed().WithWarnings(truncate(msg+" (Pods fail open)", 240))
			return
		}
		h.observe(req, kind, false, ReasonInternalError, time.Since(start))
		resp = errored(http.StatusInternalServerError, errors.New(msg))
	}()
	log := h.logger(ctx)
	gvk := schema.GroupVersionKind(req.Kind)
	kind := KindOther
	if Known(gvk) {
		kind = gvk.Kind
	}
	log = log.WithValues("kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name,
		"operation", req.Operation, "uid", req.UID, "dryRun", req.DryRun != nil && *req.DryRun)

	allow := func(reason Reason, msg string) Response {
		h.observe(req, kind, true, reason, time.Since(start))
		log.Info("allowed: no opinion", "reason", reason, "why", msg)
		return allowed()
	}
	malformed := func(err error) Response {
		h.observe(req, kind, false, ReasonMalformed, time.Since(start))
		log.Info("denied: malformed request", "reason", ReasonMalformed, "error", err.Error())
		return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed AdmissionReview: %w", err))
	}

	if (gvk == gvkConfigMap || isRBACKind(gvk)) && completesDeletion(req) {
		// Removing the last finalizer of an object in deletion deletes it: judged as that DELETE
		// (the fifth red team removed a RoleBinding, a ServiceAccount and a ConfigMap from under
		// armed writers so, each put in deletion while nothing armed used it).
		req.Operation = admissionv1.Delete
		log = log.WithValues("completesDeletion", true)
	}
	switch {
	case req.UID == "" && req.Kind.Kind == "":
		return malformed(errors.New("no request (want an admission.k8s.io/v1 AdmissionReview with .request set)"))
	case gvk == gvkConfigMap && h.Readers != nil && req.SubResource == "" &&
		(req.Operation == admissionv1.Create || req.Operation == admissionv1.Update || req.Operation == admissionv1.Delete):
		return h.handleConfigMap(ctx, req, log, start)
	case isRBACKind(gvk) && h.Accounts != nil && req.SubResource == "" &&
		(req.Operation == admissionv1.Update || req.Operation == admissionv1.Delete || req.Operation == admissionv1.Create && gvk != gvkServiceAccount):
		return h.handleRBAC(ctx, req, log, start)
	case isScale(req):
		return h.handleScale(ctx, req, log, start)
	case gvk == gvkService && req.SubResource == "" && (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update):
		return h.handleService(req, log, start)
	case isBinding(req):
		return h.handleBinding(ctx, req, log, start)
	case !Known(gvk):
		return allow(ReasonNoOpinion, "the guard does not judge "+gvk.String())
	case gvk == gvkPod && req.SubResource == subresourceEphemeral && req.Operation == admissionv1.Update:
		// Containers added to a running Pod: judged like any arming, and failing closed.
	case gvk == gvkPod && req.SubResource == "status" && req.Operation == admissionv1.Update:
		// The status subresource writes a Pod's labels and annotations too (the third red team
		// armed a bare Pod through it): judged like the Pod's own UPDATE.
	case req.SubResource != "":
		return allow(ReasonNoOpinion, "subresource "+req.SubResource+" cannot change a pod template")
	case req.Operation != admissionv1.Create && req.Operation != admissionv1.Update:
		return allow(ReasonNoOpinion, "operation "+string(req.Operation)+" cannot arm anything")
	}
	// A Pod's UPDATE is judged too: its spec cannot change, but its labels and annotations can,
	// and the kubelet resolves a fieldRef to them at every container start, so an edit of them
	// arms a container, moves its shard or turns its election off at its next restart (the second
	// red team armed a bare Pod with `kubectl annotate`). The chart sends only updates that change
	// them, of Pods that may arm.

	obj, err := DecodeWorkload(gvk, req.Namespace, req.Object.Raw)
	if err != nil {
		return malformed(fmt.Errorf("object: %w", err))
	}
	h.verifyOwner(obj, req.Operation == admissionv1.Create)
	in := Input{Operation: req.Operation, Object: obj, Subresource: req.SubResource, Budget: NewBudget(h.WorkBudget)}
	if req.Operation == admissionv1.Update {
		old, err := DecodeWorkload(gvk, req.Namespace, req.OldObject.Raw)
		if err != nil {
			// Judged as if it had been unarmed: the order check then runs, the strict reading.
			log.Info("old object unreadable; judging the update as a transition to armed", "error", err.Error())
		} else {
			in.Old = old
		}
	}
	return h.respond(ctx, req, log, start, kind, in)
}

// respond judges in, the object of req as Decode made it (or a Pod as a binding leaves it), and
// records and logs the decision.
func (h *Handler) respond(ctx context.Context, req Request, log logr.Logger, start time.Time, kind string, in Input) Response {
	h.noteRunning(in)

	// The ConfigMaps the review reads: only the keys its containers can make matter, charged to
	// the process's budget until the review is answered (configmapread.go).
	load := newReviewLoad(start, in.Object, in.Old)
	load.who = requesterOf(req.UserInfo)
	defer load.release()
	d, lookups := h.decide(withReviewLoad(ctx, load), in)
	if in.Subresource == "" {
		d, lookups = h.judgeRevision(ctx, start, in.Object, in.Old, d, lookups)
	}
	if d.Reason == ReasonUnverifiedPod && load.starvedByOwnLoad() {
		// Not an outage of the guard: its requester's own reviews hold the budget it waited
		// for. Refused, as a review waiting out its deadline behind its own requester's slots is.
		return h.unjudged(ctx, req, http.StatusTooManyRequests, errOwnLoad.Error(),
			fmt.Sprintf("not judged in time: %s, whose reviews hold their share of the guard's ConfigMap budget (%d MiB); try again", load.who, requesterKeptBytes>>20))
	}

	h.observe(req, kind, d.Allowed, d.Reason, time.Since(start))
	kv := []any{"allowed", d.Allowed, "reason", d.Reason, "lookups", lookups, "tookMs", time.Since(start).Milliseconds()}
	// Each list as bounded as the answer's warnings (boundAnswer): they quote the object.
	if len(d.Armed) > 0 {
		kv = append(kv, "armed", cutAll(d.Armed))
	}
	if len(d.Unmet) > 0 {
		unmet := make([]string, len(d.Unmet))
		for i, u := range d.Unmet {
			unmet[i] = string(u.Reason) + ": " + u.Problem
		}
		kv = append(kv, "unmet", cutAll(unmet))
	}
	if len(d.Warnings) > 0 {
		kv = append(kv, "warnings", cutAll(d.Warnings))
	}
	log.Info("decision", kv...)

	if d.Allowed {
		return allowed().WithWarnings(d.Warnings...)
	}
	return denied(d.Message()).WithWarnings(d.Warnings...)
}

// completesDeletion reports whether req is an UPDATE that deletes its object: the last finalizer
// removed from an object in deletion without a grace period (the API server's
// ShouldDeleteDuringUpdate). An object the guard cannot read does not complete anything here.
func completesDeletion(req Request) bool {
	if req.Operation != admissionv1.Update {
		return false
	}
	var now, old metav1.PartialObjectMetadata
	if kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &now) != nil || kjson.UnmarshalCaseSensitivePreserveInts(req.OldObject.Raw, &old) != nil {
		return false
	}
	grace := old.DeletionGracePeriodSeconds
	return len(now.Finalizers) == 0 && old.DeletionTimestamp != nil && (grace == nil || *grace == 0)
}

// verifyOwner withdraws the exemption of an object unless its controller, fetched from the
// watches, is the owner it names and has its pod template (exemptionHolds; for a Pod, its
// containers that can arm: podExemptionHolds).
func (h *Handler) verifyOwner(w *Workload, creating bool) {
	if !w.Exempt || w.ControllerRef == nil {
		return
	}
	var owner *Workload
	found, known := false, false
	switch {
	case !possibleName(w.ControllerRef.Name):
		// No object of any judged kind can have this name ("x/y", ".."): it is not found, for
		// certain. A lookup of it fails in the client instead, which would read as "could not
		// fetch" and let a Pod fail open.
		known = true
	case h.Owners != nil:
		owner, found, known = h.Owners.Owner(w.Namespace, *w.ControllerRef)
	}
	check := exemptionHolds
	if w.Kind == gvkPod.Kind {
		check = podExemptionHolds
	}
	ok, why := check(w, owner, found, known, creating)
	if ok && w.Kind == gvkPod.Kind {
		w.ExemptBy = owner
	}
	if !ok {
		w.Exempt = false
		rev := ""
		if w.Kind == gvkPod.Kind && found {
			rev = h.fromCurrentRevision(w, owner, creating)
		}
		w.Controller += " (" + why + ")"
		switch {
		case rev != "":
			w.OwnerUnverified, w.Replacing = rev, true
		case w.Kind == gvkPod.Kind && !known:
			w.OwnerUnverified = "its controller " + w.Controller
		}
	}
}

func (h *Handler) logger(ctx context.Context) logr.Logger {
	if h.Log.GetSink() != nil {
		return h.Log
	}
	return logr.FromContextOrDiscard(ctx)
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

// unjudged refuses req without judging it, with code and the reason in its message: a review
// larger than the guard reads, or one its body budget or its requester's share kept waiting until
// its deadline. Whatever its kind, since an unanswered Pod review is admitted by the Pods entry's
// Ignore (team G's 1.3 MB Pod of <, team H's 40 Pods waiting for the body budget).
func (h *Handler) unjudged(ctx context.Context, req Request, code int32, why, msg string) Response {
	h.observe(req, metricKind(req), false, ReasonTooComplex, 0)
	h.logger(ctx).Info("denied: not judged", "reason", ReasonTooComplex, "why", why, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name,
		"operation", req.Operation, "uid", req.UID, "user", req.UserInfo.Username)
	return errored(code, fmt.Errorf("ehdb-election guard: refusing %s %s/%s: %s", req.Kind.Kind, req.Namespace, req.Name, msg))
}

// unjudgedBody refuses req, whose body was read to its end but not judged: too large
// (errReviewTooLarge) or kept waiting for the body budget (errBodiesBusy).
func (h *Handler) unjudgedBody(ctx context.Context, req Request, why error) Response {
	if errors.Is(why, errReviewTooLarge) {
		return h.unjudged(ctx, req, http.StatusRequestEntityTooLarge, "review too large to judge",
			fmt.Sprintf("its admission review is %v, more than the %d MiB the guard reads, so what it would run cannot be judged; make it smaller (the API server writes a control character in a value as six bytes)", why, maxReviewBytes>>20))
	}
	return h.unjudged(ctx, req, http.StatusTooManyRequests, "no budget for its body",
		fmt.Sprintf("not judged in time: the guard holds as many large request bodies as it may (its body: %v); try again", why))
}

// metricKind is req's kind as the decision metrics label it: one the guard judges, or KindOther.
func metricKind(req Request) string {
	if g := schema.GroupVersionKind(req.Kind); Known(g) || g == gvkConfigMap || isRBACKind(g) {
		return req.Kind.Kind
	}
	return KindOther
}
