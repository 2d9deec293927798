package webhook

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// Lease verbs the election needs, and the one whose grant to the default ServiceAccount is
// worth a warning.
var requiredVerbs = []string{"get", "create", "update"}

// VerbElect is no API verb: the chart's writer Role grants it on leases, and its lease guard
// admits an ehdb-shard-* Lease write from a ServiceAccount of the Lease's namespace when the API
// server's authorizer allows that account this verb on the Lease. So the guard names no accounts
// and has no list to keep in step with RBAC: an offline render (helm template, Argo CD, Flux) that
// renames the writer's account, or forgets another release's, renders the same guard, and taking
// an armed writer's Lease writes means taking its RBAC, which the webhook reviews. Granting it
// takes a Role that holds it, or bind or escalate rights: RBAC's own escalation check.
const VerbElect = "ehdb-elect"

// VerbWildcardProbe is a verb no Role grants by name: an account the authorizer allows it on a
// Lease holds every verb there (a "*" rule, cluster-admin), and the lease guard refuses its
// writes unless it names it (the chart's writer, break glass). Without it, every account of the
// namespace with a "*" rule on leases (an operator's, say) would pass as a writer: the lease
// guard decides who writes by the grant of VerbElect, not by holding everything.
const VerbWildcardProbe = "ehdb-elect-wildcard-probe"

// electionVerbs are the lease verbs a writer's Lease writes need: the election's, and the one its
// lease guard admits it by. A role that grants none of them cannot disarm a writer.
var electionVerbs = append(slices.Clone(requiredVerbs), VerbElect)

// leaseVerbs are the lease verbs the guard asks the authorizer about for a writer's account.
var leaseVerbs = append(slices.Clone(electionVerbs), VerbWildcardProbe)

// verbAccess is what the authorizer says of one verb on the Leases of a writer's shards.
type verbAccess struct {
	allowed bool     // namespace-wide, or on every shard's Lease by name
	any     bool     // namespace-wide, or on at least one shard's Lease by name
	names   []string // the shards' Leases it is denied on, when checked by name
	failed  []string // what could not be verified
}

// accessTo reads the authorizer's answers for verb on leases in ns: namespace-wide, and for a
// verb a Role may restrict by resourceNames (all but create), on each shard's Lease by name once
// the namespace-wide answer is no. A review that failed, or refused with an evaluation error, is
// "could not verify".
func accessTo(f *Facts, sa types.NamespacedName, ns, verb string, shards []uint32, shardsKnown bool) verbAccess {
	var out verbAccess
	a, ok := f.Access[AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb}]
	switch {
	case !ok:
		out.failed = append(out.failed, verb+": "+errNotLookedUp.Error())
		return out
	case a.Err != nil:
		out.failed = append(out.failed, verb+": "+a.Err.Error())
		return out
	case a.Allowed:
		out.allowed, out.any = true, true
		return out
	}
	if verb == "create" || !shardsKnown || len(shards) == 0 {
		if a.EvaluationError != "" {
			out.failed = append(out.failed, verb+": the authorizer could not decide ("+a.EvaluationError+")")
		}
		return out
	}
	for _, s := range shards {
		name := electionenv.LeaseName(s)
		n, ok := f.Access[AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb, Name: name}]
		switch {
		case !ok:
			out.failed = append(out.failed, verb+" "+name+": "+errNotLookedUp.Error())
		case n.Err != nil:
			out.failed = append(out.failed, verb+" "+name+": "+n.Err.Error())
		case n.Allowed:
			out.any = true
		case n.EvaluationError != "":
			out.failed = append(out.failed, verb+" "+name+": the authorizer could not decide ("+n.EvaluationError+")")
		default:
			out.names = appendNew(out.names, name)
		}
	}
	out.allowed = len(out.names) == 0 && len(out.failed) == 0
	return out
}

// checkAccess requires the ServiceAccount to hold get, create and update on leases in ns:
// namespace-wide, or for get and update on each shard's Lease by name (a least-privilege Role's
// resourceNames).
func (d *Decision) checkAccess(f *Facts, sa types.NamespacedName, ns string, shards []uint32, shardsKnown bool) {
	var denied, failed, deniedNames []string
	for _, verb := range requiredVerbs {
		a := accessTo(f, sa, ns, verb, shards, shardsKnown)
		failed = append(failed, a.failed...)
		for _, n := range a.names {
			deniedNames = appendNew(deniedNames, n)
		}
		if !a.allowed && len(a.failed) == 0 {
			denied = append(denied, verb)
		}
	}
	if len(failed) > 0 {
		d.unmet(ReasonCouldNotVerify,
			fmt.Sprintf("could not verify that ServiceAccount %s may use leases in %s (%s).", sa, ns, listed(failed)),
			"retry; if it persists, check that the webhook may create SubjectAccessReviews and that the cluster's authorizers are healthy.")
	}
	if len(denied) > 0 {
		which := ""
		if len(deniedNames) > 0 {
			which = " (checked namespace-wide and for " + listed(deniedNames) + ")"
		}
		d.unmet(ReasonServiceAccountUnbound,
			fmt.Sprintf("ServiceAccount %s may not %s coordination.k8s.io leases in namespace %s%s.", sa, strings.Join(denied, ", "), ns, which),
			fmt.Sprintf("bind a Role granting get, list, watch, create, update on coordination.k8s.io leases in %s to ServiceAccount %s (the ehdb-election chart's Role ehdb-shard-election and its RoleBinding); get and update may be restricted by resourceNames to the shards' Leases, create may not.", ns, sa))
	}
}
