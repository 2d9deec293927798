package webhook

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file answers "will the chart's lease guard let the writer's account write its Leases?".
// The lease guard (a ValidatingAdmissionPolicy the chart renders, one per release) admits writes
// of ehdb-shard-* Leases from the chart's writer account, from the ServiceAccounts of the Lease's
// namespace that the authorizer allows VerbElect on it but not VerbWildcardProbe, and from
// break-glass principals. RBAC may grant the election's verbs to any account (checkAccess), so an
// armed writer running as an account the guard refuses passed the access check and was then
// refused at its first Lease write: it never minted (the ninth red team). What the guard admits
// is read off the live policy, not predicted from the chart's values. An older chart's guard
// admits only the accounts it lists (Verb is empty).

// LeaseGuardLabel marks the chart's lease guard policies and their bindings.
const LeaseGuardLabel = "app.kubernetes.io/component=writer-election"

// LeaseGuardFact is the lease guard that binds one namespace, as the cluster holds it.
type LeaseGuardFact struct {
	// Name is the policy's; "" when no lease guard denies in the namespace.
	Name string
	// Users and Groups are the principals it admits Lease writes from by name.
	Users, Groups []string
	// Verb is the RBAC verb (VerbElect) by whose grant it admits the ServiceAccounts of its
	// namespace, unless they also hold VerbWildcardProbe; "" for a guard that admits only by name.
	Verb string
	// Also are the other lease guards that bind the namespace: the API server requires every one
	// to admit a write (a second release's guard, or an older chart's kept one).
	Also []LeaseGuardFact
	// Unread says why the webhook may not read the lease guards at all: its role predates the
	// check (an older chart's, after a rollback). The account is then not checked against them,
	// with a warning: refusing every armed writer would break the rollback, and what goes
	// unchecked is what the writer's readiness catches (it never mints).
	Unread string
	Err    error
}

// LeaseGuardOf is the lease guard of namespace among the labelled policies and bindings: each
// policy a binding binds to that namespace (by the chart's namespace selector), with the
// principals its variables list. A binding whose policy is missing, or whose
// variables are not as the chart renders them, is an error: what it admits cannot be told.
func LeaseGuardOf(namespace string, policies []admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) LeaseGuardFact {
	var out LeaseGuardFact
	for _, g := range leaseGuardsOf(namespace, policies, bindings) {
		switch {
		case g.Err != nil:
			return g
		case out.Name == "":
			out = g
		default:
			out.Also = append(out.Also, g)
		}
	}
	return out
}

func leaseGuardsOf(namespace string, policies []admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) []LeaseGuardFact {
	var out []LeaseGuardFact
	for _, b := range bindings {
		// Whatever its validationActions: a binding that only warns or audits is Deny a Helm value
		// away (leaseGuard.validationActions), and no admission sees that change (red team R of
		// stop 34 granted a writer every verb on leases under Warn, then set Deny back).
		if b.Spec.MatchResources == nil ||
			b.Spec.MatchResources.NamespaceSelector == nil || b.Spec.MatchResources.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != namespace {
			continue
		}
		i := slices.IndexFunc(policies, func(p admissionregistrationv1.ValidatingAdmissionPolicy) bool { return p.Name == b.Spec.PolicyName })
		if i < 0 {
			return []LeaseGuardFact{{Name: b.Spec.PolicyName, Err: fmt.Errorf("lease guard binding %s names policy %s, which was not found", b.Name, b.Spec.PolicyName)}}
		}
		fact := LeaseGuardFact{Name: b.Spec.PolicyName}
		for _, v := range policies[i].Spec.Variables {
			var err error
			switch v.Name {
			case "writer":
				var u string
				if u, err = celString(v.Expression); err == nil {
					fact.Users = append(fact.Users, u)
				}
			case "boundWriters", "breakGlassUsers":
				var us []string
				if err = json.Unmarshal([]byte(v.Expression), &us); err == nil {
					fact.Users = append(fact.Users, us...)
				}
			case "breakGlassGroups":
				err = json.Unmarshal([]byte(v.Expression), &fact.Groups)
			case "electVerb":
				fact.Verb, err = celString(v.Expression)
			case "wildcardProbe":
				var probe string
				if probe, err = celString(v.Expression); err == nil && probe != VerbWildcardProbe {
					err = fmt.Errorf("it probes for wildcard grants with %q, not %q", probe, VerbWildcardProbe)
				}
			}
			if err != nil {
				return []LeaseGuardFact{{Name: fact.Name, Err: fmt.Errorf("lease guard %s: variable %s is not as the chart renders it: %w", fact.Name, v.Name, err)}}
			}
		}
		if len(fact.Users) == 0 {
			return []LeaseGuardFact{{Name: fact.Name, Err: fmt.Errorf("lease guard %s names no writer", fact.Name)}}
		}
		if fact.Verb != "" && fact.Verb != VerbElect {
			return []LeaseGuardFact{{Name: fact.Name, Err: fmt.Errorf("lease guard %s admits writers by the verb %q, not %q", fact.Name, fact.Verb, VerbElect)}}
		}
		out = append(out, fact)
	}
	return out
}

// celString decodes a CEL string literal in single quotes, as the chart renders the writer.
func celString(expr string) (string, error) {
	s := strings.TrimSpace(expr)
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' || strings.ContainsAny(s[1:len(s)-1], `'\`) {
		return "", fmt.Errorf("%q is not a plain single-quoted string", expr)
	}
	return s[1 : len(s)-1], nil
}

// admitsByName reports whether g names ServiceAccount sa, authenticated with its token.
func (g LeaseGuardFact) admitsByName(sa types.NamespacedName) bool {
	if slices.Contains(g.Users, serviceAccountUser(sa)) {
		return true
	}
	for _, group := range ServiceAccountGroups(sa.Namespace) {
		if slices.Contains(g.Groups, group) {
			return true
		}
	}
	return false
}

// asksAuthorizer reports whether g, or another lease guard of its namespace, admits sa only by
// what the authorizer grants it: the access the guard then reads (VerbElect, VerbWildcardProbe)
// is asked for only then, so a writer the guards name costs no more lookups.
func (g LeaseGuardFact) asksAuthorizer(sa types.NamespacedName) bool {
	if g.Err != nil || g.Unread != "" || g.Name == "" {
		return false
	}
	for _, one := range append([]LeaseGuardFact{g}, g.Also...) {
		if one.Verb != "" && !one.admitsByName(sa) {
			return true
		}
	}
	return false
}

// refusal says why g refuses the Lease writes in ns of ServiceAccount sa on shards ("" when it
// admits them), with what could not be verified; the facts are the authorizer's answers.
func (g LeaseGuardFact) refusal(f *Facts, sa types.NamespacedName, ns string, shards []uint32, shardsKnown bool) (why string, failed []string) {
	if g.admitsByName(sa) {
		return "", nil
	}
	named := slices.Clone(g.Users)
	for _, group := range g.Groups {
		named = append(named, "group "+group)
	}
	if g.Verb == "" {
		if len(named) == 0 {
			return fmt.Sprintf("the lease guard %s lets no one write ehdb-shard-* Leases in %s", g.Name, ns), nil
		}
		return fmt.Sprintf("the lease guard %s lets only %s write ehdb-shard-* Leases in %s, not ServiceAccount %s", g.Name, listed(named), ns, sa), nil
	}
	also := ""
	if len(named) > 0 {
		also = listed(named) + ", and "
	}
	by := fmt.Sprintf("the lease guard %s lets only %sServiceAccounts of %s granted the %s verb on leases (the chart's writer Role grants it) but not every verb, write ehdb-shard-* Leases there", g.Name, also, ns, g.Verb)
	if sa.Namespace != ns {
		return by + fmt.Sprintf("; ServiceAccount %s is of another namespace", sa), nil
	}
	elect := accessTo(f, sa, ns, g.Verb, shards, shardsKnown)
	probe := accessTo(f, sa, ns, VerbWildcardProbe, shards, shardsKnown)
	switch {
	case probe.any:
		return by + fmt.Sprintf("; ServiceAccount %s holds every verb on them (a rule with verbs [\"*\"] grants even %s)", sa, VerbWildcardProbe), nil
	case len(elect.failed)+len(probe.failed) > 0:
		return "", append(elect.failed, probe.failed...)
	case !elect.allowed:
		which := ""
		if len(elect.names) > 0 {
			which = " on " + listed(elect.names)
		}
		return by + fmt.Sprintf("; ServiceAccount %s is not granted %s%s", sa, g.Verb, which), nil
	}
	return "", nil
}

// checkLeaseGuard requires every lease guard of ns to admit the writer's account's Lease writes.
func (d *Decision) checkLeaseGuard(f *Facts, sa types.NamespacedName, ns string, shards []uint32, shardsKnown bool) {
	g, ok := f.LeaseGuards[ns]
	switch {
	case !ok:
		d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not tell whether a lease guard in %s admits ServiceAccount %s (%s).", ns, sa, errNotLookedUp), "retry.")
	case g.Unread != "":
		d.warn(truncate(fmt.Sprintf("ServiceAccount %s was not checked against the lease guard of %s: %s.", sa, ns, g.Unread), 240))
	case g.Err != nil:
		d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not tell whether the lease guard of %s admits ServiceAccount %s: %v.", ns, sa, g.Err),
			"retry; if it persists, check that the webhook may list validatingadmissionpolicies and their bindings.")
	case g.Name != "":
		for _, one := range append([]LeaseGuardFact{g}, g.Also...) {
			why, failed := one.refusal(f, sa, ns, shards, shardsKnown)
			switch {
			case len(failed) > 0:
				d.unmet(ReasonCouldNotVerify,
					fmt.Sprintf("could not verify that the lease guard %s admits the Lease writes of ServiceAccount %s (%s).", one.Name, sa, listed(failed)),
					"retry; if it persists, check that the webhook may create SubjectAccessReviews and that the cluster's authorizers are healthy.")
				return
			case why != "":
				fix := fmt.Sprintf("run the writer as %s, or bind %s to the chart's writer Role (it grants %s), before arming.", listed(one.Users), sa, VerbElect)
				if one.Verb == "" {
					fix = fmt.Sprintf("run the writer as %s, or upgrade the release of lease guard %s to a chart whose guard admits every account its writer Role binds, before arming.", listed(one.Users), one.Name)
				}
				d.unmet(ReasonLeaseGuard, why+": its election could never write its Lease.", fix)
				return
			}
		}
	}
}
