package election

import (
	"math"
	"sync"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// simClock is one process's clocks against the simulation's true clock, as the production clock
// path reads them: Now and Since are the monotonic reading (what time.Time.Sub uses), and wall is
// what the election's suspend check reads through e.boot (in production the wall part of the same
// time.Now reading). Both count at the process's rate from an offset; the monotonic clock stops
// while the host is suspended, both stop while the VM is frozen (KVM with kvmclock), and the wall
// clock alone is stepped (NTP, forward and back) and slewed. The renewTime a process writes comes
// from Now, the monotonic-based reading: candidates only compare renewTimes with their own Now,
// so what matters, the offsets between writers and readers, is kept.
//
// NewTimer gives timers on the monotonic clock, for the simulation that runs the real driver
// loop: the scheduler fires them, one at a time, when the monotonic clock reaches them.
type simClock struct {
	clock.Clock // the methods the election does not use
	tc          *clocktesting.FakeClock

	mu     sync.Mutex
	origin time.Time
	offset time.Duration
	rate   float64 // of both clocks, against the true clock
	slew   float64 // the wall clock's rate on top of rate (NTP slewing), kept within the margin
	// Piecewise linear: at true time base the monotonic reading was monoBase and the wall wallBase.
	base      time.Time
	monoBase  time.Duration
	wallBase  time.Time
	suspended bool // the monotonic clock stands still
	frozen    bool // both clocks stand still
	// freezes are the true intervals the clocks stood still as a whole (end zero: still frozen).
	freezes [][2]time.Time
	// suspends likewise, for the monotonic clock alone.
	suspends [][2]time.Time
	timers   map[*simTimer]struct{}
	armed    uint64
}

func newSimClock(tc *clocktesting.FakeClock, offset time.Duration, rate float64) *simClock {
	now := tc.Now()
	return &simClock{Clock: tc, tc: tc, origin: now, offset: offset, rate: rate, slew: 1,
		base: now, wallBase: now.Add(offset), timers: map[*simTimer]struct{}{}}
}

func (c *simClock) monoLocked(now time.Time) time.Duration {
	if c.suspended || c.frozen {
		return c.monoBase
	}
	return c.monoBase + time.Duration(float64(now.Sub(c.base))*c.rate)
}

func (c *simClock) wallRateLocked() float64 {
	return min(max(c.rate*c.slew, 1-MaxClockRateDifference/2), 1+MaxClockRateDifference/2)
}

func (c *simClock) wallLocked(now time.Time) time.Time {
	if c.frozen {
		return c.wallBase
	}
	return c.wallBase.Add(time.Duration(float64(now.Sub(c.base)) * c.wallRateLocked()))
}

// rebaseLocked starts a new linear piece at the true now, before a change of state or rate.
func (c *simClock) rebaseLocked() {
	now := c.tc.Now()
	c.monoBase, c.wallBase, c.base = c.monoLocked(now), c.wallLocked(now), now
}

func (c *simClock) mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monoLocked(c.tc.Now())
}

func (c *simClock) Now() time.Time                  { return c.origin.Add(c.offset + c.mono()) }
func (c *simClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// wall is the process's wall clock now.
func (c *simClock) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallLocked(c.tc.Now())
}

// bootReading is e.boot as production computes it: the wall clock's nanoseconds.
func (c *simClock) bootReading() time.Duration { return time.Duration(c.wall().UnixNano()) }

func (c *simClock) setSuspended(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebaseLocked()
	if on && !c.suspended {
		c.suspends = append(c.suspends, [2]time.Time{c.base, {}})
	} else if !on && c.suspended {
		c.suspends[len(c.suspends)-1][1] = c.base
	}
	c.suspended = on
}

func (c *simClock) setFrozen(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebaseLocked()
	if on && !c.frozen {
		c.freezes = append(c.freezes, [2]time.Time{c.base, {}})
	} else if !on && c.frozen {
		c.freezes[len(c.freezes)-1][1] = c.base
	}
	c.frozen = on
}

func (c *simClock) stepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebaseLocked()
	c.wallBase = c.wallBase.Add(d)
}

func (c *simClock) setSlew(f float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebaseLocked()
	c.slew = f
}

func (c *simClock) isSuspended() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.suspended }
func (c *simClock) isFrozen() bool    { c.mu.Lock(); defer c.mu.Unlock(); return c.frozen }

// frozeSince says whether the clocks stood still as a whole at some point after t (true time).
func (c *simClock) frozeSince(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return within(c.freezes, t)
}

// suspendedSince says whether the monotonic clock stood still at some point after t (true time).
func (c *simClock) suspendedSince(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return within(c.suspends, t)
}

func within(intervals [][2]time.Time, t time.Time) bool {
	for _, f := range intervals {
		if f[1].IsZero() || f[1].After(t) {
			return true
		}
	}
	return false
}

// simTimer is a timer on a simClock's monotonic reading; the loop scheduler fires it.
type simTimer struct {
	c  *simClock
	ch chan time.Time
	at time.Duration // monotonic reading it fires at
	n  uint64        // arming order: timers due at the same reading fire in it
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (t *simTimer) C() <-chan time.Time { return t.ch }

func (t *simTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}

func (t *simTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	t.at = t.c.monoLocked(t.c.tc.Now()) + max(d, 0)
	t.c.armed++
	t.n = t.c.armed
	t.c.timers[t] = struct{}{}
	return ok
}

// nextTimer is the armed timer that fires first and the true time it fires at (ok false: none,
// or the monotonic clock stands still).
func (c *simClock) nextTimer() (*simTimer, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.suspended || c.frozen || len(c.timers) == 0 {
		return nil, time.Time{}, false
	}
	var first *simTimer
	for t := range c.timers {
		if first == nil || t.at < first.at || (t.at == first.at && t.n < first.n) {
			first = t
		}
	}
	wait := float64(first.at-c.monoBase) / c.rate
	at := c.base.Add(time.Duration(math.Ceil(wait)) + time.Nanosecond)
	if now := c.tc.Now(); at.Before(now) {
		at = now
	}
	return first, at, true
}

// fire delivers the timer if its reading has come; it reports whether it did.
func (t *simTimer) fire() bool {
	t.c.mu.Lock()
	if _, ok := t.c.timers[t]; !ok || t.c.monoLocked(t.c.tc.Now()) < t.at {
		t.c.mu.Unlock()
		return false
	}
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	select {
	case t.ch <- t.c.Now():
	default:
	}
	return true
}
