package webhook

import (
	"fmt"

	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// checkLeases requires each shard's Lease to be live by the SPEC rule (now <= renewTime +
// leaseDurationSeconds), held, and to carry an epoch (leaseTransitions) of at least 1.
func (d *Decision) checkLeases(f *Facts, ns string, shards []uint32) {
	type bad struct{ reason, text string }
	var problems []bad
	for _, s := range shards {
		key := types.NamespacedName{Namespace: ns, Name: electionenv.LeaseName(s)}
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
		if why := leaseProblems(lf, f.Now); why != "" {
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
			fmt.Sprintf("first deploy with %s=shadow (or off) and %s=true, wait until ehdb_election_token_valid is 1 on every writer, then set enforce.", EnvFencing, electionenv.EnvElection))
	}
}

// leaseProblems says what keeps a Lease from proving a live election: "" when live, held and
// minted.
//
// Liveness (issue 17, class 9) is judged on the webhook's own monotonic clock when the fact is
// Observed: the Lease is live when the webhook's watch saw its renewTime change within the last
// leaseDurationSeconds, as the webhook measured it — so a holder whose node clock is behind is not
// refused as expired, and one whose clock is ahead is not live after it stops renewing. Without a
// renewal clock (no Lease watch), renewTime is compared with the webhook's wall clock.
func leaseProblems(lf LeaseFact, now time.Time) string {
	s := lf.Spec
	var why []string
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		why = append(why, "is not held")
	}
	switch {
	case s.RenewTime == nil:
		why = append(why, "has never been renewed")
	case s.LeaseDurationSeconds == nil:
		why = append(why, "has no leaseDurationSeconds")
	case lf.Observed:
		d := time.Duration(*s.LeaseDurationSeconds) * time.Second
		switch age := now.Sub(lf.Renewed); {
		case lf.Renewed.IsZero():
			why = append(why, "has not been seen renewing by this webhook since it started watching (a live holder renews within its leaseDurationSeconds; retry)")
		case age > d:
			why = append(why, fmt.Sprintf("was last seen renewing %s ago by this webhook's clock, longer than its leaseDurationSeconds (%s)", age.Round(time.Second), d))
		}
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
