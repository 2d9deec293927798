package election

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME: the monotonic clock plus the time the host spent suspended. It
// is never stepped, so it is the reading the suspend check needs — the wall clock also counts
// through a suspend, but NTP may step it back afterwards (a clock that ran ahead), by as much as
// the suspend lasted. It is a system call (no vDSO path in x/sys): about 100–200 ns, paid on every
// Token; a fence's write costs far more than that.
func bootClock(time.Time) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return -1 // cannot happen on Linux ≥ 2.6.39; fresh takes it as "not fresh"
	}
	return time.Duration(ts.Nano())
}
