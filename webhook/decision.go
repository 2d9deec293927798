package webhook

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxListed caps how many per-Lease problems, armed containers, unmet requirements and warnings
// a decision spells out.
const maxListed = 10

// Reason classifies a decision (the metrics label) and each unmet requirement.
type Reason string

// Reasons. Allowed decisions: Unarmed, RequirementsMet, NoOpinion. The rest name unmet
// requirements; a denial's Reason is its first unmet requirement's.
const (
	ReasonUnarmed               Reason = "unarmed"
	ReasonRequirementsMet       Reason = "requirements_met"
	ReasonNoOpinion             Reason = "no_opinion"
	ReasonMalformed             Reason = "malformed"
	ReasonElectionDisabled      Reason = "election_disabled"
	ReasonElectionUnknowable    Reason = "election_unknowable"
	ReasonDefaultServiceAccount Reason = "default_service_account"
	ReasonServiceAccountMissing Reason = "service_account_missing"
	ReasonServiceAccountUnbound Reason = "service_account_unbound"
	ReasonShardUnknown          Reason = "shard_unknown"
	ReasonLeaseNotLive          Reason = "lease_not_live"
	// ReasonLeaseUnguarded: the election's Leases live in a namespace the webhook does not guard,
	// so it can never read them (a definite refusal, not "could not verify", which a Pod passes).
	ReasonLeaseUnguarded Reason = "lease_unguarded"
	// ReasonLeaseGuard: the chart's lease guard of the Lease namespace does not admit the
	// writer's account, so its election could never write its Lease (leaseguard.go).
	ReasonLeaseGuard     Reason = "lease_guard"
	ReasonCouldNotVerify Reason = "could_not_verify"
	ReasonNoToken        Reason = "no_token"
	// ReasonOtherAPIServer: the container's election would dial another API server than the one
	// whose Leases the guard checks (credentials.go).
	ReasonOtherAPIServer Reason = "other_api_server"
	ReasonTooComplex     Reason = "too_complex"
	// ReasonGuardAccess refuses an RBAC change that takes the webhook's own access (rbacself.go).
	ReasonGuardAccess Reason = "guard_access"
	// ReasonInternalError is a recovered panic (a bug in the guard).
	ReasonInternalError Reason = "internal_error"
	// ReasonUnverifiedPod allows a Pod the guard could not verify because its own lookups
	// failed: Pods fail open (the chart's Ignore policy), so a guard outage never stops a
	// controller from recreating a crashed writer's Pod.
	ReasonUnverifiedPod Reason = "unverified_pod"
)

// AllowReasons lists every Reason an allowed decision can carry (for pinning metrics).
var AllowReasons = []Reason{ReasonUnarmed, ReasonRequirementsMet, ReasonNoOpinion, ReasonUnverifiedPod}

// DenialReasons lists every Reason a denial can carry (for pinning metrics).
var DenialReasons = []Reason{
	ReasonMalformed, ReasonElectionDisabled, ReasonElectionUnknowable, ReasonDefaultServiceAccount,
	ReasonServiceAccountMissing, ReasonServiceAccountUnbound, ReasonShardUnknown, ReasonLeaseNotLive, ReasonLeaseUnguarded, ReasonLeaseGuard,
	ReasonCouldNotVerify, ReasonNoToken, ReasonOtherAPIServer, ReasonTooComplex, ReasonInternalError, ReasonGuardAccess,
}

// Unmet is one requirement the object does not meet, and how to meet it.
type Unmet struct {
	Reason  Reason
	Problem string
	Fix     string
}

// Decision is the guard's answer.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Armed names the armed containers and why each counts as armed.
	Armed    []string
	Unmet    []Unmet
	Warnings []string
	// Subject names the object for messages, e.g. "StatefulSet noetl/noetl-cmdbus-writer".
	Subject string
	// Unknowable names the containers that count as armed only because their fencing value
	// cannot be known (a Secret, a missing ConfigMap): the denial tells them how to opt out.
	Unknowable []string
}

// Message is the denial text the client sees: every unmet requirement with its fix.
func (d Decision) Message() string {
	if d.Allowed {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "refusing to arm %s=enforce on %s: %d requirement(s) unmet (election live and minting first, enforce after)", EnvFencing, d.Subject, len(d.Unmet))
	if len(d.Armed) > 0 {
		fmt.Fprintf(&b, "; armed: %s", listed(d.Armed))
	}
	for i, u := range d.Unmet {
		if i == maxListed {
			fmt.Fprintf(&b, "\n... and %d more", len(d.Unmet)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n[%d] %s", i+1, u.Problem)
		if u.Fix != "" {
			fmt.Fprintf(&b, " Fix: %s", u.Fix)
		}
	}
	if len(d.Unknowable) > 0 {
		fmt.Fprintf(&b, "\nNote: %s count(s) as armed only because %s cannot be known; if it is not an ehdb writer meant to enforce, set %s explicitly in its env (for example to off): env overrides envFrom, and overrides it in every case of the name only on a pod certain to run on Linux (spec.os.name: linux).",
			listed(d.Unknowable), EnvFencing, EnvFencing)
	}
	return b.String()
}

// onlyUnverified reports whether every unmet requirement is a failed lookup of the guard's own.
func (d *Decision) onlyUnverified() bool {
	for _, u := range d.Unmet {
		if u.Reason != ReasonCouldNotVerify {
			return false
		}
	}
	return true
}

func (d *Decision) unmet(r Reason, problem, fix string) {
	d.Unmet = append(d.Unmet, Unmet{Reason: r, Problem: problem, Fix: fix})
}

func (d *Decision) warn(w string) {
	if len(d.Warnings) < maxListed {
		d.Warnings = appendNew(d.Warnings, w)
	}
}

func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + "; and " + strconv.Itoa(len(items)-maxListed) + " more"
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// truncate shortens s to at most n runes.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
