package election

import (
	"context"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// Loop mode: each process runs the real driver — Election.run with its watchLoop goroutine, the
// events buffer, Release's cancel-and-wait (from a goroutine of its own, or from OnEvent) — inside
// a synctest bubble. The scheduler (the test's goroutine) acts only when every goroutine of the run
// is durably blocked (synctest.Wait): on a store call (simStore), on the watch stream (simWatch), on
// a timer (simClock's timers, which fire only when the scheduler fires them), on the events
// buffer, on Release waiting for the driver. Each step does one thing — an answer, a request
// reaching the store, one watch event handed to one watch goroutine, one due timer fired, a fault
// — and then waits for quiescence again, so that at most one process runs between two steps and a
// seed replays exactly.
//
// What it can explore: every order of answers, requests, events and timer firings that the
// processes' own blocking points allow, timers firing late (a loaded machine) or at the exact
// instant they are due, the events buffer filling while the driver waits on a call, watches ending
// and restarting with their real back-off, Release racing the driver's round, and Release called
// from OnEvent. What it cannot: preemption inside a step (between two instructions of one
// goroutine, or the driver and its watch goroutine running truly in parallel — the race detector,
// `make test`'s -race run, covers those data races, not their interleavings), and the Go
// runtime's own choice between two ready cases of a select (a step makes only one ready).
//
// The bubble's own clock never moves (the scheduler never sleeps): the election reads only its
// simClock, and its call timeouts are the scheduler's to decide, as in step mode.

func (s *sim) startLoop(p *simProc) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.e.done, p.e.cancel = make(chan struct{}), cancel
	p.e.active.Store(true)
	go p.e.run(ctx)
	s.quiesce()
}

// quiesce waits until every goroutine of the run is blocked, then checks the safety properties.
func (s *sim) quiesce() {
	s.quiesced = true
	synctest.Wait()
	s.syncAfterWait()
	for _, p := range s.live() {
		s.noteAbsence(p)
	}
	s.check()
}

func (s *sim) loopStep() {
	s.steps++
	s.quiesced = false
	defer s.record()
	live := s.live()
	r := -1
	if !s.storyStep() {
		r = s.rng.Intn(1000)
	}
	switch {
	case r < 0: // a storyline's beat took the step
	case r < 250: // time passes
		d := time.Duration(s.rng.Int63n(int64(s.tick)))
		switch s.rng.Intn(20) {
		case 0:
			d = time.Duration(s.rng.Int63n(int64(2 * s.maxLease)))
		case 1, 2, 3, 4, 5, 6: // to the instant the first timer is due
			if at, ok := s.nextDue(); ok && at.Sub(s.clk.Now()) < 2*s.maxLease {
				d = at.Sub(s.clk.Now())
			}
		}
		s.clk.Step(d)
	case r < 450:
		s.reachStore()
	case r < 700:
		s.answerOne(s.answerLoop)
	case r < 930: // one watch event reaches one watch goroutine
		if p := s.pick(live, func(p *simProc) bool { return p.sw != nil && !p.paused && !s.lagging(p) }); p != nil {
			s.deliver(p)
		}
	case r < 945:
		if p := s.pick(live, func(p *simProc) bool { return !p.clk.isSuspended() && !p.clk.isFrozen() }); p != nil {
			p.paused = !p.paused
			s.logf("p%d paused=%v", p.n, p.paused)
		}
	case r < 955:
		s.clockFault(live)
	case r < 970: // a watch ends (closed, or with an error event); new ones may be refused for a while
		p := s.pick(live, func(p *simProc) bool { return !p.paused })
		if p == nil {
			break
		}
		p.watchDown = s.rng.Intn(2) == 0
		if sw := p.sw; sw != nil {
			if s.rng.Intn(2) == 0 && sw.next == nil {
				sw.next = &watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus}
				s.logf("p%d watch ends with an error event (new watches refused %v)", p.n, p.watchDown)
				s.deliver(p)
			} else {
				s.logf("p%d watch breaks (new watches refused %v)", p.n, p.watchDown)
				sw.Stop()
			}
		}
	case r < 975: // an old event shown again
		p := s.pick(live, func(p *simProc) bool { return p.sw != nil && p.sw.next == nil && !p.paused })
		if p == nil {
			break
		}
		ev, ok := s.oldEvent(p)
		if !ok {
			break
		}
		s.faults["replay"]++
		s.logf("p%d is shown an old %s (rv %s)", p.n, ev.Type, ev.Object.(*coordinationv1.Lease).ResourceVersion)
		p.sw.next = &ev
		s.deliver(p)
	case r < 983:
		if p := s.pick(live, func(*simProc) bool { return true }); p != nil {
			s.crash(p)
		}
	case r < 990: // a graceful shutdown from any state: Release waits for the driver to stop
		if p := s.pick(live, func(p *simProc) bool { return !p.paused }); p != nil {
			s.releaseLoop(p)
		}
	default:
		s.outsideFault()
	}
	if !s.quiesced {
		s.quiesce()
	}
	s.fireDue()
	for _, p := range s.procs {
		if p.done && !p.replaced && !s.failed {
			p.replaced = true
			s.spawn()
		}
	}
}

// releaseLoop shuts p down gracefully: Release, from a goroutine of its own, waits for the driver
// to stop (the step's end spawns the process that takes its place).
func (s *sim) releaseLoop(p *simProc) {
	p.done, p.releasing = true, true
	s.faults["release (valid token)"] += map[bool]int{true: 1}[p.e.Token().Valid]
	s.faults["release (no valid token)"] += map[bool]int{false: 1}[p.e.Token().Valid]
	s.logf("p%d releases (valid %v)", p.n, p.e.Token().Valid)
	go func() { _ = p.e.Release(context.Background()) }()
}

func (s *sim) answerLoop(p *simProc, r simResult) {
	op := p.op
	p.op = nil
	s.shown(p, op, r)
	op.resp <- r
	s.quiesce()
}

// deliver hands p's watch goroutine its next event, if it is receiving; it reports whether it did.
func (s *sim) deliver(p *simProc) bool {
	sw := p.sw
	if sw == nil || sw.stopped.Load() {
		return false
	}
	if sw.next == nil {
		select {
		case ev, ok := <-sw.inner.ResultChan():
			if !ok { // the store ended it (a watcher too slow to keep up)
				s.logf("p%d watch ended by the store", p.n)
				sw.Stop()
				s.quiesce()
				return true
			}
			sw.next = &ev
		default:
			return false
		}
	}
	select {
	case sw.ch <- *sw.next:
		s.noteDelivered(p, *sw.next)
		sw.next = nil
		s.quiesce()
		return true
	default:
		return false // the watch goroutine is waiting on the driver (the events buffer is full)
	}
}

// nextDue is the true time the first timer of a running process is due.
func (s *sim) nextDue() (time.Time, bool) {
	var best time.Time
	found := false
	for _, p := range s.live() {
		if p.paused {
			continue
		}
		if _, at, ok := p.clk.nextTimer(); ok && (!found || at.Before(best)) {
			best, found = at, true
		}
	}
	return best, found
}

// fireDue fires the timers that are due, one at a time, each followed by quiescence; it reports
// whether it fired any.
func (s *sim) fireDue() bool {
	fired := false
	for !s.failed {
		var first *simTimer
		var owner *simProc
		var at time.Time
		for _, p := range s.live() {
			if p.paused {
				continue
			}
			if t, due, ok := p.clk.nextTimer(); ok && !due.After(s.clk.Now()) && (first == nil || due.Before(at)) {
				first, at, owner = t, due, p
			}
		}
		if first == nil || !first.fire() {
			return fired
		}
		owner.wakes++
		fired = true
		s.quiesce()
	}
	return fired
}

// settleLoop answers every call and hands over every event until nothing is left to do.
func (s *sim) settleLoop() bool {
	any := false
	for progress := true; progress && !s.failed; {
		progress = false
		for _, p := range s.procs {
			if p.op != nil && !p.crashed {
				if !p.op.applied {
					s.applyOp(p.op)
				}
				s.answerLoop(p, p.op.res)
				progress = true
			}
		}
		for _, p := range s.live() {
			for s.deliver(p) {
				progress = true
			}
		}
		if s.fireDue() {
			progress = true
		}
		any = any || progress
	}
	return any
}

// quietLoopStep: everything that can happen now happens, then time moves to the next timer (at
// most a second, at most to end).
func (s *sim) quietLoopStep(end time.Time) {
	s.settleLoop()
	d := time.Second
	if at, ok := s.nextDue(); ok {
		d = min(d, max(at.Sub(s.clk.Now()), 0))
	}
	s.clk.Step(min(d, end.Sub(s.clk.Now())))
	s.steps++
	s.fireDue()
	for _, p := range s.procs {
		if p.done && !p.replaced {
			p.replaced = true
			s.spawn()
		}
	}
}

func (s *sim) closeLoop() {
	for _, p := range s.procs {
		p.crashed = true
		if p.cancel != nil {
			p.cancel()
		}
	}
	synctest.Wait()
	s.syncAfterWait()
	for again := true; again; {
		again = false
		for _, p := range s.procs {
			if p.op != nil {
				op := p.op
				p.op = nil
				op.resp <- simResult{err: context.Canceled}
				again = true
			}
		}
		synctest.Wait()
		s.syncAfterWait()
	}
	for _, p := range s.procs {
		if p.sw != nil {
			p.sw.Stop()
		}
	}
}

// syncAfterWait orders, for the race detector, what the blocked goroutines did before they
// blocked before what the scheduler reads next: each blocks right after a section under s.mu (a
// store call) or under its clock's mutex (arming the timer it then waits on); taking both here
// makes those writes happen before. (synctest.Wait itself is no such edge for the race detector.)
func (s *sim) syncAfterWait() {
	s.mu.Lock()
	s.mu.Unlock() //nolint:staticcheck // an empty critical section: the edge is the point
	for _, p := range s.procs {
		p.clk.mu.Lock()
		p.clk.mu.Unlock() //nolint:staticcheck
	}
}
