package webhook

import (
	"fmt"

	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// Lease verbs the election needs, and the one whose grant to the default ServiceAccount is
// worth a warning.
var requiredVerbs = []string{"get", "create", "update"}

// checkAccess requires the ServiceAccount to hold get, create and update on leases in ns:
// namespace-wide, or for get and update on each shard's Lease by name (a least-privilege Role's
// resourceNames). A review that failed, or refused with an evaluation error, is "could not verify".
func (d *Decision) checkAccess(f *Facts, sa types.NamespacedName, ns string, shards []uint32, shardsKnown bool) {
	var denied, failed []string
	var deniedNames []string
	for _, verb := range requiredVerbs {
		wide := AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb}
		a, ok := f.Access[wide]
		switch {
		case !ok:
			failed = append(failed, verb+": "+errNotLookedUp.Error())
			continue
		case a.Err != nil:
			failed = append(failed, verb+": "+a.Err.Error())
			continue
		case a.Allowed:
			continue
		}
		if verb == "create" || !shardsKnown || len(shards) == 0 {
			if a.EvaluationError != "" {
				failed = append(failed, verb+": the authorizer could not decide ("+a.EvaluationError+")")
			} else {
				denied = append(denied, verb)
			}
			continue
		}
		var verbFailed, verbDenied bool
		for _, s := range shards {
			name := electionenv.LeaseName(s)
			n, ok := f.Access[AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb, Name: name}]
			switch {
			case !ok:
				failed, verbFailed = append(failed, verb+" "+name+": "+errNotLookedUp.Error()), true
			case n.Err != nil:
				failed, verbFailed = append(failed, verb+" "+name+": "+n.Err.Error()), true
			case n.Allowed:
			case n.EvaluationError != "":
				failed, verbFailed = append(failed, verb+" "+name+": the authorizer could not decide ("+n.EvaluationError+")"), true
			default:
				verbDenied = true
				deniedNames = appendNew(deniedNames, name)
			}
		}
		if verbDenied && !verbFailed {
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
