package main

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// skewedClock is the machine's clock as a node with a wrong clock would read it: off by offset and
// running at rate times real speed. It is a test-workload knob (--clock-offset, --clock-rate) that
// hands the election a node's clock, so the soak can run every writer on a clock of its own; the
// library knows nothing of it.
//
// From an anchor instant a (read once from the base clock), a real instant t reads as
//
//	local(t) = a + offset + rate·(t − a)
//
// on the wall and on the monotonic reading alike, so differences of two readings (Since, Sub) are
// scaled by rate and comparisons with a Lease's renewTime see the offset. Timers armed for a local
// duration d fire after d/rate of real time. Real maps a local reading back to the real instant,
// so the writer can state its validity intervals in the machine's time, where a checker compares
// them with other writers'.
type skewedClock struct {
	base   clock.WithDelayedExecution
	anchor time.Time // a base reading, with its monotonic reading
	offset time.Duration
	rate   float64
}

var _ clock.WithDelayedExecution = (*skewedClock)(nil)

func newSkewedClock(base clock.WithDelayedExecution, offset time.Duration, rate float64) (*skewedClock, error) {
	// A rate must keep time moving forward; the election's drift margin is the caller's business.
	if !(rate >= 0.5 && rate <= 2) {
		return nil, fmt.Errorf("clock rate %v: want a factor in [0.5, 2]", rate)
	}
	return &skewedClock{base: base, anchor: base.Now(), offset: offset, rate: rate}, nil
}

func (c *skewedClock) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.rate)
}

// toReal is the real duration a local duration d lasts (at least 0).
func (c *skewedClock) toReal(d time.Duration) time.Duration {
	return max(0, time.Duration(float64(d)/c.rate))
}

// local is the reading of this clock at the real instant t.
func (c *skewedClock) local(t time.Time) time.Time {
	return c.anchor.Add(c.offset + c.scale(t.Sub(c.anchor)))
}

// Real is the real instant at which this clock read t.
func (c *skewedClock) Real(t time.Time) time.Time {
	return c.anchor.Add(time.Duration(float64(t.Sub(c.anchor.Add(c.offset))) / c.rate))
}

func (c *skewedClock) Now() time.Time                  { return c.local(c.base.Now()) }
func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *skewedClock) Sleep(d time.Duration)           { c.base.Sleep(c.toReal(d)) }

func (c *skewedClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

func (c *skewedClock) NewTimer(d time.Duration) clock.Timer {
	t := &skewedTimer{ch: make(chan time.Time, 1), clock: c}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.due = c.base.Now().Add(c.toReal(d))
	t.t = c.base.AfterFunc(c.toReal(d), t.fire)
	return t
}

func (c *skewedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.base.AfterFunc(c.toReal(d), f)
}

// Tick delivers this clock's readings every local d, for as long as the process lives (as
// time.Tick does).
func (c *skewedClock) Tick(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	ch := make(chan time.Time, 1)
	var arm func(from time.Time)
	arm = func(from time.Time) {
		due := from.Add(c.toReal(d))
		c.base.AfterFunc(c.toReal(d), func() {
			select {
			case ch <- c.local(due):
			default: // a slow reader drops ticks, like time.Ticker
			}
			arm(due)
		})
	}
	arm(c.base.Now())
	return ch
}

// skewedTimer is a base AfterFunc that delivers this clock's reading at the due instant on a
// one-slot channel. (The callback does not read the base clock: a fake base runs it under its lock.)
type skewedTimer struct {
	mu    sync.Mutex
	t     clock.Timer
	due   time.Time // real instant the timer is armed for
	ch    chan time.Time
	clock *skewedClock
}

func (t *skewedTimer) fire() {
	t.mu.Lock()
	due := t.due
	t.mu.Unlock()
	select {
	case t.ch <- t.clock.local(due):
	default:
	}
}

func (t *skewedTimer) C() <-chan time.Time { return t.ch }
func (t *skewedTimer) Stop() bool          { return t.t.Stop() }
func (t *skewedTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.due = t.clock.base.Now().Add(t.clock.toReal(d))
	return t.t.Reset(t.clock.toReal(d))
}
