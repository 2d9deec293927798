package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The webhook's memory is the attacker's to fill up to its budgets (request bodies, ConfigMap
// keys, the bindings of a namespace a namespace admin makes as large as she likes), and a webhook
// killed for memory fails every Pod open until it restarts. Go's collector lets the heap grow to
// twice what is live before it runs, so garbage alone can take the process past its container's
// limit (the twenty-sixth red team's 16 RoleBindings of 14,000 subjects killed a copy under the
// chart's 128 MiB). So when GOMEMLIMIT is not set, the runtime's soft limit is set to nine tenths
// of the cgroup's memory limit, less what the kernel may hold for the admission connections
// (socketReserve): near it the collector runs as often as it must. The kernel's socket buffers
// are charged to the same cgroup (cgroup v2's memory.current counts them), and the runtime does
// not see them.

// cgroupMemoryFiles are where cgroup v2 and v1 give the container's memory limit.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// softMemoryLimit is the soft limit for a cgroup limit read from one of files (read with
// readFile), reserve set aside, never below half the limit; or 0 when there is none
// (unlimited, unreadable, or GOMEMLIMIT set by getenv).
func softMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error), files []string, reserve int64) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, f := range files {
		raw, err := readFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(raw))
		n, err := strconv.ParseInt(v, 10, 64)
		// cgroup v1 says "no limit" with a number near 2^63.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0
		}
		return max(n/10*9-reserve, n/2)
	}
	return 0
}

// socketReserve is what the kernel may hold for maxConnections admission connections and the
// lobby's: each way twice socketBuffer, and a segment more on the way out
// (TestAConnectionHoldsLittleOfTheKernelsMemory).
func socketReserve(maxConnections int) int64 {
	return int64(maxConnections+lobbySize) * 5 * socketBuffer
}

// setSoftMemoryLimit applies softMemoryLimit and returns it (0: not set).
func setSoftMemoryLimit(reserve int64) int64 {
	n := softMemoryLimit(os.Getenv, os.ReadFile, cgroupMemoryFiles, reserve)
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return n
}
