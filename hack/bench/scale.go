package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/noetl/ehdb-election/election"
)

// scaleResult is many elections against one API server in steady state.
type scaleResult struct {
	Elections    int
	Lease, Renew time.Duration
	Startup      time.Duration // from the first start until every election held a valid token
	Window       time.Duration

	Writes            int     // Lease writes committed in the window
	WritesPerSec      float64 // all elections
	WritesPerElection float64 // per election, per second

	APIServerCPU float64 // kube-apiserver, % of one core over the window
	IdleCPU      float64 // kube-apiserver with no elections running, % of one core
	IdleWindow   time.Duration
	DriversCPU   float64 // this process: the drivers and their clients, % of one core

	Renewed, Expected int           // renewals in the window, and window/renew per election
	Late              int           // renewals missed: a gap between successful writes > 1.5 × renew
	MaxGap            time.Duration // longest gap between an election's successful writes
	TokenDrops        int           // token_valid 1 → 0 transitions seen by sampling every 100 ms
	Lost, Errors      int           // outcomes_total{outcome="lost"} and errors_total, in the window
}

// Missed is every way a renewal can fail to happen on time; the goal is 0.
func (r scaleResult) Missed() int { return r.Late + r.TokenDrops + r.Lost + r.Errors }

// scaleDriver is one in-process election with its own metrics registry and its own API
// connection, as a writer process would have; onEvent times the gaps between its writes.
type scaleDriver struct {
	e    *election.Election
	reg  *prometheus.Registry
	name string

	mu       sync.Mutex
	lastSend time.Time
	counting bool
	maxGap   time.Duration
	late     int
}

// measureScale runs opts.scale elections in this process against the local API server, as the
// chart's writer ServiceAccount, started evenly over one renew interval as independently started
// writers would be, and measures one steady-state window.
func (b *bench) measureScale(ctx context.Context) (scaleResult, error) {
	n, lease, renew := b.opts.scale, leaseSecs*time.Second, renewSecs*time.Second
	res := scaleResult{Elections: n, Lease: lease, Renew: renew, Window: b.opts.scaleWindow, IdleWindow: b.opts.idleWindow}
	pid := b.cluster.APIServerPID()
	if pid == 0 {
		return res, fmt.Errorf("the kube-apiserver's process id is unknown (not the local control plane?)")
	}

	b.step("scale: kube-apiserver CPU at rest for %s", b.opts.idleWindow)
	idle0, err := cpuTime(pid)
	if err != nil {
		return res, err
	}
	sleepCtx(ctx, b.opts.idleWindow)
	idle1, err := cpuTime(pid)
	if err != nil {
		return res, err
	}
	res.IdleCPU = percentOfCore(idle1-idle0, b.opts.idleWindow)

	rc, err := b.cluster.ServiceAccountConfig(ctx, namespace, writerSA)
	if err != nil {
		return res, err
	}
	logFile, err := os.Create(filepath.Join(b.dir, "scale.log"))
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	log := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ectx, stop := context.WithCancel(ctx)
	defer stop()

	b.step("scale: starting %d elections over %s", n, renew)
	drivers := make([]*scaleDriver, n)
	names := make(map[string]bool, n)
	begin := time.Now()
	for i := range drivers {
		d, err := startScaleDriver(ectx, rc, 0x10000+i, lease, log)
		if err != nil {
			return res, err
		}
		drivers[i], names[d.name] = d, true
		sleepCtx(ctx, renew/time.Duration(n))
	}
	for _, d := range drivers {
		for !d.e.Token().Valid {
			if time.Since(begin) > 3*time.Minute || ctx.Err() != nil {
				return res, fmt.Errorf("election %s never held a valid token (log %s)", d.name, logFile.Name())
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
	}
	res.Startup = time.Since(begin)
	// Out of the window: the start-up's creates and first acquisitions.
	sleepCtx(ctx, renew)

	b.step("scale: steady state for %s", b.opts.scaleWindow)
	before, err := gatherCounters(drivers)
	if err != nil {
		return res, err
	}
	for _, d := range drivers {
		d.mu.Lock()
		d.counting = true
		d.mu.Unlock()
	}
	sampled := make(chan int)
	sctx, stopSampling := context.WithCancel(ctx)
	go func() { sampled <- sampleTokenDrops(sctx, drivers) }()
	api0, err := cpuTime(pid)
	if err != nil {
		stopSampling()
		<-sampled
		return res, err
	}
	self0, _ := cpuTime(os.Getpid())
	start := time.Now()
	res.Writes, err = countLeaseWrites(ctx, b.cs, namespace, func(name string) bool { return names[name] }, b.opts.scaleWindow)
	window := time.Since(start)
	api1, cpuErr := cpuTime(pid)
	self1, _ := cpuTime(os.Getpid())
	stopSampling()
	res.TokenDrops = <-sampled
	if err != nil {
		return res, err
	}
	if cpuErr != nil {
		return res, cpuErr
	}
	after, err := gatherCounters(drivers)
	if err != nil {
		return res, err
	}
	now := time.Now()
	for _, d := range drivers {
		d.mu.Lock()
		// An election whose renewal is overdue at the end of the window has missed it too.
		if gap := now.Sub(d.lastSend); gap > renew*3/2 {
			d.late++
			d.maxGap = max(d.maxGap, gap)
		}
		res.Late += d.late
		res.MaxGap = max(res.MaxGap, d.maxGap)
		d.counting = false
		d.mu.Unlock()
	}

	res.Window = window
	res.WritesPerSec = float64(res.Writes) / window.Seconds()
	res.WritesPerElection = res.WritesPerSec / float64(n)
	res.APIServerCPU = percentOfCore(api1-api0, window)
	res.DriversCPU = percentOfCore(self1-self0, window)
	res.Renewed = int(after["outcome=renewed"] - before["outcome=renewed"])
	res.Expected = int(float64(n) * window.Seconds() / renew.Seconds())
	res.Lost = int(after["outcome=lost"] - before["outcome=lost"])
	for k, v := range after {
		if strings.HasPrefix(k, "reason=") {
			res.Errors += int(v - before[k])
		}
	}
	return res, nil
}

func startScaleDriver(ctx context.Context, rc *rest.Config, shard int, lease time.Duration, log *slog.Logger) (*scaleDriver, error) {
	cfg := rest.CopyConfig(rc)
	cfg.UserAgent = "ehdb-bench-scale"
	// A dial function of its own gives this client a transport, and a connection, of its own (the
	// client-go transport cache cannot share one with a Dial set): one writer process, one connection.
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	env := map[string]string{
		election.EnvElection:  "true",
		election.EnvShard:     strconv.Itoa(shard),
		election.EnvNamespace: namespace,
	}
	// The writer's own parser, so the timings are the production defaults (lease 15 s, renew 5 s).
	ecfg, problems := election.ParseConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if len(problems) > 0 {
		return nil, fmt.Errorf("election configuration: %v", problems)
	}
	if ecfg.LeaseDuration != lease {
		return nil, fmt.Errorf("the default lease duration is %s, the bench expected %s", ecfg.LeaseDuration, lease)
	}
	d := &scaleDriver{reg: prometheus.NewRegistry(), name: election.LeaseName(ecfg.Shard)}
	d.e, err = election.Start(ctx, election.NewKubeStore(client, namespace), ecfg, election.Options{
		Identity:   election.NewIdentity(fmt.Sprintf("bench-scale-%d", shard)),
		Registerer: d.reg,
		Logger:     log,
		OnEvent:    func(ev election.Event) { d.onEvent(ev, lease, ecfg.RenewInterval) },
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// onEvent records the send time of each successful write (an acquisition's or renewal's Until is
// its send time + the lease duration) and, in the window, the gaps between them.
func (d *scaleDriver) onEvent(ev election.Event, lease, renew time.Duration) {
	if ev.Outcome != election.Acquired && ev.Outcome != election.Renewed {
		return
	}
	sent := ev.Until.Add(-lease)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counting && !d.lastSend.IsZero() {
		gap := sent.Sub(d.lastSend)
		d.maxGap = max(d.maxGap, gap)
		if gap > renew*3/2 {
			d.late++
		}
	}
	d.lastSend = sent
}

// sampleTokenDrops reads every election's token every 100 ms (a lock-free read) until ctx ends and
// counts the transitions from valid to not valid.
func sampleTokenDrops(ctx context.Context, drivers []*scaleDriver) int {
	valid := make([]bool, len(drivers))
	for i, d := range drivers {
		valid[i] = d.e.Token().Valid
	}
	drops := 0
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
				drops++
			}
			valid[i] = v
		}
	}
}

// gatherCounters sums the elections' outcome and error counters, keyed "outcome=<o>" and
// "reason=<r>".
func gatherCounters(drivers []*scaleDriver) (map[string]float64, error) {
	out := map[string]float64{}
	for _, d := range drivers {
		families, err := d.reg.Gather()
		if err != nil {
			return nil, fmt.Errorf("gathering the metrics of %s: %w", d.name, err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" || l.GetName() == "reason" {
						out[l.GetName()+"="+l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out, nil
}

func percentOfCore(cpu, wall time.Duration) float64 {
	return 100 * cpu.Seconds() / wall.Seconds()
}
