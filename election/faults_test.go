package election

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election/fake"
)

// The faults an operator's kubectl edit or delete inflicts on a held Lease (a namespace without the
// chart's lease guard, or the guard in Warn mode). The package must stay safe on its own: the guard
// is defence in depth, not the proof. Each test reproduces a violation found on an earlier version.

// notBothValid fails when two elections hold a valid token at the same instant.
func notBothValid(t *testing.T, what string, es ...*Election) {
	t.Helper()
	var valid []Token
	for _, e := range es {
		if tok := e.Token(); tok.Valid {
			valid = append(valid, tok)
		}
	}
	if len(valid) > 1 {
		t.Fatalf("%s: two valid tokens at once: %+v", what, valid)
	}
}

// edit applies an outsider's change to the stored Lease, as kubectl edit would (a fresh read, a PUT).
func edit(t *testing.T, store LeaseStore, change func(*coordinationv1.Lease)) {
	t.Helper()
	l := mustLease(t, store)
	change(l)
	if _, err := store.Update(ctx, l); err != nil {
		t.Fatalf("outside edit: %v", err)
	}
}

// Fault 1: the candidate last read the Lease long before it was deleted (it missed the holder's
// later renewals: polling, a watch gap, or a round between renewals). Timing the absence from that
// stale sighting let it create the Lease while the holder's later renewal was still valid.
func TestADeletedLeaseIsTimedFromTheFirstSightingOfItsAbsence(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder := newSync(t, store, clk, "holder#1", lease, renew)
	cand := newSync(t, store, clk, "candidate#2", lease, renew)
	holder.round(ctx)
	cand.round(ctx) // the candidate's last sighting of the record: t0
	for i := 0; i < 2; i++ {
		clk.Step(renew)
		holder.round(ctx) // renewals the candidate does not see
	}
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	clk.Step(lease - 2*renew + time.Second) // past t0 + lease: the stale sighting has run out
	cand.round(ctx)                         // first sighting of the absence
	notBothValid(t, "first sighting of the absence", holder, cand)
	cand.handle(watchMsg{started: true}) // an absence is timed only under a watch
	for holder.Token().Valid {
		clk.Step(time.Second)
		cand.round(ctx)
		notBothValid(t, "while the holder's last renewal is valid", holder, cand)
	}
	clk.Step(lease)
	cand.round(ctx)
	if tok := cand.Token(); !tok.Valid || tok.Epoch != 2 {
		t.Fatalf("candidate after the absence ran out: %+v, want a valid epoch 2", tok)
	}
}

// Fault 2: an outsider edits the held record's leaseTransitions (down, or up) and keeps the holder.
// A renewal is only a renewal while the record carries the epoch this process minted: anything else
// is a loss, and the next acquisition goes above the highest epoch seen.
func TestARenewalNeverAdoptsAnEditedEpoch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edited int32
		want   uint64
	}{
		{"edited down", 1, 6},
		{"edited up", 9, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
			if _, err := store.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: testLease},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseTransitions: ptr.To[int32](4)},
			}); err != nil {
				t.Fatal(err)
			}
			holder := newSync(t, store, clk, "holder#1", lease, renew)
			holder.round(ctx)
			wantToken(t, "holder", holder, 5, true)
			edit(t, store, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(tc.edited) })
			for i := 0; i < 4; i++ {
				clk.Step(renew)
				holder.round(ctx)
				if tok := holder.Token(); tok.Valid && tok.Epoch != 5 && tok.Epoch < tc.want {
					t.Fatalf("round %d after the edit: %+v, a valid token below epoch %d", i, tok, tc.want)
				}
			}
			wantToken(t, "holder", holder, tc.want, true)
			if got := epochOf(mustLease(t, store)); got != tc.want {
				t.Fatalf("stored epoch %d, want %d", got, tc.want)
			}
		})
	}
}

// Fault 3: an outsider shortens the held record's leaseDurationSeconds. The holder's token is valid
// for its own duration; a candidate must wait out the longest duration it has reason to believe in.
func TestACandidateNeverTrustsAShortenedDuration(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder := newSync(t, store, clk, "holder#1", lease, renew)
	cand := newSync(t, store, clk, "candidate#2", lease, renew)
	holder.round(ctx)
	cand.round(ctx)
	edit(t, store, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](3) })
	for holder.Token().Valid {
		cand.round(ctx)
		notBothValid(t, "after the duration was shortened", holder, cand)
		clk.Step(500 * time.Millisecond)
	}
	clk.Step(lease)
	cand.round(ctx)
	if tok := cand.Token(); !tok.Valid || tok.Epoch != 2 {
		t.Fatalf("candidate: %+v, want a valid epoch 2 once the holder's own duration ran out", tok)
	}
}

// Clock rates: the holder's clock runs slow and the candidate's fast, each at the edge of
// MaxClockRateDifference/2. The candidate sees the holder's last write the instant it is made and
// takes over at the first instant its own clock allows; the holder's token, shortened by the
// margin, has lapsed by then (without the margin it would still be valid for about 1% of a lease).
func TestClockRatesWithinTheMarginNeverOverlap(t *testing.T) {
	truth := clocktesting.NewFakeClock(t0)
	clockAt := func(rate float64) *simClock {
		return newSimClock(truth, 0, rate)
	}
	slow, fast := clockAt(1-MaxClockRateDifference/2), clockAt(1+MaxClockRateDifference/2)
	store := fake.NewLeaseStore()
	mk := func(id string, c *simClock) *Election {
		e := newElection(store, testConfig(lease, renew), Options{Identity: id, Clock: c, Logger: discard})
		e.boot = c.bootReading
		return e
	}
	holder, cand := mk("holder#1", slow), mk("candidate#2", fast)
	holder.round(ctx)
	cand.round(ctx) // sees the holder's write at once
	for !cand.Token().Valid {
		d := cand.nextDelay()
		truth.Step(time.Duration(float64(d)/fast.rate) + time.Nanosecond)
		cand.round(ctx)
		notBothValid(t, "at the candidate's first allowed instant", holder, cand)
	}
	if truth.Since(t0) > lease+lease/50 {
		t.Fatalf("the candidate took over only after %v", truth.Since(t0))
	}
}
