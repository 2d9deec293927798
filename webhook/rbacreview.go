package webhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// handleRBAC judges a CREATE, UPDATE or DELETE of a Role, RoleBinding, ClusterRole, ClusterRoleBinding or
// ServiceAccount (issue 17, "disarming is refused wherever it comes from"): kubectl, Helm, an apply
// of `helm template` output and Argo CD all send the same request. It finds the accounts the change
// can take something from (RBACChange.Affected: the removed subjects of a binding whose role grants
// lease verbs, the added subjects of one whose role grants every verb on leases, which the lease
// guard refuses, the subjects of every binding of a role that does either, the ServiceAccount
// itself), the
// guarded objects that run as them (Accounts, from the watches), and judges each with the facts as
// the change leaves them (DecideRBACChange). Facts are read fresh: two removals in a row each see
// the other's result.
func (h *Handler) handleRBAC(ctx context.Context, req Request, log logr.Logger, start time.Time) Response {
	gvk := schema.GroupVersionKind(req.Kind)
	kind := gvk.Kind
	deny := func(reason Reason, msg string) Response {
		h.observe(req, kind, false, reason, time.Since(start))
		log.Info("decision", "allowed", false, "reason", reason, "why", msg)
		return denied(msg)
	}
	change, err := DecodeRBACChange(gvk, req.Namespace, req.Name, req.Object.Raw, req.OldObject.Raw, req.Operation)
	if err != nil {
		h.observe(req, kind, false, ReasonMalformed, time.Since(start))
		return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed %s: %w", kind, err))
	}
	if c, ok := h.Accounts.(interface{ Covers(string) bool }); ok && change.Namespace != "" && !c.Covers(change.Namespace) {
		return deny(ReasonCouldNotVerify, fmt.Sprintf("ehdb-election guard: could not verify %s: this webhook's watches do not cover namespace %s, which its configuration sends it", change, change.Namespace))
	}
	ctx, cancel := h.deadline(ctx)
	defer cancel()
	change.guardsSelf, change.clusterRoleScopes = h.Self.Name != "", h.ClusterRoleScopes
	// A review the webhook cannot complete is refused, unless its own cluster-wide reads were
	// taken from it (olderRole).
	couldNotVerify := func(msg string) Response {
		f := h.Resolver.Resolve(ctx, Query{ClusterRoles: true})
		if warning := olderRole(f, change); warning != "" {
			h.observe(req, kind, true, ReasonNoOpinion, time.Since(start))
			log.Info("decision", "allowed", true, "reason", "older_role", "why", msg)
			return allowed().WithWarnings(warning)
		}
		return deny(ReasonCouldNotVerify, msg)
	}

	// Which accounts can the change touch?
	facts := NewFacts(h.now())
	lookups := 0
	if q := change.AffectedNeeds(facts, h.ClusterRoleScopes); !q.Empty() {
		lookups += q.Size()
		facts.Merge(h.Resolver.Resolve(ctx, q))
	}
	accounts, err := change.Affected(ctx, facts, h.ClusterRoleScopes)
	if err != nil {
		return couldNotVerify(fmt.Sprintf("ehdb-election guard: could not verify %s: %v", change, err))
	}
	for range 2 { // the bindings, then their roles
		q := change.selfKeepsQuery(facts, h.Self)
		if q.Empty() {
			break
		}
		lookups += q.Size()
		facts.Merge(h.Resolver.Resolve(ctx, q))
	}
	if what := change.takesFromSelf(facts, h.Self, accounts); what != "" {
		return deny(ReasonGuardAccess, selfMessage(change, h.Self, what))
	}
	if what := change.takesJudgingReads(h.Self, accounts); what != "" {
		if f := h.Resolver.Resolve(ctx, Query{ClusterRoles: true}); olderRole(f, change) == "" {
			return deny(ReasonGuardAccess, selfMessage(change, h.Self, what))
		}
		// A rollback to an older chart, which granted fewer of them, narrowing this Role after
		// the webhook's ClusterRole: judged on as any other change.
	}
	users, err := h.armableUsers(accounts...)
	if err != nil {
		return couldNotVerify(fmt.Sprintf("ehdb-election guard: could not tell which workloads run as the accounts %s touches: %v", change, err))
	}
	users = judgedThroughController(users)

	var denials []Decision
	var warnings []string
	judged := 0
	for _, w := range users {
		if ctx.Err() != nil {
			denials = append(denials, Decision{Subject: "the remaining writers", Reason: ReasonCouldNotVerify,
				Unmet: []Unmet{{Reason: ReasonCouldNotVerify, Problem: "the review's deadline passed before every writer was judged; retry."}}})
			break
		}
		if judged == maxReaders {
			denials = append(denials, Decision{Subject: change.String(), Reason: ReasonTooComplex,
				Unmet: []Unmet{{Reason: ReasonTooComplex, Problem: fmt.Sprintf("%d guarded objects that may be armed run as the accounts it touches; the guard judges at most %d per change.", len(users), maxReaders)}}})
			break
		}
		judged++
		in := Input{Operation: admissionv1.Update, Object: w, Old: w, RBACChange: change, Budget: NewBudget(h.WorkBudget)}
		load := newReviewLoad(start, w)
		d, n := evaluateRBAC(withReviewLoad(ctx, load), h.Resolver, in, h.Policy, h.now())
		load.release()
		lookups += n
		warnings = append(warnings, d.Warnings...)
		if !d.Allowed {
			denials = append(denials, d)
		}
	}
	log.Info("decision", "allowed", len(denials) == 0, "change", change.String(), "accounts", len(accounts), "writers", len(users), "judged", judged, "lookups", lookups, "tookMs", time.Since(start).Milliseconds())
	if len(warnings) > maxListed {
		warnings = warnings[:maxListed]
	}
	if len(denials) == 0 {
		if h.Invalidate != nil {
			h.Invalidate()
		}
		h.observe(req, kind, true, ReasonNoOpinion, time.Since(start))
		return allowed().WithWarnings(warnings...)
	}
	if !slices.ContainsFunc(denials, func(d Decision) bool { return !d.unverified() }) {
		return couldNotVerify(DisarmMessage(change, denials))
	}
	h.observe(req, kind, false, denials[0].Reason, time.Since(start))
	return denied(DisarmMessage(change, denials)).WithWarnings(warnings...)
}

// evaluateRBAC is Evaluate for one writer under an RBAC change: the same rounds of lookups (plus
// the RBAC state the overlay reads), then DecideRBACChange.
func evaluateRBAC(ctx context.Context, r Resolver, in Input, p Policy, now time.Time) (Decision, int) {
	facts := NewFacts(now)
	lookups := 0
	for round := 0; round < maxRounds+2 && ctx.Err() == nil; round++ {
		q := Needs(in, facts, p)
		if q.Empty() {
			break
		}
		lookups += q.Size()
		facts.Merge(r.Resolve(ctx, q))
	}
	return DecideRBACChange(in, facts, p), lookups
}

// armableUsers are the guarded objects that run as the accounts sels select and may be armed
// (mayArm), each once.
func (h *Handler) armableUsers(sels ...AccountSelector) ([]*Workload, error) {
	var users []*Workload
	for _, sel := range sels {
		got, err := h.Accounts.UsersOf(sel)
		if err != nil {
			return nil, err
		}
		for _, w := range got {
			if mayArm(w) && !w.finished() && !slices.ContainsFunc(users, func(u *Workload) bool { return u.Kind == w.Kind && u.Namespace == w.Namespace && u.Name == w.Name }) {
				users = append(users, w)
			}
		}
	}
	return users, nil
}

// mayArm is the chart's matchCondition for pod templates (cel.podSpecMayArm): a container sets
// the fencing variable (up to case) or reads envFrom. Nothing else can be armed, so nothing else is judged.
func mayArm(w *Workload) bool {
	return slices.ContainsFunc(w.Containers(), mayArmContainer)
}

// mayArmContainer is mayArm for one container: an env entry of the fencing switch's name (up to
// case), or any envFrom source, as the chart's condition reads it.
func mayArmContainer(c *corev1.Container) bool {
	return len(c.EnvFrom) > 0 || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return mayBeName(e.Name, EnvFencing) })
}
