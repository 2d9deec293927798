package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/noetl/ehdb-election/election"
)

// scaleResult is the scale section: the cost curve over the points, one run each.
type scaleResult struct {
	Lease, Renew time.Duration
	IdleCPU      float64 // kube-apiserver with no elections running, % of one core
	EtcdIdleCPU  float64 // etcd at the same time; -1 when its process was not found
	IdleWindow   time.Duration
	IdleRSS      uint64        // kube-apiserver's resident set at rest
	Stall        time.Duration // the driver process was stopped this long in each window (-scale-stall)
	Points       []scalePoint
}

// scalePoint is one number of elections, run by one driver process, measured over one window.
type scalePoint struct {
	Elections int
	Err       error // the point did not complete; the fields below hold what was measured

	Startup time.Duration // from the first election's start until every one held a valid token
	Acquire summary       // each election's own time from its start to its first acquisition
	Window  time.Duration // on the bench's clock, between the CPU readings
	Load    string        // 1-minute load average at the window's end

	Writes       int     // Lease writes committed in the window (a watch's new resourceVersions)
	WritesPerSec float64 // all elections

	// CPU over the window, % of one core (100 = one core busy for the whole window).
	APIServerCPU, EtcdCPU, DriverCPU float64
	// The whole machine, % of all cores busy (any process, this bench's or not), and steal.
	MachineBusy, MachineSteal float64

	DriverRSS, DriverBaseRSS   uint64 // the driver process with the elections, and before any
	DriverHeap, DriverBaseHeap uint64 // live heap after a GC, likewise
	Goroutines                 int
	APIServerRSS               uint64 // kube-apiserver's resident set at the window's end

	Driver driverResult // the driver's own account of the window (renewals, misses, latency, throttle)

	APFWait     time.Duration // mean time a request waited in API Priority and Fairness queues
	APFRejected int           // requests the API server rejected (429) in the window
	// APFRejectedBy counts them by "flow schema/priority level/reason" (client-go retries a 429
	// on its own, so an election sees a slower answer, not an error).
	APFRejectedBy map[string]int

	// StartupCPU is the same processes' CPU from the driver's start until every election held a
	// valid token, or until the driver gave up: where a point never gets going, this says why.
	StartupCPU cpuShare
}

// perShard divides a total by the point's elections.
func (p scalePoint) perShard(v float64) float64 { return v / float64(p.Elections) }

// measureScale runs each of opts.scalePoints elections in a driver process of its own against the
// local API server, as the chart's writer ServiceAccount, started evenly over one renew interval
// as independently started writers would be, and measures one steady-state window per point.
func (b *bench) measureScale(ctx context.Context) (scaleResult, error) {
	res := scaleResult{Lease: leaseSecs * time.Second, Renew: renewSecs * time.Second, IdleWindow: b.opts.idleWindow,
		Stall: b.opts.scaleStall, EtcdIdleCPU: -1}
	api := b.cluster.APIServerPID()
	if api == 0 {
		return res, fmt.Errorf("the kube-apiserver's process id is unknown (not the local control plane?)")
	}
	etcd := childNamed("etcd")

	b.step("scale: kube-apiserver and etcd CPU at rest for %s", b.opts.idleWindow)
	p0 := readCPU(api, etcd, 0)
	sleepCtx(ctx, b.opts.idleWindow)
	p1 := readCPU(api, etcd, 0)
	res.IdleCPU = percentOfCore(p1.api-p0.api, p1.at.Sub(p0.at))
	res.IdleRSS = procRSS(api)
	if etcd != 0 {
		res.EtcdIdleCPU = percentOfCore(p1.etcd-p0.etcd, p1.at.Sub(p0.at))
	}

	bin, err := os.Executable()
	if err != nil {
		return res, err
	}
	first := 0x10000
	for _, n := range b.opts.scalePoints {
		if ctx.Err() != nil {
			break
		}
		pt := b.scalePoint(ctx, bin, n, first, api, etcd)
		res.Points = append(res.Points, pt)
		if pt.Err != nil {
			b.progress.Error("scale point failed", "elections", n, "error", pt.Err)
		}
		// Each point's shards are fresh: the previous driver's Leases are left to expire unrenewed.
		first += n
	}
	return res, nil
}

// scalePoint runs one point: start the driver, wait until every election holds a valid token, let
// it settle one renew interval, then measure the window.
func (b *bench) scalePoint(ctx context.Context, bin string, n, first int, api, etcd int) (pt scalePoint) {
	pt.Elections = n
	b.step("scale: %d elections (shards %#x…), starting them over %ds", n, first, renewSecs)
	logPath := filepath.Join(b.dir, fmt.Sprintf("scale-%d.log", n))
	s0 := readCPU(api, etcd, 0)
	d, err := startDriver(bin, logPath, "-kubeconfig", b.writerKubeconfig, "-namespace", namespace,
		"-elections", strconv.Itoa(n), "-first-shard", strconv.Itoa(first))
	if err != nil {
		pt.Err = err
		return pt
	}
	defer d.stop()
	fail := func(err error) scalePoint {
		pt.Err = fmt.Errorf("%w (driver log %s)", err, logPath)
		return pt
	}

	line, err := d.read(ctx, 4*time.Minute)
	pt.StartupCPU = share(s0, readCPU(api, etcd, d.pid()))
	if err != nil {
		return fail(err)
	}
	if line.Ready == nil {
		return fail(errors.New("the driver did not report ready"))
	}
	pt.Startup, pt.Acquire, pt.DriverBaseRSS, pt.DriverBaseHeap = line.Ready.Startup, line.Ready.Acquire, line.Ready.BaseRSS, line.Ready.BaseHeap
	// Out of the window: the start-up's creates and first acquisitions.
	sleepCtx(ctx, renewSecs*time.Second)

	b.step("scale: %d elections, steady state for %s", n, b.opts.scaleWindow)
	apf0, apfErr := apfStats(ctx, b.cs)
	if err := d.send("begin"); err != nil {
		return fail(err)
	}
	if line, err = d.read(ctx, time.Minute); err != nil || !line.Begun {
		return fail(errors.Join(errors.New("the driver did not begin the window"), err))
	}
	names := make(map[string]bool, n)
	for i := range n {
		names[election.LeaseName(uint32(first+i))] = true
	}
	c0 := readCPU(api, etcd, d.pid())
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		if b.opts.scaleStall > 0 {
			// The validation of the miss detector: a driver that does not run for the stall must
			// show every election's renewal late.
			sleepCtx(ctx, b.opts.scaleWindow/3)
			d.signal(syscall.SIGSTOP)
			sleepCtx(ctx, b.opts.scaleStall)
			d.signal(syscall.SIGCONT)
		}
	}()
	pt.Writes, err = countLeaseWrites(ctx, b.cs, namespace, func(name string) bool { return names[name] }, b.opts.scaleWindow)
	<-stalled
	c1 := readCPU(api, etcd, d.pid())
	pt.APIServerRSS = procRSS(api)
	pt.Load = loadAverage()
	if err != nil {
		return fail(err)
	}
	if err := d.send("end"); err != nil {
		return fail(err)
	}
	if line, err = d.read(ctx, time.Minute); err != nil || line.Result == nil {
		return fail(errors.Join(errors.New("the driver sent no result"), err))
	}
	if apf1, err := apfStats(ctx, b.cs); err == nil && apfErr == nil {
		if waits := apf1.waits - apf0.waits; waits > 0 {
			pt.APFWait = time.Duration((apf1.waited - apf0.waited) / waits * float64(time.Second))
		}
		for k, v := range apf1.rejected {
			if rejected := int(v - apf0.rejected[k]); rejected > 0 {
				if pt.APFRejectedBy == nil {
					pt.APFRejectedBy = map[string]int{}
				}
				pt.APFRejectedBy[k] = rejected
				pt.APFRejected += rejected
			}
		}
	}

	pt.Driver = *line.Result
	pt.Window = c1.at.Sub(c0.at)
	pt.WritesPerSec = float64(pt.Writes) / pt.Window.Seconds()
	pt.APIServerCPU = percentOfCore(c1.api-c0.api, pt.Window)
	pt.EtcdCPU = -1
	if etcd != 0 {
		pt.EtcdCPU = percentOfCore(c1.etcd-c0.etcd, pt.Window)
	}
	pt.DriverCPU = percentOfCore(c1.driver-c0.driver, pt.Window)
	if total := c1.machine.total - c0.machine.total; total > 0 {
		pt.MachineBusy = 100 * float64(c1.machine.busy-c0.machine.busy) / float64(total)
		pt.MachineSteal = 100 * float64(c1.machine.steal-c0.machine.steal) / float64(total)
	}
	pt.DriverRSS, pt.DriverHeap, pt.Goroutines = line.Result.RSS, line.Result.Heap, line.Result.Goroutines
	return pt
}

// driverProc is the scale section's driver process and its command pipe.
type driverProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan driverLine
	done  chan struct{}
}

func startDriver(bin, logPath string, args ...string) (*driverProc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{scaleDriverFlag}, args...)...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the scale driver: %w", err)
	}
	d := &driverProc{cmd: cmd, stdin: stdin, lines: make(chan driverLine, 4), done: make(chan struct{})}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var l driverLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = driverLine{Error: fmt.Sprintf("unreadable driver line %q: %v", sc.Text(), err)}
			}
			d.lines <- l
		}
	}()
	go func() { _ = cmd.Wait(); logFile.Close(); close(d.done) }()
	return d, nil
}

func (d *driverProc) pid() int { return d.cmd.Process.Pid }

func (d *driverProc) send(cmd string) error {
	_, err := io.WriteString(d.stdin, cmd+"\n")
	return err
}

// read waits for the driver's next line.
func (d *driverProc) read(ctx context.Context, timeout time.Duration) (driverLine, error) {
	select {
	case l, ok := <-d.lines:
		switch {
		case !ok:
			return l, errors.New("the driver exited")
		case l.Error != "":
			return l, fmt.Errorf("driver: %s", l.Error)
		}
		return l, nil
	case <-time.After(timeout):
		return driverLine{}, fmt.Errorf("no word from the driver in %s", timeout)
	case <-ctx.Done():
		return driverLine{}, ctx.Err()
	}
}

func (d *driverProc) signal(sig syscall.Signal) {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(sig)
	}
}

// stop closes the driver's stdin (it exits, without releasing its Leases) and kills it if it has
// not ended within ten seconds.
func (d *driverProc) stop() {
	d.signal(syscall.SIGCONT)
	d.stdin.Close()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.signal(syscall.SIGKILL)
		<-d.done
	}
}

// cpuReading is the CPU time of the processes the scale section watches, and the machine's.
type cpuReading struct {
	at                time.Time
	api, etcd, driver time.Duration
	machine           machineCPU
}

// readCPU reads the processes' CPU times (a zero pid, or a process gone, reads 0) and /proc/stat.
func readCPU(api, etcd, driver int) cpuReading {
	r := cpuReading{at: time.Now(), machine: readMachineCPU()}
	read := func(pid int) time.Duration {
		if pid == 0 {
			return 0
		}
		t, _ := cpuTime(pid)
		return t
	}
	r.api, r.etcd, r.driver = read(api), read(etcd), read(driver)
	return r
}

// cpuShare is the processes' CPU between two readings, % of one core, and the machine's busy
// time, % of all cores.
type cpuShare struct {
	Over                             time.Duration
	APIServer, Etcd, Driver, Machine float64
}

// share is the CPU between two readings; the driver's is all of its CPU time when a is from before
// it started.
func share(a, b cpuReading) cpuShare {
	wall := b.at.Sub(a.at)
	c := cpuShare{Over: wall, APIServer: percentOfCore(b.api-a.api, wall), Etcd: percentOfCore(b.etcd-a.etcd, wall),
		Driver: percentOfCore(b.driver-a.driver, wall)}
	if total := b.machine.total - a.machine.total; total > 0 {
		c.Machine = 100 * float64(b.machine.busy-a.machine.busy) / float64(total)
	}
	return c
}

// machineCPU is the first line of /proc/stat in clock ticks: all CPUs together.
type machineCPU struct{ busy, steal, total int64 }

func readMachineCPU() machineCPU {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice, already in user and nice]
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	var m machineCPU
	for _, x := range v {
		m.total += x
	}
	m.busy = m.total - v[3] - v[4]
	m.steal = v[7]
	return m
}

// childNamed is the process id of this process's child whose command name is comm (the local
// control plane's processes are the bench's children), or 0.
func childNamed(comm string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(s[rp+1:])
		if s[lp+1:rp] == comm && len(f) > 1 && f[1] == strconv.Itoa(self) {
			return pid
		}
	}
	return 0
}

// apf is the API server's API Priority and Fairness counters, summed over priority levels.
type apf struct {
	waits, waited float64            // requests that went through a queue's wait, and their total seconds
	rejected      map[string]float64 // by "flow schema/priority level/reason"
}

func apfStats(ctx context.Context, cs kubernetes.Interface) (apf, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apf{}, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return apf{}, fmt.Errorf("parsing the API server's /metrics: %w", err)
	}
	var a apf
	if f, ok := families["apiserver_flowcontrol_request_wait_duration_seconds"]; ok {
		for _, m := range f.GetMetric() {
			a.waits += float64(m.GetHistogram().GetSampleCount())
			a.waited += m.GetHistogram().GetSampleSum()
		}
	}
	if f, ok := families["apiserver_flowcontrol_rejected_requests_total"]; ok {
		a.rejected = map[string]float64{}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			a.rejected[l["flow_schema"]+"/"+l["priority_level"]+"/"+l["reason"]] += m.GetCounter().GetValue()
		}
	}
	return a, nil
}

func percentOfCore(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / wall.Seconds()
}
