package election

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

const testShard = 7

// leaseResource names Leases in the API errors the tests inject.
var leaseResource = coordinationv1.Resource("leases")

var (
	_ LeaseStore   = (*fake.LeaseStore)(nil)
	_ LeaseWatcher = (*fake.LeaseStore)(nil)
)

var (
	t0        = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	discard   = slog.New(slog.NewTextHandler(io.Discard, nil))
	testLease = LeaseName(testShard)
)

func testConfig(lease, renew time.Duration) Config {
	return Config{Enabled: true, LeaseDuration: lease, RenewInterval: renew, Shard: testShard, HasShard: true, Namespace: "ns"}
}

// newSync returns an election that the test drives by hand, one round (or event) at a time, with no
// goroutine of its own; Release works on it.
func newSync(t testing.TB, store LeaseStore, clk *clocktesting.FakeClock, identity string, lease, renew time.Duration) *Election {
	t.Helper()
	cfg := testConfig(lease, renew)
	if err := validate(store, cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	e := newElection(store, cfg, Options{Identity: identity, Clock: clk, Logger: discard})
	done := make(chan struct{})
	close(done)
	e.done, e.cancel = done, func() {}
	return e
}

// hookStore wraps a store: it counts calls, can fail them before they reach the store, and can move
// the fake clock while a request or its answer is in flight.
type hookStore struct {
	inner       LeaseStore
	clk         *clocktesting.FakeClock
	mu          sync.Mutex
	calls       atomic.Int64
	fail        func(op string) error // fails the call before it reaches the store
	loseAnswer  func(op string) error // lets the call reach the store, then fails it
	before      time.Duration         // the request travels this long (send time is before it)
	after       time.Duration         // the answer travels this long
	onUpdate    func(*coordinationv1.Lease)
	updates     atomic.Int64
	watchErr    error
	watchCalls  atomic.Int64
	panicEveryN atomic.Int64
}

func (h *hookStore) do(op string, f func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	n := h.calls.Add(1)
	h.mu.Lock()
	fail, before, after := h.fail, h.before, h.after
	h.mu.Unlock()
	if p := h.panicEveryN.Load(); p > 0 && n%p == 0 {
		panic("hookStore: injected panic")
	}
	if fail != nil {
		if err := fail(op); err != nil {
			return nil, err
		}
	}
	if before > 0 {
		h.clk.Step(before)
	}
	l, err := f()
	if after > 0 {
		h.clk.Step(after)
	}
	if h.loseAnswer != nil {
		if lerr := h.loseAnswer(op); lerr != nil {
			return nil, lerr
		}
	}
	return l, err
}

func (h *hookStore) setFail(f func(op string) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail = f
}

func (h *hookStore) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return h.do("get", func() (*coordinationv1.Lease, error) { return h.inner.Get(ctx, name) })
}

func (h *hookStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return h.do("create", func() (*coordinationv1.Lease, error) { return h.inner.Create(ctx, l) })
}

func (h *hookStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return h.do("update", func() (*coordinationv1.Lease, error) {
		h.updates.Add(1)
		if h.onUpdate != nil {
			h.onUpdate(l)
		}
		return h.inner.Update(ctx, l)
	})
}

func (h *hookStore) Watch(ctx context.Context, name string) (watch.Interface, error) {
	h.watchCalls.Add(1)
	if h.watchErr != nil {
		return nil, h.watchErr
	}
	return h.inner.(LeaseWatcher).Watch(ctx, name)
}

func outcomes(e *Election) map[Outcome]uint64 {
	m := map[Outcome]uint64{}
	for i, o := range outcomeNames {
		m[o] = e.outcomes[i].Load()
	}
	return m
}

func errorsByReason(e *Election) map[string]uint64 {
	m := map[string]uint64{}
	for r := reason(0); r < numReasons; r++ {
		m[r.String()] = e.errs[r].Load()
	}
	return m
}

// stepUntil advances clk in small steps, at most max in all, until cond holds (polled in real
// time, as waitFor). A running driver computes its delay and then starts its timer: one big step
// that falls between the two moves the deadline past the step (fresh-clone CI runs failed so, one
// in some hundreds), while small steps reach it either way.
func stepUntil(t testing.TB, clk *clocktesting.FakeClock, max time.Duration, what string, cond func() bool) {
	t.Helper()
	const inc = 50 * time.Millisecond
	deadline := time.Now().Add(20 * time.Second)
	for stepped := time.Duration(0); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if stepped < max {
			clk.Step(min(inc, max-stepped))
			stepped += inc
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// parked waits until n drivers wait on their timers. A driver computes its delay and then starts its
// timer: a clock move between the two starts the timer from the new time, later than the instant a
// test moves the clock to (fresh-clone CI failed so, one run in some hundreds under -race and load).
// A test that moves the clock to an exact instant waits for this first.
func parked(t testing.TB, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d drivers waiting on their timers", n), func() bool { return clk.Waiters() == n })
}

// waitFor polls cond in real time; it synchronizes with goroutines, it asserts no timing.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func mustLease(t testing.TB, s LeaseStore) *coordinationv1.Lease {
	t.Helper()
	l, err := s.Get(context.Background(), testLease)
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return l
}
