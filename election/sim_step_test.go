package election

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Step mode: the simulation calls the decision functions (round, handle, Release) itself, on the
// process's goroutine, and decides the rest — when a round runs, which watch event is handled,
// when a request or an answer travels. It reaches what the real loop would not do on its own
// (a round at any instant, a replayed event at any point); the loop mode (sim_loop_test.go) runs
// the real loop.

func (s *sim) startStep(p *simProc) {
	p.cmds, p.idle = make(chan func()), make(chan struct{})
	done := make(chan struct{})
	close(done)
	p.e.done, p.e.cancel = done, func() {}
	go func() {
		for f := range p.cmds {
			f()
			p.idle <- struct{}{}
		}
	}()
	if s.rng.Intn(4) != 0 {
		s.startWatch(p)
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
		s.noteAbsence(p)
		p.op = op
	case <-p.idle:
		s.noteAbsence(p)
		p.op = nil
	}
	s.check()
}

func (s *sim) answer(p *simProc, r simResult) {
	op := p.op
	p.op = nil
	s.shown(p, op, r)
	op.resp <- r
	s.await(p)
}

func (s *sim) startWatch(p *simProc) {
	w, err := s.mem.Watch(context.Background(), testLease)
	if err != nil {
		s.t.Fatal(err)
	}
	p.w, p.watchFrom, p.watchSeq = w, s.clk.Now(), s.moment()
	s.run(p, func() { p.e.handle(watchMsg{started: true}) })
}

func (s *sim) stopWatch(p *simProc) {
	p.w.Stop()
	p.w, p.watchFrom, p.watchSeq = nil, time.Time{}, 0
	s.run(p, func() { p.e.handle(watchMsg{ended: true}) })
}

// handleEvent hands p one watch event.
func (s *sim) handleEvent(p *simProc, ev watch.Event) {
	s.noteDelivered(p, ev)
	s.run(p, func() { p.e.handle(watchMsg{ev: ev}) })
}

func (s *sim) step() {
	s.steps++
	defer s.record()
	live := s.live()
	r := -1
	if !s.storyStep() {
		r = s.rng.Intn(1000)
	}
	switch {
	case r < 0: // a storyline's beat took the step
	case r < 250: // time passes
		s.passTime(live)
	case r < 450: // a request reaches the store
		s.reachStore()
	case r < 700: // an answer reaches its process, or its call times out
		if p := s.answerOne(s.answer); p != nil {
			if s.tight && p.e.Token().Valid && s.rng.Intn(4) == 0 {
				// The holder dies right after a successful write, and the others hear of that
				// write at once: the candidates' wait starts at the holder's send, the tightest
				// case for the clock-rate margin.
				s.crash(p)
				s.deliverAll()
			}
		}
	case r < 930: // an idle process runs a round or handles watch events
		p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused })
		if p == nil {
			return
		}
		if p.w != nil && s.rng.Intn(2) == 0 && !s.lagging(p) {
			for k := s.rng.Intn(3) + 1; k > 0; k-- {
				ev, ok := s.nextEvent(p)
				if !ok {
					return
				}
				s.handleEvent(p, ev)
			}
			return
		}
		if p.e.nextDelay() <= 0 || s.rng.Intn(10) == 0 {
			s.run(p, func() { p.e.round(context.Background()) })
		}
	case r < 945: // pause or resume
		p := s.pick(live, func(p *simProc) bool { return !p.clk.isSuspended() && !p.clk.isFrozen() })
		if q := s.pick(live, s.pausable); q != nil && s.rng.Intn(2) == 0 {
			p = q
		}
		if p != nil {
			p.paused = !p.paused
			s.logf("p%d paused=%v", p.n, p.paused)
		}
	case r < 955: // the clocks: suspend, freeze, wall steps and slews
		s.clockFault(live)
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
	case r < 975: // an old event shown again (a replay across a reconnect, out of order)
		p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused })
		if p == nil {
			return
		}
		ev, ok := s.oldEvent(p)
		if !ok {
			return
		}
		s.faults["replay"]++
		s.logf("p%d is shown an old %s (rv %s)", p.n, ev.Type, ev.Object.(*coordinationv1.Lease).ResourceVersion)
		s.handleEvent(p, ev)
	case r < 983: // a crash, and a new process in its place
		if p := s.pick(live, func(*simProc) bool { return true }); p != nil {
			s.crash(p)
		}
	case r < 990: // a graceful shutdown, from any state
		p := s.pick(live, func(p *simProc) bool { return p.op == nil && !p.paused })
		if q := s.pick(live, s.namedNotHolding); q != nil && s.rng.Intn(2) == 0 {
			p = q
		}
		if p != nil {
			s.releaseStep(p)
		}
	default:
		s.outsideFault()
	}
}

// releaseStep shuts p down gracefully (p is idle and running), and a new process takes its place.
func (s *sim) releaseStep(p *simProc) {
	p.done = true
	if p.w != nil {
		p.w.Stop()
		p.w, p.watchFrom, p.watchSeq = nil, time.Time{}, 0
	}
	s.faults["release (valid token)"] += map[bool]int{true: 1}[p.e.Token().Valid]
	s.faults["release (no valid token)"] += map[bool]int{false: 1}[p.e.Token().Valid]
	s.logf("p%d releases (valid %v)", p.n, p.e.Token().Valid)
	// Release's own calls travel like any other (later steps answer them).
	s.run(p, func() { _ = p.e.Release(context.Background()) })
	p.replaced = true
	s.spawn()
}

// passTime moves the true clock: a little, a lot, or to the instant the first driver would wake.
func (s *sim) passTime(live []*simProc) {
	d := time.Duration(s.rng.Int63n(int64(s.tick)))
	switch s.rng.Intn(20) {
	case 0:
		d = time.Duration(s.rng.Int63n(int64(2 * s.maxLease)))
	case 1, 2, 3, 4, 5, 6:
		// To the instant the first driver would wake (a real driver's timer fires there):
		// boundaries are where an off-by-a-little in the rules shows.
		if w, ok := s.nextWake(live); ok {
			d = w
		}
	}
	s.clk.Step(d)
}

// reachStore lets one request in flight (waited on, or orphaned by a timeout) reach the store.
func (s *sim) reachStore() {
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
}

func (s *sim) crash(p *simProc) {
	p.done, p.crashed = true, true
	// A frozen or suspended host killed: its clocks run on, so its last token lapses (nothing of
	// it would ever read it again, but the check keeps reading every token).
	p.clk.setFrozen(false)
	p.clk.setSuspended(false)
	if p.w != nil {
		p.w.Stop()
		p.w, p.watchFrom, p.watchSeq = nil, time.Time{}, 0
	}
	if p.sw != nil {
		p.sw.Stop()
	}
	if p.cancel != nil {
		p.cancel()
	}
	s.logf("p%d crashes", p.n)
	p.replaced = true
	if s.loop {
		s.quiesce()
	}
	s.spawn()
}

// deliverAll lets every idle, running process with a watch handle its pending events now.
func (s *sim) deliverAll() {
	for _, p := range s.live() {
		for p.op == nil && !p.paused && p.w != nil && !s.lagging(p) {
			ev, ok := s.nextEvent(p)
			if !ok {
				break
			}
			s.handleEvent(p, ev)
		}
	}
}

// nextWake is the true time until the earliest live, running process's driver would wake.
func (s *sim) nextWake(live []*simProc) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, p := range live {
		if p.paused || p.op != nil {
			continue
		}
		if d := time.Duration(float64(p.e.nextDelay())/p.clk.rate) + time.Nanosecond; d > 0 && (!found || d < best) {
			best, found = d, true
		}
	}
	return best, found && best < 2*s.maxLease
}

// nextEvent takes one pending watch event of p, if any; a closed stream ends p's watch.
func (s *sim) nextEvent(p *simProc) (watch.Event, bool) {
	select {
	case ev, ok := <-p.w.ResultChan():
		if !ok {
			p.w, p.watchFrom, p.watchSeq = nil, time.Time{}, 0
			s.run(p, func() { p.e.handle(watchMsg{ended: true}) })
			return watch.Event{}, false
		}
		return ev, true
	default:
		return watch.Event{}, false
	}
}

// settleStep answers every request in flight (live processes only), at once and without failure.
func (s *sim) settleStep() {
	for again := true; again; {
		again = false
		for _, p := range s.procs {
			if p.op != nil && !p.crashed {
				if !p.op.applied {
					s.applyOp(p.op)
				}
				s.answer(p, p.op.res)
				again = true
			}
		}
	}
}

// quietStep is one quiet-phase step of step mode: every process handles its events and runs the
// rounds its driver would.
func (s *sim) quietStep() {
	for _, p := range s.live() {
		for p.w != nil {
			ev, ok := s.nextEvent(p)
			if !ok {
				break
			}
			s.handleEvent(p, ev)
			s.settleStep()
		}
		if p.e.nextDelay() <= 0 {
			p.wakes++
			s.run(p, func() { p.e.round(context.Background()) })
			s.settleStep()
		}
	}
}

func (s *sim) closeStep() {
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
