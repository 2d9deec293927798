package main

import (
	"bytes"
	"fmt"
	"os"
)

// rssOf is the resident memory of a process, in MiB (0 if it is gone).
func rssOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		var kb int
		if n, _ := fmt.Sscanf(string(l), "VmRSS: %d kB", &kb); n == 1 {
			return kb / 1024
		}
	}
	return 0
}
