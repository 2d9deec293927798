package webhook

import (
	"fmt"

	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/election"
)

// checkLeases requires each shard's Lease to be live by the SPEC rule (now <= renewTime +
// leaseDurationSeconds), held, and to carry an epoch (leaseTransitions) of at least 1.
func (d *Decision) checkLeases(f *Facts, ns string, shards []uint32) {
	type bad struct{ reason, text string }
	var problems []bad
	for _, s := range shards {
		key := types.NamespacedName{Namespace: ns, Name: election.LeaseName(s)}
		lf, ok := f.Leases[key]
		switch {
		case !ok:
			problems = append(problems, bad{"verify", fmt.Sprintf("could not verify Lease %s (shard %d): %v", key, s, errNotLookedUp)})
			continue
		case lf.Err != nil:
			problems = append(problems, bad{"verify", fmt.Sprintf("could not verify Lease %s (shard %d): %v", key, s, lf.Err)})
			continue
		case lf.NotFound:
			problems = append(problems, bad{"live", fmt.Sprintf("Lease %s (shard %d) does not exist: the election has not run for this shard", key, s)})
			continue
		}
		if why := leaseProblems(lf.Spec, f.Now); why != "" {
			problems = append(problems, bad{"live", fmt.Sprintf("Lease %s (shard %d) %s", key, s, why)})
		}
	}
	var verify, live []string
	for _, p := range problems {
		if p.reason == "verify" {
			verify = append(verify, p.text)
		} else {
			live = append(live, p.text)
		}
	}
	if len(verify) > 0 {
		d.unmet(ReasonCouldNotVerify, listed(verify)+".", "retry; if it persists, check that the webhook may get leases.")
	}
	if len(live) > 0 {
		d.unmet(ReasonLeaseNotLive, listed(live)+".",
			fmt.Sprintf("first deploy with %s=shadow (or off) and %s=true, wait until ehdb_election_token_valid is 1 on every writer, then set enforce.", EnvFencing, election.EnvElection))
	}
}

// leaseProblems says what keeps a Lease from proving a live election: "" when live, held and
// minted.
func leaseProblems(s coordinationv1.LeaseSpec, now time.Time) string {
	var why []string
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		why = append(why, "is not held")
	}
	switch {
	case s.RenewTime == nil:
		why = append(why, "has never been renewed")
	case s.LeaseDurationSeconds == nil:
		why = append(why, "has no leaseDurationSeconds")
	default:
		expiry := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
		if now.After(expiry) {
			why = append(why, fmt.Sprintf("expired at %s (renewTime + leaseDurationSeconds)", expiry.UTC().Format(time.RFC3339)))
		}
	}
	if s.LeaseTransitions == nil || *s.LeaseTransitions < 1 {
		why = append(why, "has epoch (leaseTransitions) 0: no fencing token has been minted")
	}
	return strings.Join(why, ", ")
}
