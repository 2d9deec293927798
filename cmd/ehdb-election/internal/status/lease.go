// Package status is the `ehdb-election status` view: which shard Leases exist in a namespace, who
// holds them, with which epoch, and whether they are live by the rule the writers and the webhook
// use. The computation and the rendering are pure functions of the Leases and an instant, so the
// boundary cases are tested exactly; the command (flags, kubeconfig, API calls, the scrape) is a
// thin layer over them.
package status

import (
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// LeasePrefix is the name prefix of every shard Lease ("ehdb-shard-%08x", see election.LeaseName).
const LeasePrefix = electionenv.LeasePrefix

// State is a shard Lease's condition at the instant of the view.
type State string

const (
	// Live: held, and now <= renewTime + leaseDurationSeconds (the boundary instant is still live).
	Live State = "live"
	// Expired: held, but not live — past its expiry, or with no renewTime or duration to be live by.
	Expired State = "expired"
	// Released: the holder is empty; a candidate may take the Lease at once.
	Released State = "released"
)

// Row is one shard Lease as the view shows it. Durations are relative to the instant the view was
// computed at (Report.ObservedAt).
type Row struct {
	Namespace string
	Name      string
	Shard     uint32
	// Holder is spec.holderIdentity ("" when released); Pod the hostname part of "<pod>#<uuid>".
	Holder string
	Pod    string
	// Epoch is spec.leaseTransitions: the fencing token of the current (or last) holder; 0 = never issued.
	Epoch int32
	State State

	// RenewTime and LeaseDuration are nil when the Lease does not carry them.
	RenewTime     *time.Time
	LeaseDuration *time.Duration
	// RenewedAgo is now − renewTime (negative when renewTime is ahead of the viewer's clock);
	// nil without a renewTime.
	RenewedAgo *time.Duration
	// ExpiresIn is renewTime + duration − now (negative once expired); nil when released or when
	// the Lease lacks what an expiry is computed from.
	ExpiresIn *time.Duration
	// Note says why a held Lease cannot be live regardless of the time ("" otherwise).
	Note string

	// Scrape is the holder pod's view of itself, when asked for (--scrape).
	Scrape *Scrape
}

// Ignored is a Lease named like a shard Lease that is not one (e.g. "ehdb-shard-xyz"). It is
// reported rather than dropped silently: someone made it by hand or with a different tool, and an
// operator looking for a shard should know it is not being read.
type Ignored struct {
	Namespace string
	Name      string
	Reason    string
}

// PodOf returns the pod name in a holder identity "<hostname>#<uuid>": a writer's hostname is its
// pod name. An identity without "#" (not written by this project's election) is taken whole.
func PodOf(holder string) string {
	pod, _, _ := strings.Cut(holder, "#")
	return pod
}

// Rows computes the view of every shard Lease among leases at the instant now, sorted by namespace,
// then shard.
// Leases whose names do not start with LeasePrefix are not ours and are skipped silently; those
// that start with it but do not decode are returned as ignored, with the reason.
func Rows(leases []coordinationv1.Lease, now time.Time) ([]Row, []Ignored) {
	rows := []Row{}
	ignored := []Ignored{}
	for i := range leases {
		l := &leases[i]
		if !strings.HasPrefix(l.Name, LeasePrefix) {
			continue
		}
		shard, err := electionenv.ParseLeaseName(l.Name)
		if err != nil {
			ignored = append(ignored, Ignored{Namespace: l.Namespace, Name: l.Name, Reason: err.Error()})
			continue
		}
		rows = append(rows, row(l, shard, now))
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Shard < rows[j].Shard
	})
	sort.SliceStable(ignored, func(i, j int) bool {
		if ignored[i].Namespace != ignored[j].Namespace {
			return ignored[i].Namespace < ignored[j].Namespace
		}
		return ignored[i].Name < ignored[j].Name
	})
	return rows, ignored
}

// row applies the SPEC's liveness rule: live while now <= renewTime + leaseDurationSeconds (strict
// ">" for expiry); an empty holder is released whatever the times say. A held Lease without a
// renewTime or a positive duration cannot be shown live — the webhook's order check would not
// count it either.
func row(l *coordinationv1.Lease, shard uint32, now time.Time) Row {
	s := l.Spec
	r := Row{Namespace: l.Namespace, Name: l.Name, Shard: shard}
	if s.HolderIdentity != nil {
		r.Holder = *s.HolderIdentity
		r.Pod = PodOf(r.Holder)
	}
	if s.LeaseTransitions != nil {
		r.Epoch = *s.LeaseTransitions
	}
	if s.RenewTime != nil {
		t := s.RenewTime.Time
		ago := now.Sub(t)
		r.RenewTime, r.RenewedAgo = &t, &ago
	}
	if s.LeaseDurationSeconds != nil {
		d := time.Duration(*s.LeaseDurationSeconds) * time.Second
		r.LeaseDuration = &d
	}

	switch {
	case r.Holder == "":
		r.State = Released
	case r.RenewTime == nil:
		r.State, r.Note = Expired, "never renewed: no renewTime"
	case r.LeaseDuration == nil:
		r.State, r.Note = Expired, "no leaseDurationSeconds"
	case *r.LeaseDuration <= 0:
		r.State, r.Note = Expired, fmt.Sprintf("leaseDurationSeconds is %d", *s.LeaseDurationSeconds)
	default:
		expiry := r.RenewTime.Add(*r.LeaseDuration)
		in := expiry.Sub(now)
		r.ExpiresIn = &in
		if now.After(expiry) {
			r.State = Expired
		} else {
			r.State = Live
		}
	}
	return r
}
