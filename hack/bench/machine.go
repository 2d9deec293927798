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
}

func readMachine() machine {
	return machine{
		CPUs:      runtime.NumCPU(),
		Model:     cpuModel(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
		Date:      time.Now(),
	}
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
