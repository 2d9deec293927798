//go:build !linux

package election

import "time"

// bootClock falls back to the wall clock, which also keeps counting through a suspend (it may be
// stepped, which can only shorten a token's validity, never lengthen it past the monotonic check).
func bootClock() time.Duration { return time.Duration(time.Now().UnixNano()) }
