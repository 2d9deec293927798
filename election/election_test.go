package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election/fake"
)

var ctx = context.Background()

const (
	lease = 15 * time.Second
	renew = 5 * time.Second
)

func wantToken(t *testing.T, who string, e *Election, epoch uint64, valid bool) {
	t.Helper()
	if got := e.Token(); got != (Token{Epoch: epoch, Valid: valid}) {
		t.Fatalf("%s: Token() = %+v, want {Epoch:%d Valid:%v}", who, got, epoch, valid)
	}
}

// The positive control for the per-process identity. A StatefulSet pod keeps its name across
// restarts: with a name-only identity the restarted writer finds its own name on its predecessor's
// live Lease. When the name alone decided "ours", it renewed that Lease and carried on with the same
// epoch while the predecessor (a zombie, say paused) still believed it held it — two writers, one
// token, which no fence can tell apart (asserted by this test on earlier versions). Two rules now
// stop it, each on its own: the per-process suffix makes the restarted writer a stranger to the
// Lease, and a record is only ours while it carries the epoch this process minted. The control
// shows the name-only writer meeting the inheriting situation — its own name on a live record it
// did not mint — and both writers then waiting the lease out and taking the next epoch.
func TestARestartedWriterInheritsTheEpochUnlessIdentityIsPerProcess(t *testing.T) {
	const pod = "noetl-cmdbus-writer-0"
	for _, tc := range []struct {
		name     string
		identity func() string
		sameName bool
	}{
		{"name-only identity meets its own name", func() string { return pod }, true},
		{"per-process identity does not", func() string { return NewIdentity(pod) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
			before := newSync(t, store, clk, tc.identity(), lease, renew)
			before.round(ctx)
			wantToken(t, "predecessor", before, 1, true)

			clk.Step(time.Second) // the pod restarts; the old process lingers on as a zombie
			after := newSync(t, store, clk, tc.identity(), lease, renew)
			after.round(ctx)

			if got := holderOf(mustLease(t, store)) == after.Identity(); got != tc.sameName {
				t.Fatalf("the live record names the restarted writer: %v, want %v", got, tc.sameName)
			}
			wantToken(t, "restarted", after, 0, false)
			wantToken(t, "zombie predecessor", before, 1, true)
			if got := outcomes(after); got[HeldByOther] != 1 || got[Renewed] != 0 {
				t.Fatalf("restarted writer outcomes %v, want held_by_other and no renewal", got)
			}
			// The zombie never renews again; the restarted writer takes over once the lease has
			// lapsed, with the next epoch, and never while the zombie's token is valid.
			for i := 0; i < 10 && !after.Token().Valid; i++ {
				clk.Step(renew)
				after.round(ctx)
				if after.Token().Valid && before.Token().Valid {
					t.Fatalf("both valid at %v", clk.Now())
				}
			}
			wantToken(t, "restarted", after, 2, true)
			wantToken(t, "zombie predecessor", before, 1, false)
		})
	}
}

func TestLivenessBoundaryIsStrict(t *testing.T) {
	renewed := t0
	rec := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		RenewTime:            &metav1.MicroTime{Time: renewed},
		LeaseDurationSeconds: ptr.To[int32](15),
	}}
	for _, tc := range []struct {
		at      time.Time
		expired bool
	}{
		{renewed, false},
		{renewed.Add(lease - time.Microsecond), false},
		{renewed.Add(lease), false}, // the exact instant: still live
		{renewed.Add(lease + time.Microsecond), true},
		{renewed.Add(lease + time.Nanosecond), true},
	} {
		if got := expired(rec, tc.at, lease); got != tc.expired {
			t.Errorf("expired at renewTime+%v = %v, want %v", tc.at.Sub(renewed), got, tc.expired)
		}
	}
	noDuration := rec.DeepCopy()
	noDuration.Spec.LeaseDurationSeconds = nil
	if expired(noDuration, renewed.Add(time.Hour), time.Hour) || !expired(noDuration, renewed.Add(time.Hour+time.Microsecond), time.Hour) {
		t.Error("a record without a duration must fall back to ours")
	}
	if !expired(&coordinationv1.Lease{}, renewed, lease) {
		t.Error("a record that was never renewed is expired")
	}
}

// Through the driver, at the exact instant: a candidate that has watched the record unchanged for
// far longer than the duration (its clock runs behind the holder's) still may not take over at
// renewTime + duration, and does 1µs later.
func TestCandidateTakesOverOnlyAfterTheExactInstant(t *testing.T) {
	store := fake.NewLeaseStore()
	holderClk := clocktesting.NewFakeClock(t0)
	holder := newSync(t, store, holderClk, "holder#1", lease, renew)
	holder.round(ctx)
	renewed := mustLease(t, store).Spec.RenewTime.Time

	candClk := clocktesting.NewFakeClock(renewed.Add(-10 * time.Second))
	cand := newSync(t, store, candClk, "candidate#2", lease, renew)
	cand.round(ctx)
	candClk.SetTime(renewed.Add(lease))
	cand.round(ctx)
	wantToken(t, "candidate at renewTime+duration", cand, 0, false)
	candClk.Step(time.Microsecond)
	cand.round(ctx)
	wantToken(t, "candidate 1µs later", cand, 2, true)
}

// A takeover also needs the record to have stood still for more than the duration on the
// candidate's own clock, whatever the wall clocks say.
func TestCandidateMustWatchTheRecordForMoreThanTheDuration(t *testing.T) {
	store := fake.NewLeaseStore()
	holder := newSync(t, store, clocktesting.NewFakeClock(t0), "holder#1", lease, renew)
	holder.round(ctx)

	// Wall-clock expired already when the candidate first looks (its clock is far ahead).
	candClk := clocktesting.NewFakeClock(t0.Add(time.Hour))
	cand := newSync(t, store, candClk, "candidate#2", lease, renew)
	cand.round(ctx)
	candClk.Step(lease)
	cand.round(ctx)
	wantToken(t, "after exactly the duration", cand, 0, false)
	candClk.Step(time.Microsecond)
	cand.round(ctx)
	wantToken(t, "after more than the duration", cand, 2, true)
}

func TestEpochs(t *testing.T) {
	inner := fake.NewLeaseStore()
	clk := clocktesting.NewFakeClock(t0)
	store := &hookStore{inner: inner, clk: clk}
	a := newSync(t, store, clk, "a#1", lease, renew)

	a.round(ctx)
	wantToken(t, "first acquisition", a, 1, true)
	for i := 0; i < 5; i++ {
		clk.Step(renew)
		a.round(ctx)
	}
	wantToken(t, "after renewals", a, 1, true)
	if got := outcomes(a); got[Acquired] != 1 || got[Renewed] != 5 {
		t.Fatalf("outcomes %v, want 1 acquired and 5 renewed", got)
	}

	// The same process, cut off for longer than the lease and then back with nobody else around,
	// re-acquires: its token lapsed, so it must not resume the old epoch.
	store.setFail(func(string) error { return errors.New("partitioned") })
	for i := 0; i < 4; i++ {
		clk.Step(renew)
		a.round(ctx)
	}
	wantToken(t, "partitioned", a, 1, false)
	store.setFail(nil)
	clk.Step(renew)
	a.round(ctx)
	wantToken(t, "re-acquired by the same process", a, 2, true)
	if got := *mustLease(t, inner).Spec.HolderIdentity; got != "a#1" {
		t.Fatalf("holder %q", got)
	}

	// A renewal that reaches the store but whose answer is lost keeps the record live, yet the
	// token lapses a lease duration after the last renewal that was answered: the next write is an
	// acquisition, not a renewal that would revive the lapsed token's epoch.
	clk.Step(renew)
	a.round(ctx)
	wantToken(t, "renewed", a, 2, true)
	lastAnswered := clk.Now()
	store.loseAnswer = func(string) error { return fmt.Errorf("read: %w", context.DeadlineExceeded) }
	clk.Step(lease - time.Second)
	a.round(ctx) // reaches the store; the answer is lost
	store.loseAnswer = nil
	clk.SetTime(lastAnswered.Add(lease))
	wantToken(t, "unanswered", a, 2, false)
	if expired(mustLease(t, inner), clk.Now(), lease) {
		t.Fatal("the record should still be live")
	}
	// The record names us with our epoch, but it is not the one our last answered write produced
	// and our token has lapsed: it may be anyone's (an edit can put our name on another holder's
	// record), so it is timed like any record before the next acquisition.
	a.round(ctx)
	wantToken(t, "an unanswered renewal found after a local lapse", a, 2, false)
	for i := 0; !a.Token().Valid; i++ {
		if i > 10 {
			t.Fatal("never re-acquired the record of the unanswered renewal")
		}
		clk.Step(renew)
		a.round(ctx)
	}
	wantToken(t, "re-acquired after a local lapse", a, 3, true)

	// Another process takes over after a crash: next epoch.
	b := newSync(t, store, clk, "b#2", lease, renew)
	b.round(ctx)
	for i := 0; i < 5; i++ {
		clk.Step(renew)
		b.round(ctx)
	}
	wantToken(t, "successor", b, 4, true)

	// The Lease vanishes under its holder and a fresh one appears with a reset count: epochs still
	// only go up, as far as this process has seen.
	if err := inner.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: testLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseTransitions: ptr.To[int32](0)},
	}); err != nil {
		t.Fatal(err)
	}
	clk.Step(renew)
	b.round(ctx) // the renewal's uid precondition fails: a lost round
	wantToken(t, "holder after a lost round", b, 4, true)
	clk.Step(renew)
	b.round(ctx) // reads the new Lease: lost, then acquires it as free
	wantToken(t, "holder of the recreated lease", b, 5, true)
	if got := outcomes(b); got[Lost] != 1 {
		t.Fatalf("outcomes %v, want one lost", got)
	}
	if got := epochOf(mustLease(t, inner)); got != 5 {
		t.Fatalf("stored epoch %d, want 5", got)
	}
}

// The scenario the uid precondition exists for, first on the store (why it matters), then through
// the driver (it is used): a PUT without a uid on an absent Lease recreates it, with a reset epoch
// if the body says so; with the uid it is refused.
func TestAnUpdateNeverRecreatesADeletedLease(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		store := fake.NewLeaseStore()
		created, err := store.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testLease},
			Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](5)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Delete(ctx, testLease); err != nil {
			t.Fatal(err)
		}
		withUID := created.DeepCopy()
		if _, err := store.Update(ctx, withUID); !apierrors.IsConflict(err) {
			t.Fatalf("PUT with uid on an absent lease: %v, want a conflict", err)
		}
		if _, err := store.Get(ctx, testLease); !apierrors.IsNotFound(err) {
			t.Fatalf("lease after refused PUT: %v, want not found", err)
		}
		noUID := created.DeepCopy()
		noUID.UID = ""
		noUID.Spec.LeaseTransitions = ptr.To[int32](0)
		recreated, err := store.Update(ctx, noUID)
		if err != nil {
			t.Fatalf("PUT without uid on an absent lease: %v, want it recreated (the API server's 201)", err)
		}
		if recreated.UID == created.UID || epochOf(recreated) != 0 {
			t.Fatalf("recreated %+v", recreated)
		}
	})
	t.Run("driver", func(t *testing.T) {
		store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
		holder := newSync(t, store, clk, "holder#1", lease, renew)
		holder.round(ctx)
		if err := store.Delete(ctx, testLease); err != nil {
			t.Fatal(err)
		}
		clk.Step(renew)
		holder.round(ctx)
		if _, err := store.Get(ctx, testLease); !apierrors.IsNotFound(err) {
			t.Fatalf("after the holder's renewal the lease is %v, want still absent", err)
		}
		clk.Step(renew)
		holder.round(ctx)
		if got := outcomes(holder); got[Lost] != 1 || got[Acquired] != 2 {
			t.Fatalf("outcomes %v, want lost, then acquired again", got)
		}
		wantToken(t, "holder", holder, 2, true)
	})
	t.Run("kube store refuses", func(t *testing.T) {
		s := &KubeStore{}
		_, err := s.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testLease, ResourceVersion: "3"}})
		if !errors.Is(err, errUnconditionalUpdate) {
			t.Fatalf("Update without uid: %v", err)
		}
	})
}

// token_valid is decided at read time from the send time of the last successful write: here the
// write travels 300ms, its answer 200ms, then the writer is cut off (no round runs at all). Token
// drops exactly one lease duration less the clock-rate margin after the send, holds_lease stays 1,
// and no store call is made.
func TestTokenValidDropsAtExactlyTheLeaseDurationWithoutAStoreCall(t *testing.T) {
	validFor := time.Duration(float64(lease) * (1 - MaxClockRateDifference)) // 14.85s
	clk := clocktesting.NewFakeClock(t0)
	store := &hookStore{inner: fake.NewLeaseStore(), clk: clk, before: 300 * time.Millisecond, after: 200 * time.Millisecond}
	e := newSync(t, store, clk, "holder#1", lease, renew)
	var events []Event
	e.onEvent = func(ev Event) { events = append(events, ev) }
	e.round(ctx) // GET (500ms) then POST (500ms)
	sent := t0.Add(500 * time.Millisecond)
	if len(events) != 1 || !events[0].Until.Equal(sent.Add(validFor)) || !events[0].From.Equal(sent.Add(500*time.Millisecond)) {
		t.Fatalf("events %+v, want one acquisition from %v until %v", events, sent.Add(500*time.Millisecond), sent.Add(validFor))
	}
	calls := store.calls.Load()
	reg := newRegistry(t, e)

	clk.SetTime(sent.Add(validFor - time.Nanosecond))
	wantToken(t, "1ns before", e, 1, true)
	wantGauges(t, reg, map[string]float64{"ehdb_election_holds_lease": 1, "ehdb_election_token_valid": 1})

	clk.SetTime(sent.Add(validFor))
	wantToken(t, "at send + validity", e, 1, false)
	wantGauges(t, reg, map[string]float64{"ehdb_election_holds_lease": 1, "ehdb_election_token_valid": 0,
		"ehdb_election_last_contact_age_seconds": validFor.Seconds(), "ehdb_election_epoch": 1})
	if got := store.calls.Load(); got != calls {
		t.Fatalf("reading the token made %d store calls", got-calls)
	}
}

// Skewed wall clocks cannot make a candidate take over a lease that is being renewed, and after the
// holder stops the candidate takes over only once the holder's token has lapsed by the holder's own
// clock.
func TestSkewedCandidatesNeverTakeOverALiveLease(t *testing.T) {
	for _, skew := range []time.Duration{-2 * lease, -lease, -lease / 2, 0, lease / 2, lease, 2 * lease} {
		t.Run(fmt.Sprintf("skew %v", skew), func(t *testing.T) {
			store := fake.NewLeaseStore()
			hClk := clocktesting.NewFakeClock(t0)
			cClk := clocktesting.NewFakeClock(t0.Add(skew))
			holder := newSync(t, store, hClk, "holder#1", lease, renew)
			cand := newSync(t, store, cClk, "candidate#2", lease, renew)
			step := func(d time.Duration) {
				hClk.Step(d)
				cClk.Step(d)
			}
			const tick = 250 * time.Millisecond
			holder.round(ctx)
			for i := 1; i <= int(4*lease/tick); i++ {
				step(tick)
				if i%int(renew/tick) == 0 {
					holder.round(ctx)
				}
				cand.round(ctx)
				if cand.Token().Valid || !holder.Token().Valid {
					t.Fatalf("at +%v: holder %+v candidate %+v", time.Duration(i)*tick, holder.Token(), cand.Token())
				}
			}
			// The holder crashes right after a renewal.
			holder.round(ctx)
			for i := 0; !cand.Token().Valid; i++ {
				if i > int((3*lease+max(-skew, 0))/tick) {
					t.Fatal("candidate never took over")
				}
				step(tick)
				cand.round(ctx)
				if cand.Token().Valid && holder.Token().Valid {
					t.Fatalf("overlap at holder time %v", hClk.Now())
				}
			}
			wantToken(t, "candidate", cand, 2, true)
		})
	}
}

// A graceful release drops the token before the Lease is written, and a standby then acquires at
// once, with the next epoch, without waiting for the lease to lapse.
func TestReleaseDropsTheTokenFirstAndHandsOverAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	inner := fake.NewLeaseStore()
	store := &hookStore{inner: inner, clk: clk}
	holder := newSync(t, store, clk, "holder#1", lease, renew)
	cand := newSync(t, inner, clk, "candidate#2", lease, renew)
	var events []Event
	holder.onEvent = func(ev Event) { events = append(events, ev) }
	holder.round(ctx)
	cand.round(ctx)
	clk.Step(time.Second)

	var validDuringPut *bool
	store.onUpdate = func(*coordinationv1.Lease) { v := holder.Token().Valid; validDuringPut = &v }
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if validDuringPut == nil || *validDuringPut {
		t.Fatalf("token valid while the release was written: %v", validDuringPut)
	}
	wantToken(t, "released holder", holder, 1, false)
	if last := events[len(events)-1]; last.Outcome != Released || !last.Until.Equal(t0.Add(time.Second)) {
		t.Fatalf("last event %+v", last)
	}
	if got := holderOf(mustLease(t, inner)); got != "" {
		t.Fatalf("holder after release %q", got)
	}
	cand.round(ctx)
	wantToken(t, "successor", cand, 2, true)
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

// Losing a race is an outcome, not an error, and a lost compare-and-swap is never retried within
// the round.
func TestLostRacesAreOutcomesAndNotRetried(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	inner := fake.NewLeaseStore()
	a := newSync(t, inner, clk, "a#1", lease, renew)
	bStore := &hookStore{inner: inner, clk: clk}
	b := newSync(t, bStore, clk, "b#2", lease, renew)

	// Both read "absent"; a creates first; b's POST loses.
	b.d.known, b.d.rec = true, nil
	b.d.ownWrite = true // decide on what it read, as a watch would let it
	a.round(ctx)
	b.round(ctx)
	if got := outcomes(b); got[HeldByOther] != 1 || got[Acquired] != 0 {
		t.Fatalf("b outcomes %v", got)
	}
	if got := errorsByReason(b); got["other"]+got["unreachable"]+got["forbidden"]+got["unauthorized"] != 0 {
		t.Fatalf("a lost create counted as an error: %v", got)
	}

	// a releases; b reads the free Lease; a takes it back before b writes: b's PUT conflicts.
	clk.Step(time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := newSync(t, inner, clk, "c#3", lease, renew)
	bStore.onUpdate = func(*coordinationv1.Lease) {
		if bStore.updates.Load() == 1 {
			c.round(ctx) // c acquires between b's read and b's write
		}
	}
	before := bStore.calls.Load()
	b.round(ctx)
	if got := bStore.calls.Load() - before; got != 2 {
		t.Fatalf("b made %d calls in the round, want exactly a GET and one PUT", got)
	}
	wantToken(t, "b", b, 0, false)
	wantToken(t, "c", c, 2, true)
	if got := outcomes(b); got[HeldByOther] != 2 {
		t.Fatalf("b outcomes %v", got)
	}
}

func TestStartValidatesAndDisabledStartsNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store LeaseStore
		cfg   Config
		want  string
	}{
		{"no store", nil, testConfig(lease, renew), "no LeaseStore"},
		{"no shard", fake.NewLeaseStore(), Config{Enabled: true, LeaseDuration: lease, RenewInterval: renew}, "no shard"},
		{"fractional lease", fake.NewLeaseStore(), testConfig(1500*time.Millisecond, time.Second/2), "whole number"},
		{"renew not below lease", fake.NewLeaseStore(), testConfig(lease, lease), "below the lease"},
	} {
		if _, err := Start(ctx, tc.store, tc.cfg, Options{Registerer: newPlainRegistry()}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Start error %v, want %q", tc.name, err, tc.want)
		}
	}
	e, err := Start(ctx, nil, Config{LeaseDuration: lease, RenewInterval: renew}, Options{Registerer: newPlainRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Token().Valid || e.active.Load() || e.Release(ctx) != nil {
		t.Fatal("a disabled election must be inert")
	}
}
