package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
)

// The randomized simulation. N election processes share one in-memory store and one simulated
// clock. Each process runs in a goroutine of its own, but the simulation decides, step by step,
// which single thing happens next: a process starts a round or handles watch events, a request
// reaches the store (or fails, or is applied with its answer lost), an answer reaches its process
// (or the call times out, leaving the request in flight), time passes, a process crashes, pauses,
// loses its watch or releases. After every step it asserts that no two processes (dead ones
// included: their tokens lapse, they do not vanish) have a valid token at once, and that epochs
// strictly increase across acquisitions. The seed is printed on failure; EHDB_SIM_SEED=<n> reruns
// one seed, EHDB_SIM_SEEDS=<n> runs more.

const (
	simLease = 10 * time.Second
	simRenew = 3 * time.Second
	simProcs = 3
	simSteps = 4000
)

type simResult struct {
	l   *coordinationv1.Lease
	err error
}

type simOp struct {
	p       *simProc
	what    string
	issued  time.Time
	apply   func() (*coordinationv1.Lease, error)
	applied bool
	res     simResult
	resp    chan simResult
}

type simProc struct {
	n       int
	e       *Election
	cmds    chan func()
	idle    chan struct{}
	op      *simOp // the call this process is waiting on
	w       watch.Interface
	paused  bool
	done    bool // gets no more commands (crashed or released)
	crashed bool // gets no more answers either
	epoch   uint64
}

type sim struct {
	t        *testing.T
	seed     int64
	rng      *rand.Rand
	clk      *clocktesting.FakeClock
	mem      *MemoryStore
	procs    []*simProc
	ops      chan *simOp
	orphans  []*simOp // timed out, still in flight: may reach the store later
	trace    []string
	maxEpoch uint64
	owner    map[uint64]*simProc
	stored   uint64
	valid    *simProc
	acquired int
	failed   bool
}

// simStore is one process's view of the store: every call is handed to the simulation.
type simStore struct {
	s *sim
	p *simProc
}

func (st simStore) do(what string, f func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	op := &simOp{p: st.p, what: what, issued: st.s.clk.Now(), apply: f, resp: make(chan simResult, 1)}
	st.s.ops <- op
	r := <-op.resp
	return r.l, r.err
}

func (st simStore) Get(_ context.Context, name string) (*coordinationv1.Lease, error) {
	return st.do("get", func() (*coordinationv1.Lease, error) { return st.s.mem.Get(context.Background(), name) })
}

func (st simStore) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return st.do("create", func() (*coordinationv1.Lease, error) { return st.s.mem.Create(context.Background(), l) })
}

func (st simStore) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return st.do("update", func() (*coordinationv1.Lease, error) { return st.s.mem.Update(context.Background(), l) })
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%8.3fs ", s.clk.Since(t0).Seconds())+fmt.Sprintf(format, args...))
}

func (s *sim) fail(format string, args ...any) {
	if s.failed {
		return
	}
	s.failed = true
	tail := s.trace[max(0, len(s.trace)-40):]
	s.t.Errorf("seed %d (rerun: EHDB_SIM_SEED=%d go test -run TestRandomizedSimulation ./election/): %s\nlast steps:\n%s",
		s.seed, s.seed, fmt.Sprintf(format, args...), strings.Join(tail, "\n"))
}

func (s *sim) spawn() {
	p := &simProc{n: len(s.procs), cmds: make(chan func()), idle: make(chan struct{})}
	p.e = newElection(simStore{s: s, p: p}, testConfig(simLease, simRenew), Options{
		Identity: NewIdentity(fmt.Sprintf("writer-%d", p.n)), Clock: s.clk, Logger: discard,
		OnEvent: func(ev Event) { s.onEvent(p, ev) },
	})
	done := make(chan struct{})
	close(done)
	p.e.done, p.e.cancel = done, func() {}
	go func() {
		for f := range p.cmds {
			f()
			p.idle <- struct{}{}
		}
	}()
	s.procs = append(s.procs, p)
	s.logf("p%d starts", p.n)
	if s.rng.Intn(4) != 0 {
		s.startWatch(p)
	}
}

func (s *sim) onEvent(p *simProc, ev Event) {
	switch ev.Outcome {
	case Acquired, Renewed:
		// An epoch belongs to one process. Its first appearance must be above every epoch before
		// it; that is usually an acquisition, but may be a renewal when the acquisition's write
		// committed and its answer was lost (the process then finds itself holder and renews).
		if owner, ok := s.owner[ev.Epoch]; ok {
			if owner != p {
				s.fail("p%d %s epoch %d, which belongs to p%d", p.n, ev.Outcome, ev.Epoch, owner.n)
			}
			if ev.Outcome == Acquired {
				s.fail("p%d acquired epoch %d twice", p.n, ev.Epoch)
			}
		} else {
			if ev.Epoch <= s.maxEpoch {
				s.fail("p%d %s epoch %d, not above the highest epoch before it, %d", p.n, ev.Outcome, ev.Epoch, s.maxEpoch)
			}
			s.owner[ev.Epoch] = p
			s.maxEpoch = max(s.maxEpoch, ev.Epoch)
			s.acquired++
			s.logf("p%d %s epoch %d", p.n, ev.Outcome, ev.Epoch)
		}
		p.epoch = ev.Epoch
	case Lost, Released:
		s.logf("p%d %s epoch %d", p.n, ev.Outcome, ev.Epoch)
	}
}

// run gives p a command and waits until p blocks on a store call or finishes.
func (s *sim) run(p *simProc, f func()) {
	p.cmds <- f
	s.await(p)
}

func (s *sim) await(p *simProc) {
	select {
	case op := <-s.ops:
		if op.p != p {
			s.t.Fatalf("seed %d: a call from p%d while p%d ran", s.seed, op.p.n, p.n)
		}
		p.op = op
	case <-p.idle:
		p.op = nil
	}
	s.check()
}

func (s *sim) answer(p *simProc, r simResult) {
	op := p.op
	p.op = nil
	op.resp <- r
	s.await(p)
}

func (s *sim) startWatch(p *simProc) {
	w, err := s.mem.Watch(context.Background(), testLease)
	if err != nil {
		s.t.Fatal(err)
	}
	p.w = w
	s.run(p, func() { p.e.handle(watchMsg{started: true}) })
}

func (s *sim) stopWatch(p *simProc) {
	p.w.Stop()
	p.w = nil
	s.run(p, func() { p.e.handle(watchMsg{ended: true}) })
}

var simErrors = []error{
	apierrors.NewInternalError(errors.New("etcd leader changed")),
	apierrors.NewForbidden(leaseResource, testLease, errors.New("RBAC not yet bound")),
	apierrors.NewServiceUnavailable("apiserver shutting down"),
	fmt.Errorf("dial: %w", context.DeadlineExceeded),
}

func (s *sim) live() []*simProc {
	var out []*simProc
	for _, p := range s.procs {
		if !p.done {
			out = append(out, p)
		}
	}
	return out
}

func (s *sim) pick(ps []*simProc, ok func(*simProc) bool) *simProc {
	var c []*simProc
	for _, p := range ps {
		if ok(p) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.Intn(len(c))]
}

func (s *sim) applyOp(op *simOp) {
	op.applied = true
	switch r := s.rng.Intn(100); {
	case r < 8: // fails on the way: nothing applied
		op.res = simResult{err: simErrors[s.rng.Intn(len(simErrors))]}
		s.logf("p%d %s fails: %v", op.p.n, op.what, op.res.err)
	default:
		l, err := op.apply()
		op.res = simResult{l, err}
		if r < 14 { // applied, but the answer is lost
			op.res = simResult{err: fmt.Errorf("read: %w", context.DeadlineExceeded)}
		}
		s.logf("p%d %s applied (rv %s, err %v)%s", op.p.n, op.what, rvOf(l), err, map[bool]string{true: ", answer lost"}[r < 14])
	}
	if l, err := s.mem.Get(context.Background(), testLease); err == nil {
		if ep := epochOf(l); ep < s.stored {
			s.fail("the stored epoch went from %d down to %d", s.stored, ep)
		} else {
			s.stored = ep
		}
	}
}

func rvOf(l *coordinationv1.Lease) string {
	if l == nil {
		return "-"
	}
	return l.ResourceVersion
}

func (s *sim) step() {
	live := s.live()
	switch r := s.rng.Intn(1000); {
	case r < 250: // time passes
		d := time.Duration(s.rng.Int63n(int64(300 * time.Millisecond)))
		if s.rng.Intn(20) == 0 {
			d = time.Duration(s.rng.Int63n(int64(2 * simLease)))
		}
		s.clk.Step(d)
	case r < 450: // a request reaches the store
		var pending []*simOp
		for _, p := range s.procs {
			if p.op != nil && !p.op.applied {
				pending = append(pending, p.op)
			}
		}
		if len(pending)+len(s.orphans) == 0 {
			return
		}
		i := s.rng.Intn(len(pending) + len(s.orphans))
		if i < len(pending) {
			s.applyOp(pending[i])
			return
		}
		i -= len(pending)
		op := s.orphans[i]
		s.orphans = append(s.orphans[:i], s.orphans[i+1:]...)
		s.logf("a request that timed out arrives late:")
		s.applyOp(op)
	case r < 700: // an answer reaches its process, or its call times out
		p := s.pick(s.procs, func(p *simProc) bool { return p.op != nil && !p.paused && !p.crashed })
		if p == nil {
			return
		}
		op := p.op
		if s.clk.Since(op.issued) > p.e.callTimeout {
			if !op.applied {
				s.orphans = append(s.orphans, op)
			}
			s.logf("p%d %s times out", p.n, op.what)
			s.answer(p, simResult{err: fmt.Errorf("%s: %w", op.what, context.DeadlineExceeded)})
			return
		}
		if op.applied {
			s.answer(p, op.res)
		}
	case r < 930: // an idle process runs a round or handles watch events
		p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused })
		if p == nil {
			return
		}
		if p.w != nil && s.rng.Intn(2) == 0 {
			for k := s.rng.Intn(3) + 1; k > 0; k-- {
				select {
				case ev, ok := <-p.w.ResultChan():
					if !ok {
						p.w = nil
						s.run(p, func() { p.e.handle(watchMsg{ended: true}) })
						return
					}
					s.run(p, func() { p.e.handle(watchMsg{ev: ev}) })
				default:
					return
				}
			}
			return
		}
		if p.e.nextDelay() <= 0 || s.rng.Intn(10) == 0 {
			s.run(p, func() { p.e.round(context.Background()) })
		}
	case r < 950: // pause or resume
		if p := s.pick(live, func(*simProc) bool { return true }); p != nil {
			p.paused = !p.paused
			s.logf("p%d paused=%v", p.n, p.paused)
		}
	case r < 970: // a watch breaks or comes back
		p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused })
		if p == nil {
			return
		}
		if p.w != nil {
			s.logf("p%d watch breaks", p.n)
			s.stopWatch(p)
		} else {
			s.logf("p%d watch starts", p.n)
			s.startWatch(p)
		}
	case r < 985: // a crash, and a new process in its place
		if p := s.pick(live, func(*simProc) bool { return true }); p != nil {
			p.done, p.crashed = true, true
			if p.w != nil {
				p.w.Stop()
			}
			s.logf("p%d crashes", p.n)
			s.spawn()
		}
	case r < 990: // a graceful shutdown
		if p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused && p.e.Token().Valid }); p != nil {
			p.done = true
			if p.w != nil {
				p.w.Stop()
			}
			s.logf("p%d releases", p.n)
			s.run(p, func() { _ = p.e.Release(context.Background()) })
			s.spawn()
		}
	}
}

// check asserts the safety properties at the current instant.
func (s *sim) check() {
	var valid []*simProc
	for _, p := range s.procs {
		if p.e.Token().Valid {
			valid = append(valid, p)
		}
	}
	if len(valid) > 1 {
		var who []string
		for _, p := range valid {
			who = append(who, fmt.Sprintf("p%d epoch %d", p.n, p.e.Token().Epoch))
		}
		s.fail("two valid tokens at once: %s", strings.Join(who, ", "))
	}
	if len(valid) == 1 && valid[0] != s.valid {
		if s.valid != nil && valid[0].e.Token().Epoch <= s.valid.epoch {
			s.fail("p%d became valid with epoch %d after p%d with epoch %d", valid[0].n, valid[0].e.Token().Epoch, s.valid.n, s.valid.epoch)
		}
		s.valid = valid[0]
	}
}

func (s *sim) close() {
	for _, p := range s.procs {
		for p.op != nil {
			s.answer(p, simResult{err: context.Canceled})
		}
		close(p.cmds)
		if p.w != nil {
			p.w.Stop()
		}
	}
}

func simulate(t *testing.T, seed int64) (acquired int) {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), clk: clocktesting.NewFakeClock(t0),
		mem: NewMemoryStore(), ops: make(chan *simOp), owner: map[uint64]*simProc{}}
	defer s.close()
	for i := 0; i < simProcs; i++ {
		s.spawn()
	}
	for i := 0; i < simSteps && !s.failed; i++ {
		s.step()
		s.check()
	}
	return s.acquired
}

func TestRandomizedSimulation(t *testing.T) {
	seeds := []int64{}
	if v := os.Getenv("EHDB_SIM_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("EHDB_SIM_SEED=%q", v)
		}
		seeds = append(seeds, n)
	} else {
		count := 60
		if testing.Short() {
			count = 10
		}
		if v := os.Getenv("EHDB_SIM_SEEDS"); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				count = n
			}
		}
		base := time.Now().UnixNano()
		for i := 0; i < count; i++ {
			seeds = append(seeds, base+int64(i))
		}
	}
	total := 0
	for _, seed := range seeds {
		total += simulate(t, seed)
		if t.Failed() {
			return
		}
	}
	// Liveness, loosely: the election must actually elect, or the safety checks prove nothing.
	if total < 2*len(seeds) {
		t.Fatalf("%d acquisitions in %d runs: the simulation hardly elects anyone", total, len(seeds))
	}
	t.Logf("%d runs of %d steps, %d acquisitions", len(seeds), simSteps, total)
}
