package election

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME: monotonic, not stepped by NTP, and counting time spent in
// suspend, which Go's monotonic clock (CLOCK_MONOTONIC) does not.
func bootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Not expected on Linux >= 2.6.39; the wall clock also counts a suspend.
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
