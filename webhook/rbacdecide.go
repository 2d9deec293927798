package webhook

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// DecideRBACChange is the policy for an RBAC or ServiceAccount change, for one guarded object w
// that runs as an account the change touches (Input.Object, Old the same, RBACChange set): pure,
// like Decide. The rule: a change that turns an armed object meeting every requirement into one
// that does not is refused — deleting or unbinding its ServiceAccount, Role or RoleBinding, a
// ClusterRole(Binding) it is granted by, a Role edit that drops a lease verb or resourceName it
// needs, or turning off its ServiceAccount's token. An object the guard cannot verify now refuses
// the change too (could not verify); one that already fails for its own reasons does not hold
// every unrelated RBAC change hostage (admitted, with a warning).
func DecideRBACChange(in Input, f *Facts, p Policy) Decision {
	before := in
	before.RBACChange = nil
	b := Decide(before, f, p)
	a := Decide(in, f, p)
	if a.Allowed {
		a.Warnings = nil // the object's own warnings were given at its admission
		return a
	}
	if !b.Allowed && !b.unverified() {
		// It fails already. Unless its election cannot run at all, it keeps what it still has: a
		// writer failing for a state that can be put right (its lease guard refusing an extra
		// grant, say) would otherwise lose its RoleBinding under the same exemption, and
		// putting the first right would then leave it with nothing (the twenty-first red team:
		// a cluster-admin binding made a writer fail its lease guard; its RoleBinding, then the
		// cluster-admin binding were deleted, both admitted as "already fails").
		added := a.unmetBeyond(b)
		if len(added) == 0 || b.electionCannotRun() {
			return Decision{Allowed: true, Reason: ReasonNoOpinion, Subject: a.Subject,
				Warnings: []string{truncate(fmt.Sprintf("%s already fails the guard's requirements (%s), so %s takes nothing from it.", b.Subject, b.Unmet[0].Problem, in.RBACChange), 240)}}
		}
		a.Unmet, a.Reason = added, added[0].Reason
	}
	a.Warnings = nil
	return a
}

// unmetBeyond is what d leaves unmet that before did not.
func (d *Decision) unmetBeyond(before Decision) []Unmet {
	var out []Unmet
	for _, u := range d.Unmet {
		if !slices.ContainsFunc(before.Unmet, func(b Unmet) bool { return b.Reason == u.Reason && b.Problem == u.Problem }) {
			out = append(out, u)
		}
	}
	return out
}

// electionCannotRun reports whether d fails for a reason that keeps the object's election from
// running at all, so no RBAC can matter to it: the election off, or no account to run it as.
func (d *Decision) electionCannotRun() bool {
	return slices.ContainsFunc(d.Unmet, func(u Unmet) bool {
		switch u.Reason {
		case ReasonElectionDisabled, ReasonDefaultServiceAccount, ReasonServiceAccountMissing, ReasonNoToken:
			return true
		}
		return false
	})
}

// unverified reports whether a refusal says the guard could not judge, rather than what is unmet.
func (d *Decision) unverified() bool {
	for _, u := range d.Unmet {
		switch u.Reason {
		case ReasonCouldNotVerify, ReasonTooComplex, ReasonInternalError:
			return true
		}
	}
	return false
}

// DisarmMessage is the refusal of an RBAC change: what it would take from which armed objects,
// and the removal order (the reverse of arming) that lets it through.
func DisarmMessage(c *RBACChange, denials []Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "refusing to disarm: %s would leave %d armed writer(s) (%s=enforce) without what their election needs, and every token drops within a lease: ", c.describe(), len(denials), EnvFencing)
	for i, d := range denials {
		if i == maxListed {
			fmt.Fprintf(&b, "\n... and %d more", len(denials)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n%s:", d.Subject)
		if len(d.Unknowable) > 0 { // armed for a reason the writer's owner may not see: say it
			fmt.Fprintf(&b, " (armed: %s)", listed(d.Armed))
		}
		for j, u := range d.Unmet {
			if j == maxListed {
				break
			}
			fmt.Fprintf(&b, " [%d] %s", j+1, u.Problem)
		}
	}
	fmt.Fprintf(&b, "\nRemove in the reverse order of arming: first set %s=shadow (or off) on these writers and wait for their rollout to finish, then remove the RBAC (the ServiceAccount last).", EnvFencing)
	return b.String()
}

// olderRole is the warning that admits an RBAC change the webhook could not judge because its
// own ClusterRole no longer grants the reads this version judges with (f.ClusterRoles.Unread), or
// "" (then it is refused). A rollback to an older chart narrows the webhook's roles before it
// reaches the writer's Role (Helm applies ClusterRoles, then Roles, then the webhook
// configuration), and refusing would leave the release half rolled back; only whoever may change
// cluster RBAC can take a ClusterRole's grant, and such a one can remove the webhook
// configuration as well, so admitting gives no one more than they have. A namespaced read taken
// (a Role in a guarded namespace, which its admins may edit) is still "could not verify".
func olderRole(f *Facts, c *RBACChange) string {
	if f == nil || f.ClusterRoles == nil || f.ClusterRoles.Unread == "" {
		return ""
	}
	return truncate(fmt.Sprintf("ehdb-election guard: %s was not judged: %s; RBAC changes are not judged until the webhook's ClusterRole grants this version's reads again (a rollback to an older chart narrows it; that chart's webhook follows).", c, f.ClusterRoles.Unread), 480)
}

// checkElsewhere holds a running process whose election may run elsewhere than the guard
// resolves now (electsElsewhere: a namespace, shard or on/off read from what changed since its
// start) to every Lease its account reaches: the change c may take nothing from sa there. Its
// ordinary checks still judge where it will elect next.
func (d *Decision) checkElsewhere(c *RBACChange, f *Facts, p Policy, w *Workload, sa types.NamespacedName, armed []*containerView, elections []electionView, cms ConfigMapSource, budget *Budget) {
	for i, v := range armed {
		why := electsElsewhere(w, v, cms, f, budget)
		if why == "" {
			continue
		}
		var now []string
		if elections[i].namespace.Known() {
			now = []string{elections[i].namespace.Text}
		}
		taken, err := c.takenFrom(f, sa, c.reach(p, w, now))
		switch {
		case err != nil:
			d.unmet(ReasonCouldNotVerify, fmt.Sprintf("%s: %s, and what %s takes from ServiceAccount %s could not be told: %v.", v.label(), why, c, sa, err), "retry.")
		case taken != "":
			d.unmet(ReasonServiceAccountUnbound, fmt.Sprintf("%s: %s, and %s, which its election may be using.", v.label(), why, taken),
				"as the problem says, then retry.")
		default:
			continue
		}
		return // one is enough to refuse
	}
}
