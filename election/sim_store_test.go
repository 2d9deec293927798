package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// simStore is one process's view of the store: every call is handed to the simulation, which
// decides when (and whether) it reaches the store and when (and whether) its answer comes back.
type simStore struct {
	s *sim
	p *simProc
}

func (st simStore) do(ctx context.Context, what string, req *coordinationv1.Lease, f func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	// Runs on one of the process's goroutines, which owns its election's state for now.
	s, p := st.s, st.p
	if p.crashed {
		return nil, fmt.Errorf("%s: the process is dead", what)
	}
	s.noteAbsence(p)
	s.mu.Lock()
	watchFrom := p.watchFrom // the watch goroutine sets it
	underStream := p.watchSeq > 0 && p.shownSeq > p.watchSeq
	delivered := p.watchSeq > 0 && p.deliveredSeq > p.watchSeq
	moment := s.moments
	s.mu.Unlock()
	op := &simOp{p: p, what: what, issued: s.clk.Now(), req: req, apply: f, resp: make(chan simResult, 1),
		blind: what == "create" && !p.e.d.everSeen, timerFrom: p.absentTrue, watchFrom: watchFrom,
		sawN: len(p.sawList), handled: p.e.watchEvents.Load(), waited: p.e.believed(p.e.d.rec), shownUnderStream: underStream, deliveredUnderStream: delivered, moment: moment}
	switch {
	case what == "create":
		op.waited = p.e.d.absentWait
	case holderOf(p.e.d.rec) == "":
		op.waited = 0 // a release is taken at once
	}
	if snap := p.e.state.Load(); what != "get" && snap.sent && p.e.fresh(p.clk.Now(), snap.lastSend, snap.lastBoot) {
		// Its last holding has not lapsed (it may have been dropped just now, on the news this
		// write acts on).
		op.prev = p.holdings[snap.epoch]
		// Fresh only because its clocks stood still (vm-freeze): what it does on the strength
		// of that holding carries that holding's excuse.
		op.frozeHeld = p.clk.frozeSince(p.lastSend) && float64(s.clk.Now().Sub(p.lastSend))*p.clk.rate >= float64(p.e.validFor)
	}
	if what == "update" && op.prev == nil && holderOf(req) == p.e.identity {
		// A write over the record its own holding last wrote (a renewal that came after its
		// token lapsed, taken at once as a new holding): no one else wrote in between.
		if h := s.rvHolding[req.ResourceVersion]; h != nil && h.op.p == p {
			op.prev = h
		}
	}
	if !s.loop {
		s.ops <- op
		r := <-op.resp
		return r.l, r.err
	}
	s.mu.Lock()
	p.op = op
	s.mu.Unlock()
	select {
	case r := <-op.resp:
		return r.l, r.err
	case <-ctx.Done():
		s.mu.Lock()
		op.gone = true
		if p.op == op {
			p.op = nil
		}
		if !op.applied {
			s.orphans = append(s.orphans, op)
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

func (st simStore) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return st.do(ctx, "get", nil, func() (*coordinationv1.Lease, error) { return st.s.mem.Get(context.Background(), name) })
}

func (st simStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return st.do(ctx, "create", l, func() (*coordinationv1.Lease, error) { return st.s.mem.Create(context.Background(), l) })
}

func (st simStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return st.do(ctx, "update", l, func() (*coordinationv1.Lease, error) { return st.s.mem.Update(context.Background(), l) })
}

// Watch (loop mode: watchLoop calls it) opens a stream whose events the scheduler hands over one
// at a time. In step mode the simulation runs the watches itself and this is never called.
func (st simStore) Watch(ctx context.Context, name string) (watch.Interface, error) {
	s, p := st.s, st.p
	if !s.loop {
		return nil, errors.New("step mode: the simulation runs the watches")
	}
	if p.watchDown || p.crashed {
		return nil, apierrors.NewServiceUnavailable("the watch cache is not ready")
	}
	inner, err := s.mem.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	sw := &simWatch{s: s, p: p, inner: inner, ch: make(chan watch.Event)}
	s.mu.Lock()
	p.sw, p.watchFrom, p.watchSeq = sw, s.clk.Now(), s.moment()
	s.mu.Unlock()
	return sw, nil
}

// simWatch is a watch stream the loop scheduler feeds: it takes the store's events from inner and
// hands each to the watch goroutine only when that goroutine is blocked receiving.
type simWatch struct {
	s       *sim
	p       *simProc
	inner   watch.Interface
	ch      chan watch.Event
	once    sync.Once
	stopped atomic.Bool
	next    *watch.Event // taken from inner (or an old event to replay), not yet handed over
}

func (w *simWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *simWatch) Stop() {
	w.stopped.Store(true)
	w.inner.Stop()
	w.once.Do(func() { close(w.ch) })
	w.s.mu.Lock()
	if w.p.sw == w {
		w.p.sw, w.p.watchFrom, w.p.watchSeq = nil, time.Time{}, 0
	}
	w.s.mu.Unlock()
}

// sawUID says whether p had been shown incarnation uid when it sent op: by an answer, or by a
// watch event its driver had handled.
func (op *simOp) sawUID(uid types.UID) bool {
	p := op.p
	return slices.Contains(p.sawList[:op.sawN], uid) || slices.Contains(p.delivered[:min(int(op.handled), len(p.delivered))], uid)
}

func (s *sim) noteSeen(p *simProc, l *coordinationv1.Lease) {
	if l != nil && !slices.Contains(p.sawList, l.UID) {
		p.sawList = append(p.sawList, l.UID)
	}
	if l != nil {
		s.mu.Lock()
		p.newestRV = max(p.newestRV, rvNumber(l))
		p.shownSeq = s.moment()
		s.showHolding(p, l)
		s.mu.Unlock()
	}
}

func (s *sim) noteDelivered(p *simProc, ev watch.Event) {
	if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Error && ev.Type != watch.Bookmark {
		p.delivered = append(p.delivered, l.UID)
		s.mu.Lock()
		p.deliveredSeq = s.moment()
		p.newestRV = max(p.newestRV, rvNumber(l))
		if ev.Type != watch.Deleted {
			p.shownSeq = s.moment()
		}
		s.showHolding(p, l)
		s.mu.Unlock()
	}
}

// answerOne ends one call in flight, in either mode (answer delivers it): a call its process has
// waited on for longer than its per-call timeout times out (if the store has not applied it yet,
// it stays in flight as an orphan and may still land); an applied one gets its answer. It returns
// the process whose applied call was answered, or nil.
func (s *sim) answerOne(answer func(*simProc, simResult)) *simProc {
	p := s.pick(s.procs, func(p *simProc) bool { return p.op != nil && !p.paused && !p.crashed })
	if p == nil {
		return nil
	}
	return s.endCall(p, answer)
}

// endCall is answerOne for p's call.
func (s *sim) endCall(p *simProc, answer func(*simProc, simResult)) *simProc {
	op := p.op
	if s.clk.Since(op.issued) > p.e.callTimeout {
		if !op.applied {
			s.orphans = append(s.orphans, op)
		}
		s.logf("p%d %s times out", p.n, op.what)
		answer(p, simResult{err: fmt.Errorf("%s: %w", op.what, context.DeadlineExceeded)})
		return nil
	}
	if !op.applied {
		return nil
	}
	answer(p, op.res)
	return p
}

// moment numbers what the processes are shown and when their watches begin, in order (the true
// clock may not move between two steps). Callers hold s.mu where process goroutines run.
func (s *sim) moment() int {
	s.moments++
	return s.moments
}

// showHolding notes that p was shown a record of the holding l carries (its incarnation, holder
// and epoch), first at this moment: from then on p knows that holding's duration.
func (s *sim) showHolding(p *simProc, l *coordinationv1.Lease) {
	k := holdingKey{l.UID, holderOf(l), epochOf(l)}
	if _, ok := p.shownHoldings[k]; !ok {
		p.shownHoldings[k] = s.moment()
	}
}

type holdingKey struct {
	uid    types.UID
	holder string
	epoch  uint64
}

// sawHolding says whether p had been shown a record of holding h when it sent op.
func (op *simOp) sawHolding(h *simHolding) bool {
	m, ok := op.p.shownHoldings[holdingKey{h.uid, h.op.p.e.identity, h.epoch}]
	return ok && m <= op.moment
}

// oldEvent picks a change of the Lease to show p again: one no newer than the newest it was shown,
// as a stream resumed after a reconnect may repeat (a duplicate, or an older one out of order).
// A live stream never brings a change from before it began that the process had not seen — it
// would carry every change after it too — so none is shown to a process that has seen none.
func (s *sim) oldEvent(p *simProc) (watch.Event, bool) {
	s.mu.Lock()
	newest := p.newestRV
	s.mu.Unlock()
	var old []watch.Event
	for _, ev := range s.history {
		if rvNumber(ev.Object.(*coordinationv1.Lease)) <= newest {
			old = append(old, ev)
		}
	}
	if len(old) == 0 {
		return watch.Event{}, false
	}
	return old[s.rng.Intn(len(old))], true
}

func rvNumber(l *coordinationv1.Lease) uint64 {
	n, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	return n
}
