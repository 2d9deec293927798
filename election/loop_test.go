package election

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// These tests run the real driver goroutine on a fake clock. The clock moves only when a test
// steps it, so "acquired without a step" means "acted on a watch event, not on a timer".

func watchers(m *fake.LeaseStore) int { return m.Watchers() }

func storeRV(m *fake.LeaseStore) uint64 { return m.ResourceVersion() }

func start(t *testing.T, store LeaseStore, clk *clocktesting.FakeClock, id string, lease, renew time.Duration) (*Election, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := Start(ctx, store, testConfig(lease, renew), Options{Registerer: newPlainRegistry(), Clock: clk, Logger: discard, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-e.done })
	return e, cancel
}

func TestAReleaseIsTakenOverAtOnceThroughTheWatch(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder, _ := start(t, store, clk, "holder#1", lease, renew)
	waitFor(t, "holder acquires", func() bool { return holder.Token().Valid })
	standby, _ := start(t, store, clk, "standby#2", lease, renew)
	waitFor(t, "both watching", func() bool { return watchers(store) == 2 && outcomes(standby)[HeldByOther] == 1 })
	clk.Step(time.Second)

	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "standby acquires without a clock step", func() bool { return standby.Token().Valid })
	wantToken(t, "standby", standby, 2, true)
	if !clk.Now().Equal(t0.Add(time.Second)) {
		t.Fatal("the clock moved")
	}
}

// A crashed holder's lease is taken over at the first instant the rules allow — its last renewal as
// seen on the standby's clock, plus the duration, plus 1µs — not at the standby's next poll.
func TestACrashedHolderIsTakenOverAtTheFirstAllowedInstant(t *testing.T) {
	const lease, renew = 10 * time.Second, 3 * time.Second
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder, crash := start(t, store, clk, "holder#1", lease, renew)
	waitFor(t, "holder acquires", func() bool { return holder.Token().Valid })
	standby, _ := start(t, store, clk, "standby#2", lease, renew)
	waitFor(t, "standby watching", func() bool { return watchers(store) == 2 && outcomes(standby)[HeldByOther] == 1 })

	for i := uint64(1); i <= 2; i++ { // renewals at 3s and 6s
		parked(t, clk, 2)
		clk.Step(renew)
		waitFor(t, "renewal", func() bool { return outcomes(holder)[Renewed] == i })
	}
	crash()
	<-holder.done
	waitFor(t, "standby saw every renewal", func() bool { return standby.watchEvents.Load() == storeRV(store) })

	rounds := outcomes(standby)[HeldByOther]
	parked(t, clk, 1)
	clk.SetTime(t0.Add(15 * time.Second)) // a poll of the standby; the lease is not yet expired
	waitFor(t, "standby polls", func() bool { return outcomes(standby)[HeldByOther] > rounds })
	if standby.Token().Valid {
		t.Fatal("took over before the lease expired")
	}
	parked(t, clk, 1)
	clk.SetTime(t0.Add(6*time.Second + lease + time.Microsecond))
	waitFor(t, "standby takes over at renewal+duration+1µs, before its next poll at 18s", func() bool { return standby.Token().Valid })
	wantToken(t, "standby", standby, 2, true)
	if got := mustLease(t, store).Spec.AcquireTime.Time; !got.Equal(t0.Add(16*time.Second + time.Microsecond)) {
		t.Fatalf("acquired at %v", got.Sub(t0))
	}
}

// Without a watch (here: watch forbidden) the standby still takes over, at its polls.
func TestPollingIsTheFallbackWhenTheWatchFails(t *testing.T) {
	const lease, renew = 10 * time.Second, 3 * time.Second
	inner, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	noWatch := &hookStore{inner: inner, clk: clk, watchErr: apierrors.NewForbidden(leaseResource, "", errors.New("no watch verb"))}
	holder, _ := start(t, inner, clk, "holder#1", lease, renew)
	waitFor(t, "holder acquires", func() bool { return holder.Token().Valid })
	standby, _ := start(t, noWatch, clk, "standby#2", lease, renew)
	waitFor(t, "standby polls", func() bool { return outcomes(standby)[HeldByOther] == 1 && noWatch.watchCalls.Load() > 0 })

	clk.Step(time.Second)
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if standby.Token().Valid {
		t.Fatal("acquired without a watch before polling")
	}
	// The standby's next poll, at most a renew interval after the release.
	stepUntil(t, clk, renew, "standby acquires at its poll", func() bool { return standby.Token().Valid })
	wantToken(t, "standby", standby, 2, true)
	if got := errorsByReason(standby)["forbidden"]; got == 0 {
		t.Fatal("the failing watch must be counted")
	}
}

// A holder learns from the watch that its Lease was deleted: it reports the loss at once, and the
// Lease it then creates carries the next epoch.
func TestAHolderLearnsOfADeletedLeaseFromTheWatch(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder, _ := start(t, store, clk, "holder#1", lease, renew)
	waitFor(t, "holder watching", func() bool { return holder.Token().Valid && watchers(store) == 1 })
	clk.Step(time.Second)
	if err := store.Delete(context.Background(), testLease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "loss reported, lease recreated", func() bool { return outcomes(holder)[Lost] == 1 && holder.Token().Epoch == 2 })
	wantToken(t, "holder", holder, 2, true)
	if got := outcomes(holder); got[Acquired] != 2 || got[Renewed] != 0 {
		t.Fatalf("outcomes %v: the deletion must be seen as a loss, not renewed over", got)
	}
	if !clk.Now().Equal(t0.Add(time.Second)) {
		t.Fatal("the clock moved: the loss must come from the watch, not a renewal")
	}
}

// The loop survives 10,000 consecutive store errors of every kind, panics included, keeps its
// rhythm, counts them all, and acquires as soon as the store answers again.
func TestTheLoopSurvivesTenThousandConsecutiveErrors(t *testing.T) {
	const n = 10000
	clk := clocktesting.NewFakeClock(t0)
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	failures := []error{
		apierrors.NewForbidden(leaseResource, testLease, errors.New("no RBAC")),
		apierrors.NewUnauthorized("expired token"),
		refused,
		apierrors.NewInternalError(errors.New("etcd")),
		errors.New("garbled"),
	}
	store := &hookStore{inner: fake.NewLeaseStore(), clk: clk, watchErr: refused}
	store.panicEveryN.Store(997)
	var i int
	store.setFail(func(string) error { i++; return failures[i%len(failures)] })
	e, _ := start(t, store, clk, "w#1", lease, renew)

	var steps, stalls int
	for store.calls.Load() < n {
		before := store.calls.Load()
		clk.Step(renew)
		steps++
		for deadline := time.Now().Add(5 * time.Millisecond); store.calls.Load() == before; {
			if time.Now().After(deadline) {
				stalls++
				break
			}
			runtime.Gosched()
		}
	}
	t.Logf("%d steps, %d stalls", steps, stalls)
	if !e.active.Load() || e.Token().Valid {
		t.Fatalf("after %d errors: active %v token %+v", n, e.active.Load(), e.Token())
	}
	var total uint64
	for _, v := range errorsByReason(e) {
		total += v
	}
	if total < n {
		t.Fatalf("counted %d errors, want at least %d: %v", total, n, errorsByReason(e))
	}
	for _, r := range []string{"forbidden", "unauthorized", "unreachable", "other"} {
		if errorsByReason(e)[r] == 0 {
			t.Errorf("no %s errors counted: %v", r, errorsByReason(e))
		}
	}

	store.setFail(nil)
	store.panicEveryN.Store(0)
	waitFor(t, "acquisition once the store answers", func() bool {
		if !e.Token().Valid {
			clk.Step(renew)
			time.Sleep(time.Millisecond)
		}
		return e.Token().Valid
	})
}
