//go:build !linux

package election

import "time"

// bootClock is the wall clock where CLOCK_BOOTTIME does not exist: it counts through a suspend,
// but a step back after one (NTP correcting a clock that ran ahead) shortens what it counted.
func bootClock(now time.Time) time.Duration { return time.Duration(now.UnixNano()) }
