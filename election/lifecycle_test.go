package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// The smaller defects of the driver's life cycle, each reproduced on an earlier version.

// lostAnswer lets the first call of op reach the store and then loses its answer.
func lostAnswer(op string) func(string) error {
	var once sync.Once
	return func(got string) error {
		var err error
		if got == op {
			once.Do(func() { err = fmt.Errorf("read tcp: %w", context.DeadlineExceeded) })
		}
		return err
	}
}

// An acquisition that committed but whose answer was lost is never adopted: the record naming us
// is timed like anyone's (an outside edit can put our name, our epoch and our renewTime on the
// record of a process that won the race), and the next acquisition goes above it.
func TestAnAcquisitionWhoseAnswerWasLostIsNeverAdopted(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	store := &hookStore{inner: fake.NewLeaseStore(), clk: clk, loseAnswer: lostAnswer("create")}
	e := newSync(t, store, clk, "w#1", lease, renew)
	e.round(ctx)
	wantToken(t, "after the lost answer", e, 0, false)
	clk.Step(renew)
	e.round(ctx)
	wantToken(t, "next round", e, 0, false)
	for i := 0; !e.Token().Valid; i++ {
		if i > 10 {
			t.Fatal("never acquired over the unanswered create")
		}
		clk.Step(renew)
		e.round(ctx)
	}
	wantToken(t, "once the record has been unchanged for a lease", e, 2, true)
	if got := outcomes(e); got[Acquired] != 1 || got[Renewed] != 0 {
		t.Fatalf("outcomes %v, want one acquisition and no renewal", got)
	}
}

// Release never hands over an acquisition whose answer was lost: the record is not known to be
// ours (see above), so a successor waits it out, as after a crash.
func TestReleaseLeavesAnUnansweredAcquisition(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	store := &hookStore{inner: mem, clk: clk, loseAnswer: lostAnswer("create")}
	e := newSync(t, store, clk, "w#1", lease, renew)
	e.round(ctx)
	if got := holderOf(mustLease(t, mem)); got != "w#1" {
		t.Fatalf("holder %q: the lost create did not commit", got)
	}
	if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := holderOf(mustLease(t, mem)); got != "w#1" {
		t.Fatalf("after Release the Lease is held by %q, want it left to lapse", got)
	}
}

// A 409 names the holder that won the race, learned at the next read, not the holder seen before
// the race (here: nobody, a released Lease).
func TestALostRaceLogsTheWinner(t *testing.T) {
	var logs bytes.Buffer
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	a := newSync(t, mem, clk, "a#1", lease, renew)
	a.round(ctx)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cand := newElection(mem, testConfig(lease, renew), Options{Identity: "cand#2", Clock: clk,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	winner := newSync(t, mem, clk, "winner#3", lease, renew)
	cand.see(mustLease(t, mem)) // both read the released record
	cand.d.watching = true      // and cand's watch has not delivered the winner's write yet
	winner.round(ctx)
	cand.round(ctx) // acts on the released record: a 409
	if got := outcomes(cand)[HeldByOther]; got != 1 {
		t.Fatalf("outcomes after the 409: %v", outcomes(cand))
	}
	cand.d.watching = false
	cand.round(ctx) // reads the winner
	out := logs.String()
	if !strings.Contains(out, "holder=winner#3") {
		t.Fatalf("the log never names the winner:\n%s", out)
	}
	if strings.Contains(out, `holder=""`) {
		t.Fatalf("the log names a stale holder (the released record's):\n%s", out)
	}
}

// Options.Identity must have the per-process shape NewIdentity gives.
func TestStartRefusesAnIdentityWithoutAPerProcessSuffix(t *testing.T) {
	for _, id := range []string{"noetl-cmdbus-writer-0", "#x", "pod#", "a#b#c", "pod #x"} {
		_, err := Start(ctx, fake.NewLeaseStore(), testConfig(lease, renew), Options{Identity: id, Registerer: newPlainRegistry()})
		if err == nil || !strings.Contains(err.Error(), "NewIdentity") {
			t.Errorf("identity %q: %v, want a refusal naming NewIdentity", id, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := Start(ctx, fake.NewLeaseStore(), testConfig(lease, renew), Options{Identity: NewIdentity("pod-0"), Registerer: newPlainRegistry(), Logger: discard}); err != nil {
		t.Fatal(err)
	}
}

// panicWatcher is a store whose Watch panics, or returns neither a stream nor an error.
type panicWatcher struct {
	LeaseStore
	nilStream bool
	calls     chan struct{}
}

func (p *panicWatcher) Watch(context.Context, string) (watch.Interface, error) {
	select {
	case p.calls <- struct{}{}:
	default:
	}
	if p.nilStream {
		return nil, nil
	}
	panic("watch: injected panic")
}

// A Watch that panics or returns nil costs the watch, never the process; and the watch goroutine
// has ended by the time Release returns.
func TestABrokenWatchIsSurvivedAndJoinedOnRelease(t *testing.T) {
	for _, nilStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("nil stream %v", nilStream), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			store := &panicWatcher{LeaseStore: fake.NewLeaseStore(), nilStream: nilStream, calls: make(chan struct{}, 1)}
			e, _ := start(t, store, clk, "w#1", lease, renew)
			waitFor(t, "acquisition by polling", func() bool { return e.Token().Valid })
			<-store.calls
			// Watch was called; the panic is recovered and counted just after, on the watch's
			// goroutine (checking at once raced it: a red make test under load).
			waitFor(t, "the broken watch counted", func() bool { return errorsByReason(e)["other"] > 0 })
			if err := e.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Release returned: the watch goroutine must be gone. Any further Watch call after
			// this point is a goroutine that outlived the election.
			clk.Step(time.Hour)
			time.Sleep(20 * time.Millisecond)
			select {
			case <-store.calls:
				t.Fatal("Watch was called after Release returned")
			default:
			}
		})
	}
}

// OnEvent may call Release: it must neither deadlock nor skip the hand-over.
func TestReleaseFromOnEventHandsOverWithoutDeadlock(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	var e *Election
	released := make(chan error, 1)
	ready := make(chan struct{})
	e, err := Start(ctx, mem, testConfig(lease, renew), Options{Identity: "w#1", Clock: clk, Logger: discard,
		Registerer: newPlainRegistry(), OnEvent: func(ev Event) {
			<-ready
			if ev.Outcome == Acquired {
				released <- e.Release(context.Background())
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release called from OnEvent did not return")
	}
	if e.Token().Valid {
		t.Fatal("the token is valid after Release")
	}
	waitFor(t, "the driver stops", func() bool {
		select {
		case <-e.done:
			return true
		default:
			return false
		}
	})
	if got := holderOf(mustLease(t, mem)); got != "" {
		t.Fatalf("after Release from OnEvent the Lease is held by %q, want released", got)
	}
}

// OnEvent may call Release on every event, the Released event of a Release already under way
// included: that call returns at once instead of waiting for itself.
func TestReleaseCalledAgainFromTheReleasedEvent(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	var e *Election
	ready := make(chan struct{})
	e, err := Start(ctx, mem, testConfig(lease, renew), Options{Identity: "w#1", Clock: clk, Logger: discard,
		Registerer: newPlainRegistry(), OnEvent: func(ev Event) {
			<-ready
			if ev.Outcome == Released {
				_ = e.Release(context.Background())
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	waitFor(t, "acquisition", func() bool { return e.Token().Valid })
	done := make(chan error, 1)
	go func() { done <- e.Release(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release deadlocked on the Release called from its own Released event")
	}
	if got := holderOf(mustLease(t, mem)); got != "" {
		t.Fatalf("the Lease is held by %q, want released", got)
	}
}

// A process suspended for longer than the lease (its monotonic clock stopped, the boot clock did
// not) does not report a valid token on resume, with no store call.
func TestAResumedProcessDoesNotReportAValidToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	e := newSync(t, fake.NewLeaseStore(), clk, "w#1", lease, renew)
	var suspended time.Duration
	origin := clk.Now()
	e.boot = func() time.Duration { return clk.Since(origin) + suspended }
	e.round(ctx)
	wantToken(t, "holder", e, 1, true)
	suspended = 2 * lease // the monotonic clock (clk) did not move
	wantToken(t, "after a suspend of 2 leases", e, 1, false)
	suspended = 0
	wantToken(t, "the same instant without the suspend", e, 1, true)
}

var _ = errors.New
var _ = apierrors.IsNotFound
