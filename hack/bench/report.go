package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// report is everything one run measured; render turns it into Markdown.
type report struct {
	Machine machine
	Opts    options
	Took    time.Duration

	Micro        []benchmark
	Admission    *admissionResult
	AdmissionErr error
	Failover     []failoverResult
	FailoverErrs []error
	Scale        *scaleResult
	ScaleErr     error
}

// The goals of issues 3, 4 and 7; the report states each figure against its goal and asserts nothing.
const (
	goalGracefulP99  = 200 * time.Millisecond
	goalTakeoverMax  = 250 * time.Millisecond
	goalAdmissionP50 = 1.10
)

func render(r *report) string {
	var s strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&s, format+"\n", a...) }
	m := r.Machine
	p("# ehdb-election benchmark report")
	p("")
	mode := "full run"
	if r.Opts.quick {
		mode = "quick run (`-quick`: fewer trials, shorter windows; not for quoting)"
	}
	p("- Machine: %s, nproc %d, %s/%s; load average (1 min) %s at the start, %s at the end", m.Model, m.CPUs, m.OS, m.Arch, m.LoadStart, m.LoadEnd)
	p("- %s, %s, took %s", m.Date.Format("2006-01-02 15:04 MST"), mode, r.Took.Round(time.Second))
	if m.Kubernetes == "" {
		p("- Go %s", m.GoVersion)
	} else {
		p("- Go %s; Kubernetes %s, local control plane (etcd, kube-apiserver, kube-controller-manager) on loopback", m.GoVersion, m.Kubernetes)
		p("- The chart is installed (writer RBAC, lease guard ValidatingAdmissionPolicy, webhook configuration); " +
			"the writers and the client-go candidates run as its writer ServiceAccount.")
	}

	if r.Opts.runs("micro") {
		renderMicro(p, r.Micro)
	}
	if r.Opts.runs("failover") {
		renderFailover(p, r.Failover, r.FailoverErrs, r.Opts)
	}
	if r.Opts.runs("scale") {
		renderScale(p, r.Scale, r.ScaleErr, m.CPUs)
	}
	if r.Opts.runs("admission") {
		renderAdmission(p, r.Admission, r.AdmissionErr)
	}
	if r.Admission != nil && (r.Opts.runs("admission") || r.Opts.runs("budget")) {
		renderBudget(p, r.Admission.Budget, r.Admission.BudgetErr)
	}
	return s.String()
}

func renderMicro(p func(string, ...any), rows []benchmark) {
	p("")
	p("## Micro-benchmarks")
	p("")
	p("`go test -run '^$' -bench … -benchmem`")
	p("")
	p("| benchmark | package | ns/op | B/op | allocs/op |")
	p("| --- | --- | ---: | ---: | ---: |")
	for _, b := range rows {
		if b.Problem != "" {
			p("| %s | %s | %s | | |", b.Name, b.Package, b.Problem)
			continue
		}
		p("| %s | %s | %s | %s | %s |", b.Name, b.Package, num(b.NsPerOp), num(b.BytesPerOp), num(b.AllocsPerOp))
	}
}

func renderFailover(p func(string, ...any), rs []failoverResult, errs []error, o options) {
	p("")
	p("## Failover")
	p("")
	p("%d trials per scenario and implementation, run at once on %d shards (a holder and a standby process each), "+
		"signals staggered by %s. Graceful: SIGTERM of the holder → the standby's acquisition (when its answer arrived). "+
		"Crash: SIGKILL of the holder; *takeover* is measured from the earliest instant the rules allow "+
		"(the holder's last renewTime, read right after the kill, + the lease duration), *total* from the kill.",
		o.trials, 2*o.trials, dur(o.stagger))
	p("")
	p("| implementation | timings | scenario | n | min | p50 | p90 | p99 | max | goal |")
	p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rs {
		ours := r.Bound > 0
		goal := func(g string) string {
			if !ours {
				return ""
			}
			return g
		}
		row := func(scenario string, s summary, g string) {
			if s.N == 0 {
				p("| %s | %s | %s | 0 | | | | | | %s |", r.Contender, r.Timings, scenario, g)
				return
			}
			p("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |", r.Contender, r.Timings, scenario, s.N,
				dur(s.Min), dur(s.P50), dur(s.P90), dur(s.P99), dur(s.Max), g)
		}
		row("graceful: SIGTERM → acquired", r.Graceful,
			goal(verdict(r.Graceful.N > 0 && r.Graceful.P99 < goalGracefulP99, "p99 < "+dur(goalGracefulP99))))
		takeoverGoal := verdict(r.Takeover.N > 0 && r.Takeover.Max <= goalTakeoverMax, "max ≤ "+dur(goalTakeoverMax))
		if r.Takeover.N > 0 && r.Takeover.Min < 0 {
			takeoverGoal += "; **EARLY: a takeover before the rules allow**"
		}
		row("crash: takeover after earliest allowed", r.Takeover, goal(takeoverGoal))
		row("crash: total from SIGKILL", r.CrashTotal,
			goal(verdict(r.CrashTotal.N > 0 && r.CrashTotal.Max <= r.Bound, "max ≤ lease + renew = "+secs(r.Bound))))
	}
	p("")
	p("Steady state, measured over %s with every shard's holder and standby running:", secs(o.steady))
	p("")
	p("| implementation | Lease writes/s per shard | API requests/s per shard on Leases |")
	p("| --- | ---: | --- |")
	for _, r := range rs {
		var verbs []string
		for _, v := range slices.Sorted(maps.Keys(r.RequestsPerShard)) {
			verbs = append(verbs, fmt.Sprintf("%s %.2f", v, r.RequestsPerShard[v]))
		}
		p("| %s | %.3f | %s |", r.Contender, r.WritesPerShard, strings.Join(verbs, ", "))
	}
	p("")
	p("Writes are new resourceVersions of the shards' Leases seen by a watch. Requests are the API server's "+
		"apiserver_request_total for Leases, GET/POST/PUT/PATCH/DELETE (all namespaces: the API server's own identity "+
		"Lease adds about 0.1/s in all, %.3f/s per shard here); ehdb-election's candidates also hold one WATCH each, "+
		"a long-running request that is not a rate. client-go's Leases are not ehdb-shard-*, so the lease guard policy "+
		"does not evaluate them.", 0.1/float64(2*o.trials))
	for _, r := range rs {
		for _, pr := range r.Problems {
			p("- %s: %s", r.Contender, pr)
		}
	}
	for _, err := range errs {
		p("")
		p("**Failed:** %v", err)
	}
	if o.trials < 100 {
		p("")
		p("With %d samples, p99 is the largest sample (nearest rank).", o.trials)
	}
}

func renderScale(p func(string, ...any), r *scaleResult, err error, cpus int) {
	p("")
	p("## Scale: how cost grows with the number of shards")
	p("")
	if err != nil {
		p("**Failed:** %v", err)
		p("")
	}
	if r == nil || len(r.Points) == 0 {
		return
	}
	p("Each point runs its shard elections in one driver process of its own (each election with its own client, "+
		"connection, client-go default rate limiter of 5 QPS / burst 10, and metrics registry, as separate writers would have), "+
		"as the chart's writer ServiceAccount, lease %s / renew %s, started evenly over one renew interval on fresh shards. "+
		"After every election holds a valid token and one renew interval more, one steady-state window is measured. "+
		"CPU is from /proc/<pid>/stat of each process over the window (100 %% = one core; 1 %% = 10 mCPU); at rest, with no "+
		"elections, kube-apiserver used %.1f %% (resident set %.0f MiB) and etcd %s over %s. The local etcd runs with --unsafe-no-fsync, so disk "+
		"sync is not part of these figures.",
		secs(r.Lease), secs(r.Renew), r.IdleCPU, mib(r.IdleRSS), pct(r.EtcdIdleCPU), secs(r.IdleWindow))
	if r.Stall > 0 {
		p("")
		p("**Validation run:** the driver process was stopped (SIGSTOP) for %s a third into each window; every election must show a miss.", secs(r.Stall))
	}
	p("")
	p("Cost:")
	p("")
	p("| shards | Lease writes/s (per shard) | kube-apiserver CPU (mCPU/shard) | etcd CPU (mCPU/shard) | driver CPU (mCPU/shard) | driver memory per shard: RSS, heap | kube-apiserver RSS | others' CPU | machine busy (steal) |")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, pt := range r.Points {
		if pt.Window == 0 {
			p("| %d | **failed** (below) | | | | | | | |", pt.Elections)
			continue
		}
		mcpu := func(v float64) string {
			if v < 0 {
				return "—"
			}
			return fmt.Sprintf("%.1f %% (%.2f)", v, pt.perShard(10*v))
		}
		perShard := func(v, base uint64) string {
			if v < base {
				return "—"
			}
			return fmt.Sprintf("%.0f KiB", pt.perShard(float64(v-base))/1024)
		}
		others := float64(cpus)*pt.MachineBusy - pt.APIServerCPU - max(pt.EtcdCPU, 0) - pt.DriverCPU
		p("| %d | %.1f (%.3f) | %s | %s | %s | %s, %s | %.0f MiB | %.0f %% | %.0f %% of %d cores (%.1f %%) |", pt.Elections,
			pt.WritesPerSec, pt.perShard(pt.WritesPerSec), mcpu(pt.APIServerCPU), mcpu(pt.EtcdCPU), mcpu(pt.DriverCPU),
			perShard(pt.DriverRSS, pt.DriverBaseRSS), perShard(pt.DriverHeap, pt.DriverBaseHeap), mib(pt.APIServerRSS), others, pt.MachineBusy, cpus, pt.MachineSteal)
	}
	p("")
	p("Health:")
	p("")
	p("| shards | all valid after (each: p50, max) | window | renewals (+ acquisitions), expected | write send → answer p50 / p99 / max | longest gap | **renewals missed** (elections) | late / lapsed / drops / lost / errors | client throttle waits | APF queue wait, 429s | load (1 min) |")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
	for _, pt := range r.Points {
		if pt.Window == 0 {
			continue
		}
		d := pt.Driver
		expected := int(float64(pt.Elections) * d.Window.Seconds() / r.Renew.Seconds())
		p("| %d | %s (%s, %s) | %s | %d (+ %d), ≈ %d | %s / %s / %s | %s | **%d** (%d) %s | %d / %d / %d / %d / %d | %d (%s) | %s, %d | %s |",
			pt.Elections, dur(pt.Startup), dur(pt.Acquire.P50), dur(pt.Acquire.Max), secs(pt.Window.Round(100*time.Millisecond)), d.Renewed, d.Acquired, expected,
			dur(d.Latency.P50), dur(d.Latency.P99), dur(d.Latency.Max), dur(d.MaxGap),
			d.Misses.Total(), d.ElectionsMissing, verdict(d.Misses.Total() == 0, "goal 0"),
			d.Late, d.Lapsed, d.TokenDrops, d.Lost, d.Errors, d.ThrottleWaits, dur(d.ThrottleWaited),
			dur(pt.APFWait), pt.APFRejected, pt.Load)
	}
	p("")
	p("A renewal is **missed** when any of these happens in the window: *late*, a successful write sent more than renew × 1.5 (%s) "+
		"after the election's previous one, or none by the window's end; *lapsed*, such a gap longer than the token's validity "+
		"(lease × 0.99); *drops*, Token().Valid seen going from true to false (sampled every 100 ms); *lost*, a round ending in "+
		"outcome lost; *errors*, anything counted in ehdb_election_errors_total. Elections: how many had at least one. "+
		"All valid after: from the first election's start (they start over one renew interval) until every one holds a valid token; "+
		"each: an election's own time from its start to its acquisition's answer. Latency is from a write's send to its answer, as the election saw it. Client throttle waits: requests their client-side rate limiter "+
		"held back (its bucket had no token), and the time they waited. Others' CPU: the machine's busy time less kube-apiserver, etcd and the driver "+
		"(the bench itself, kube-controller-manager, and anything else on the machine).", secs(r.Renew*3/2))
	p("")
	for _, pt := range r.Points {
		if pt.Err != nil {
			p("- %d shards: **failed:** %v", pt.Elections, pt.Err)
		}
		if pt.Window > 0 {
			p("- %d shards: %s", pt.Elections, limitHint(pt, cpus))
		}
		if len(pt.APFRejectedBy) > 0 {
			var by []string
			for _, k := range slices.Sorted(maps.Keys(pt.APFRejectedBy)) {
				by = append(by, fmt.Sprintf("%s %d", k, pt.APFRejectedBy[k]))
			}
			p("- %d shards: 429s by flow schema/priority level/reason (client-go retries them): %s", pt.Elections, strings.Join(by, ", "))
		}
		if c := pt.StartupCPU; c.Over > 0 {
			p("- %d shards, start-up (%s): kube-apiserver %.0f %%, etcd %.0f %%, driver %.0f %% of one core; machine %.0f %% busy",
				pt.Elections, dur(c.Over), c.APIServer, c.Etcd, c.Driver, c.Machine)
		}
	}
}

// limitHint says whether a point held (no renewal missed) and, where it did not, what ran out
// by the measures taken: a client-side throttle that waited, the API server's APF rejecting, or the
// machine's CPU when nearly all of it was busy, naming the biggest consumer.
func limitHint(pt scalePoint, cpus int) string {
	others := float64(cpus)*pt.MachineBusy - pt.APIServerCPU - max(pt.EtcdCPU, 0) - pt.DriverCPU
	shares := fmt.Sprintf("kube-apiserver %.0f %%, etcd %s, driver %.0f %%, everything else %.0f %% of one core",
		pt.APIServerCPU, pct(pt.EtcdCPU), pt.DriverCPU, others)
	var limits []string
	if pt.Driver.ThrottleWaits > 0 {
		limits = append(limits, fmt.Sprintf("the client-side rate limiter held %d requests back (%s in all)", pt.Driver.ThrottleWaits, dur(pt.Driver.ThrottleWaited)))
	}
	if pt.APFRejected > 0 {
		limits = append(limits, fmt.Sprintf("API Priority and Fairness rejected %d requests", pt.APFRejected))
	}
	if pt.Driver.Misses.Total() == 0 {
		held := fmt.Sprintf("held (0 missed) with the machine %.0f %% busy: %s", pt.MachineBusy, shares)
		if len(limits) > 0 {
			held += "; but " + strings.Join(limits, "; ")
		}
		return held
	}
	if pt.MachineBusy >= 90 {
		top, name := pt.APIServerCPU, "kube-apiserver"
		for _, c := range []struct {
			v float64
			n string
		}{{pt.EtcdCPU, "etcd"}, {pt.DriverCPU, "the driver"}, {others, "other processes"}} {
			if c.v > top {
				top, name = c.v, c.n
			}
		}
		limits = append(limits, fmt.Sprintf("CPU: the machine's %d cores were %.0f %% busy, most of it %s (%s)", cpus, pt.MachineBusy, name, shares))
	}
	if len(limits) == 0 {
		limits = append(limits, fmt.Sprintf("no throttle, no 429s and the machine %.0f %% busy (%s): see the driver's log", pt.MachineBusy, shares))
	}
	return "**stopped holding** (" + fmt.Sprint(pt.Driver.Misses.Total()) + " missed): " + strings.Join(limits, "; ")
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func pct(v float64) string {
	if v < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f %%", v)
}

func renderAdmission(p func(string, ...any), r *admissionResult, err error) {
	p("")
	p("## Webhook admission latency")
	p("")
	if err != nil {
		p("**Failed:** %v", err)
		p("")
	}
	if r == nil || r.A.Label == "" {
		return
	}
	p("Server-side dry-run create of the reference writer StatefulSet (replicas 1) as cluster-admin: %d requests at concurrency %d "+
		"per configuration, sent in %d rounds that go through (a)–(d) in turn, each block after %d warm-up requests. "+
		"Webhook calls are counted by the no-op handler and by our webhook's decision counter.",
		r.Requests, r.Concurrency, r.Rounds, r.Warmup/max(r.Rounds, 1))
	p("")
	p("| configuration | registered | webhook calls | n | errors | p50 | p99 |")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, l := range []latency{r.A, r.B, r.C, r.D} {
		if l.Label == "" {
			continue
		}
		calls := "—"
		if l.Calls >= 0 {
			calls = fmt.Sprint(l.Calls)
		}
		reg := "none"
		if len(l.Registered) > 0 {
			reg = strings.Join(l.Registered, ", ")
		}
		p("| %s | %s | %s | %d | %d | %s | %s |", l.Label, reg, calls, l.N, l.Errors, dur(l.P50), dur(l.P99))
	}
	ratio := func(x, y latency) (string, string, float64) {
		if x.N == 0 || y.N == 0 {
			return "—", "—", 0
		}
		r50 := x.P50.Seconds() / y.P50.Seconds()
		return fmt.Sprintf("%.2f", r50), fmt.Sprintf("%.2f", x.P99.Seconds()/y.P99.Seconds()), r50
	}
	p("")
	p("| ratio | p50 | p99 | goal |")
	p("| --- | ---: | ---: | --- |")
	c50, c99, cb := ratio(r.C, r.B)
	p("| (c)/(b): our own cost over the floor any webhook pays | %s | %s | %s |", c50, c99,
		verdict(r.C.N > 0 && r.B.N > 0 && cb <= goalAdmissionP50, fmt.Sprintf("≤ %.2f at p50", goalAdmissionP50)))
	b50, b99, _ := ratio(r.B, r.A)
	p("| (b)/(a): the floor, over no webhook | %s | %s | |", b50, b99)
	d50, d99, _ := ratio(r.D, r.A)
	p("| (d)/(a): ours on an unarmed object (matchConditions) | %s | %s | ≈ 1 |", d50, d99)
	if r.C.Decision > 0 {
		p("")
		p("In (c) our webhook's own mean time to decide, its API lookups included, was %s (its decision_duration histogram).", dur(r.C.Decision))
	}
	for _, l := range []latency{r.A, r.B, r.C, r.D} {
		if l.FirstError != "" {
			p("")
			p("%s: first error: %s", l.Label, l.FirstError)
		}
	}
}

func verdict(ok bool, goal string) string {
	if ok {
		return goal + ": met"
	}
	return goal + ": **not met**"
}

// dur prints a duration in the unit a reader compares it in: ms below a second, s above.
func dur(d time.Duration) string {
	switch a := d.Abs(); {
	case a >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case a >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

// secs prints a setting or a window in seconds, as it was given: "15 s", "0.5 s".
func secs(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }

func num(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
