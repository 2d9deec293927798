package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// countLeaseWrites watches the namespace's Leases for window and counts the writes to those whose
// name matches: every new resourceVersion of a Lease is one write the API server committed. It
// returns when the window is over.
func countLeaseWrites(ctx context.Context, cs kubernetes.Interface, ns string, match func(string) bool, window time.Duration) (int, error) {
	leases := cs.CoordinationV1().Leases(ns)
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing leases: %w", err)
	}
	seen := make(map[string]string, len(list.Items)) // name → last resourceVersion counted
	for _, l := range list.Items {
		seen[l.Name] = l.ResourceVersion
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	rv, count := list.ResourceVersion, 0
	for wctx.Err() == nil {
		w, err := leases.Watch(wctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if wctx.Err() != nil {
				break
			}
			return count, fmt.Errorf("watching leases: %w", err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				w.Stop()
				return count, fmt.Errorf("watching leases: %v", ev.Object)
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			rv = l.ResourceVersion
			if (ev.Type == watch.Added || ev.Type == watch.Modified) && match(l.Name) && seen[l.Name] != l.ResourceVersion {
				count++
				seen[l.Name] = l.ResourceVersion
			}
		}
		w.Stop()
	}
	return count, ctx.Err()
}

// leaseRequests reads the API server's own count of requests on Leases, by verb
// (apiserver_request_total{resource="leases"}), from its /metrics. Two readings bracket a window.
// It counts every namespace, so the API server's own identity Lease (one update per 10 s) is in it.
func leaseRequests(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's /metrics: %w", err)
	}
	out := map[string]float64{}
	f, ok := families["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("apiserver_request_total missing from the API server's /metrics")
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "leases" && labels["group"] == "coordination.k8s.io" {
			out[labels["verb"]] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// cpuTime is a process's user + system CPU time so far, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; the fields after its closing
	// parenthesis start at field 3 (state). utime and stime are fields 14 and 15.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// USER_HZ is 100 on every Linux ABI Go supports (sysconf(_SC_CLK_TCK)).
	return time.Duration(ticks) * (time.Second / 100), nil
}
