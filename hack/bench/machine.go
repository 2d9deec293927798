package main

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"
)

// machine is what the figures were measured on; every report states it, because latency and CPU
// figures mean nothing without it.
type machine struct {
	CPUs       int
	Model      string
	OS, Arch   string
	GoVersion  string
	Kubernetes string // the API server's version, once a cluster runs
	Date       time.Time
	// Load averages (1 min) at the start and the end: the machine may be shared, and a figure
	// measured under load says so.
	LoadStart, LoadEnd string
}

func readMachine() machine {
	return machine{
		CPUs:      runtime.NumCPU(),
		Model:     cpuModel(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
		Date:      time.Now(),
		LoadStart: loadAverage(),
	}
}

// loadAverage is the 1-minute load average from /proc/loadavg, or "unknown".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
