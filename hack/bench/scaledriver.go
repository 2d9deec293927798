package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/noetl/ehdb-election/election"
)

// scaleDriverFlag, as the first argument, turns the bench binary into the scale section's driver
// process: it runs many shard elections, each as a writer process would (a client, a connection,
// a rate limiter and a metrics registry of its own), so that its CPU and memory in /proc are the
// elections' and nothing else's. It talks to the bench over stdin/stdout, one JSON object a line:
//
//	→ {"ready":…}  every election holds a valid token
//	← "begin"      the window starts: the driver snapshots its counters
//	→ {"begun":true}
//	← "end"        the window ends
//	→ {"result":…} the window's renewals, misses and latencies, then the process's memory
//
// and it exits when stdin closes (without releasing: the bench uses fresh shards for each point).
const scaleDriverFlag = "-scale-driver"

// driverReady is the driver's first line.
type driverReady struct {
	Startup time.Duration // from the first election's start until every one held a valid token
	// Acquire is each election's own time from its start to its first acquisition's answer.
	Acquire summary
	// Memory of the driver process before it created any client or election.
	BaseRSS, BaseHeap uint64
}

// driverResult is what the driver measured over one window.
type driverResult struct {
	Window time.Duration // between "begin" and "end", on the driver's clock

	Renewed, Acquired int // successful writes of the elections in the window
	Misses                // by kind; see missDetector
	ElectionsMissing  int // elections with at least one miss of any kind
	Latency           summary
	ThrottleWaits     int           // requests the client-side rate limiter held back (no token)
	ThrottleWaited    time.Duration // their total

	// The process after a GC at the end of the window.
	RSS, Heap  uint64
	Goroutines int
}

// driverLine is one line of the driver's stdout.
type driverLine struct {
	Ready  *driverReady  `json:"ready,omitempty"`
	Begun  bool          `json:"begun,omitempty"`
	Result *driverResult `json:"result,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// runScaleDriver is the driver process's main.
func runScaleDriver(args []string) int {
	fs := flag.NewFlagSet(scaleDriverFlag, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the writer ServiceAccount")
	ns := fs.String("namespace", namespace, "namespace of the Leases")
	n := fs.Int("elections", 100, "shard elections to run")
	first := fs.Int("first-shard", 0x10000, "shard number of the first election; the others follow")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		_ = out.Encode(driverLine{Error: err.Error()})
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	var ready driverReady
	ready.BaseRSS, ready.BaseHeap = memoryNow(true)
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fail(err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	throttle := &throttleStats{}
	renew := renewSecs * time.Second
	drivers := make([]*scaleDriver, *n)
	begin := time.Now()
	for i := range drivers {
		d, err := startScaleDriver(ctx, rc, *ns, *first+i, throttle, log)
		if err != nil {
			return fail(err)
		}
		drivers[i] = d
		sleepCtx(ctx, renew/time.Duration(*n))
	}
	for _, d := range drivers {
		for !d.e.Token().Valid {
			if time.Since(begin) > 3*time.Minute || ctx.Err() != nil {
				return fail(fmt.Errorf("election %s never held a valid token", d.name))
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}
	ready.Startup = time.Since(begin)
	acquire := make([]time.Duration, len(drivers))
	for i, d := range drivers {
		acquire[i] = d.acquire()
	}
	ready.Acquire = summarize(acquire)
	if err := out.Encode(driverLine{Ready: &ready}); err != nil {
		return 1
	}

	cmds := bufio.NewScanner(os.Stdin)
	expect := func(want string) bool { return cmds.Scan() && strings.TrimSpace(cmds.Text()) == want }
	if !expect("begin") {
		return 0
	}
	// The window runs from before the first reading of the counters to after the last, so that
	// every renewal they count falls in it.
	start := time.Now()
	before, err := gatherCounters(drivers)
	if err != nil {
		return fail(err)
	}
	waits0, waited0 := throttle.read()
	for _, d := range drivers {
		d.det.Begin(start)
	}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan []int)
	go func() { sampled <- sampleTokenDrops(sctx, drivers) }()
	if err := out.Encode(driverLine{Begun: true}); err != nil {
		return 1
	}
	if !expect("end") {
		return 0
	}
	stopSampling()
	drops := <-sampled
	after, err := gatherCounters(drivers)
	if err != nil {
		return fail(err)
	}
	end := time.Now()
	res := driverResult{Window: end.Sub(start)}
	var lat []time.Duration
	for i, d := range drivers {
		m, l := d.det.End(end)
		m.TokenDrops = drops[i]
		m.Lost = int(after[d.name]["outcome=lost"] - before[d.name]["outcome=lost"])
		for k, v := range after[d.name] {
			if strings.HasPrefix(k, "reason=") {
				m.Errors += int(v - before[d.name][k])
			}
		}
		if m.Any() {
			res.ElectionsMissing++
		}
		res.Misses = res.Misses.add(m)
		res.Renewed += int(after[d.name]["outcome=renewed"] - before[d.name]["outcome=renewed"])
		res.Acquired += int(after[d.name]["outcome=acquired"] - before[d.name]["outcome=acquired"])
		lat = append(lat, l...)
	}
	res.Latency = summarize(lat)
	waits1, waited1 := throttle.read()
	res.ThrottleWaits, res.ThrottleWaited = int(waits1-waits0), time.Duration(waited1-waited0)
	res.RSS, res.Heap = memoryNow(false)
	res.Goroutines = runtime.NumGoroutine()
	if err := out.Encode(driverLine{Result: &res}); err != nil {
		return 1
	}
	// Run on until the bench closes stdin (or kills the process).
	for cmds.Scan() {
	}
	return 0
}

// scaleDriver is one election with its own metrics registry and its own API connection, as a
// writer process would have; det times the gaps between its writes.
type scaleDriver struct {
	e    *election.Election
	reg  *prometheus.Registry
	name string
	det  *missDetector

	started  time.Time
	mu       sync.Mutex
	acquired time.Time // the answer to the first acquisition
}

// acquire is the time from the election's start to its first acquisition's answer.
func (d *scaleDriver) acquire() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acquired.Sub(d.started)
}

func startScaleDriver(ctx context.Context, rc *rest.Config, ns string, shard int, throttle *throttleStats, log *slog.Logger) (*scaleDriver, error) {
	cfg := rest.CopyConfig(rc)
	cfg.UserAgent = "ehdb-bench-scale"
	// A dial function of its own gives this client a transport, and a connection, of its own (the
	// client-go transport cache cannot share one with a Dial set): one writer process, one connection.
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	// The rate limiter a writer gets from client-go's defaults (ehdb-writer sets none), one per
	// process, wrapped to count the time requests wait in it: the bench must not measure its own
	// throttle.
	cfg.RateLimiter = &countingLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(rest.DefaultQPS, rest.DefaultBurst), stats: throttle}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	env := map[string]string{
		election.EnvElection:  "true",
		election.EnvShard:     strconv.Itoa(shard),
		election.EnvNamespace: ns,
	}
	// The writer's own parser, so the timings are the production defaults (lease 15 s, renew 5 s).
	ecfg, problems := election.ParseConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if len(problems) > 0 {
		return nil, fmt.Errorf("election configuration: %v", problems)
	}
	if ecfg.LeaseDuration != leaseSecs*time.Second || ecfg.RenewInterval != renewSecs*time.Second {
		return nil, fmt.Errorf("the default timings are %s/%s, the bench expected %ds/%ds", ecfg.LeaseDuration, ecfg.RenewInterval, leaseSecs, renewSecs)
	}
	d := &scaleDriver{reg: prometheus.NewRegistry(), name: election.LeaseName(ecfg.Shard), det: newMissDetector(ecfg.LeaseDuration, ecfg.RenewInterval),
		started: time.Now()}
	d.e, err = election.Start(ctx, election.NewKubeStore(client, ns), ecfg, election.Options{
		Identity:   election.NewIdentity(fmt.Sprintf("bench-scale-%d", shard)),
		Registerer: d.reg,
		Logger:     log,
		OnEvent: func(ev election.Event) {
			if ev.Outcome == election.Acquired {
				d.mu.Lock()
				if d.acquired.IsZero() {
					d.acquired = ev.From
				}
				d.mu.Unlock()
			}
			if ev.Outcome == election.Acquired || ev.Outcome == election.Renewed {
				// Until is the write's send time + the token's validity (lease × 0.99, not the
				// lease duration as Event's comment says); the answer arrived just now.
				d.det.Write(ev.Until.Add(-d.det.validFor), time.Now())
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Misses are the ways a renewal can fail to happen on time, counted over one window. The goal is
// none of any kind.
type Misses struct {
	// Late: a successful write sent more than renew + slack (slack = renew/2, so 7.5 s with the
	// defaults) after the election's previous successful write; also an election whose last write
	// is that old when the window ends (a renewal overdue, not yet late by the first rule).
	Late int
	// Lapsed: a gap between successful writes longer than the token's validity (lease × 0.99),
	// or overdue by that much at the window's end: the token expired even if no sample saw it.
	Lapsed int
	// TokenDrops: Token().Valid seen to go from true to false, sampled every 100 ms.
	TokenDrops int
	// Lost: rounds that ended in outcome "lost" (ehdb_election_outcomes_total).
	Lost int
	// Errors: every error the election counted (ehdb_election_errors_total, any reason).
	Errors int
	// MaxGap is the longest gap between an election's successful writes, or from its last one to
	// the window's end.
	MaxGap time.Duration
}

// Total is the sum of the kinds (one incident may count under several).
func (m Misses) Total() int { return m.Late + m.Lapsed + m.TokenDrops + m.Lost + m.Errors }

// Any reports whether any kind was counted.
func (m Misses) Any() bool { return m.Total() > 0 }

func (m Misses) add(o Misses) Misses {
	return Misses{Late: m.Late + o.Late, Lapsed: m.Lapsed + o.Lapsed, TokenDrops: m.TokenDrops + o.TokenDrops,
		Lost: m.Lost + o.Lost, Errors: m.Errors + o.Errors, MaxGap: max(m.MaxGap, o.MaxGap)}
}

// missDetector classifies one election's successful writes in a window by their send times. It
// is fed from the election's OnEvent (its goroutine) and read by the bench, hence the lock.
type missDetector struct {
	lateAfter, validFor time.Duration

	mu       sync.Mutex
	counting bool
	last     time.Time // send time of the last successful write
	m        Misses
	latency  []time.Duration // send → answer of each write in the window
}

func newMissDetector(lease, renew time.Duration) *missDetector {
	return &missDetector{
		lateAfter: renew + renew/2,
		validFor:  lease - time.Duration(float64(lease)*election.MaxClockRateDifference),
	}
}

// Write records a successful write sent at sent whose answer arrived at answered.
func (d *missDetector) Write(sent, answered time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counting {
		d.gap(sent.Sub(d.last))
		d.latency = append(d.latency, answered.Sub(sent))
	}
	d.last = sent
}

func (d *missDetector) gap(g time.Duration) {
	d.m.MaxGap = max(d.m.MaxGap, g)
	if g > d.lateAfter {
		d.m.Late++
	}
	if g > d.validFor {
		d.m.Lapsed++
	}
}

// Begin starts the window at start. An election that has never written counts from start.
func (d *missDetector) Begin(start time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.IsZero() {
		d.last = start
	}
	d.counting = true
}

// End closes the window at end: a renewal overdue by then is counted as the gap so far. It
// returns the window's misses (Late, Lapsed, MaxGap) and write latencies.
func (d *missDetector) End(end time.Time) (Misses, []time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counting = false
	if g := end.Sub(d.last); g > d.lateAfter {
		d.gap(g)
	}
	return d.m, d.latency
}

// sampleTokenDrops reads every election's token every 100 ms (a lock-free read) until ctx ends and
// counts, per election, the transitions from valid to not valid.
func sampleTokenDrops(ctx context.Context, drivers []*scaleDriver) []int {
	valid := make([]bool, len(drivers))
	for i, d := range drivers {
		valid[i] = d.e.Token().Valid
	}
	drops := make([]int, len(drivers))
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return drops
		case <-t.C:
		}
		for i, d := range drivers {
			v := d.e.Token().Valid
			if valid[i] && !v {
				drops[i]++
			}
			valid[i] = v
		}
	}
}

// gatherCounters reads each election's outcome and error counters, per Lease name, keyed
// "outcome=<o>" and "reason=<r>".
func gatherCounters(drivers []*scaleDriver) (map[string]map[string]float64, error) {
	out := make(map[string]map[string]float64, len(drivers))
	for _, d := range drivers {
		families, err := d.reg.Gather()
		if err != nil {
			return nil, fmt.Errorf("gathering the metrics of %s: %w", d.name, err)
		}
		c := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" || l.GetName() == "reason" {
						c[l.GetName()+"="+l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		out[d.name] = c
	}
	return out, nil
}

// throttleStats counts the waits of every election's client-side rate limiter.
type throttleStats struct{ waits, waited atomic.Int64 }

func (t *throttleStats) read() (int64, int64) { return t.waits.Load(), t.waited.Load() }

// countingLimiter is client-go's token bucket, counting the requests it holds back: a request
// whose Wait (what client-go calls before sending) finds no token. Taking a free token first with
// TryAccept, as Wait would, separates real throttling from the scheduling delays of a busy machine.
type countingLimiter struct {
	flowcontrol.RateLimiter
	stats *throttleStats
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	if l.RateLimiter.TryAccept() {
		return nil
	}
	t := time.Now()
	err := l.RateLimiter.Wait(ctx)
	l.stats.waits.Add(1)
	l.stats.waited.Add(int64(time.Since(t)))
	return err
}

// memoryNow is the process's resident set (VmRSS) and live heap after a GC; with release, the
// freed memory is first returned to the OS so that the RSS is a baseline.
func memoryNow(release bool) (rss, heap uint64) {
	if release {
		debug.FreeOSMemory()
	} else {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procRSS(os.Getpid()), ms.HeapAlloc
}

// procRSS is a process's VmRSS in bytes from /proc/<pid>/status, or 0.
func procRSS(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
