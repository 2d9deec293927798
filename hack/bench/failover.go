package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/election"
)

// candidate is one contender process: an ehdb-writer, or a client-go candidate.
type candidate interface {
	Signal(syscall.Signal)
	Kill() // SIGKILL, and wait for the process to end
}

// contender is an election implementation as the failover trials drive it.
type contender struct {
	Name    string
	Timings string
	Lease   time.Duration
	// Bound is the crash bound the report holds the total against (0: none stated).
	Bound     time.Duration
	leaseName func(shard int) string
	// start runs candidate n of shard and returns it with the file its acquisitions are appended
	// to ({"identity","from"} lines; from = when the acquisition's answer arrived).
	start func(shard, n int) (candidate, string, error)
}

// ours is ehdb-writer, the production writer binary, with the production default timings.
func (b *bench) ours() contender {
	return contender{
		Name:      "ehdb-election",
		Timings:   fmt.Sprintf("lease %d s, renew %d s", leaseSecs, renewSecs),
		Lease:     leaseSecs * time.Second,
		Bound:     (leaseSecs + renewSecs) * time.Second,
		leaseName: func(shard int) string { return election.LeaseName(uint32(shard)) },
		start: func(shard, _ int) (candidate, string, error) {
			w, err := b.startWriter(fmt.Sprintf("bench-failover-%d", shard))
			if err != nil {
				return nil, "", err
			}
			return w, w.Intervals, nil
		},
	}
}

// clientGo is k8s.io/client-go/tools/leaderelection over a LeaseLock with its default timings,
// each candidate a re-executed bench process running as the same ServiceAccount.
func (b *bench) clientGo() contender {
	return contender{
		Name:      "client-go leaderelection",
		Timings:   "lease 15 s, renew deadline 10 s, retry 2 s",
		Lease:     clientGoLease,
		leaseName: func(shard int) string { return fmt.Sprintf("clientgo-shard-%d", shard) },
		start: func(shard, n int) (candidate, string, error) {
			self, err := os.Executable()
			if err != nil {
				return nil, "", err
			}
			file := filepath.Join(b.dir, fmt.Sprintf("acquisitions-clientgo-%d.jsonl", shard))
			p, err := startProc(self, []string{candidateFlag,
				"-kubeconfig", b.writerKubeconfig, "-namespace", namespace,
				"-lease", fmt.Sprintf("clientgo-shard-%d", shard),
				"-identity", fmt.Sprintf("clientgo-%d-%d#%s", shard, n, uuid.NewString()),
				"-acquisitions", file,
			}, filepath.Join(b.dir, fmt.Sprintf("clientgo-%d-%d.log", shard, n)))
			if err != nil {
				return nil, "", err
			}
			b.onCleanup(p.Kill)
			return p, file, nil
		},
	}
}

// failoverResult is one contender's failover distribution and steady-state write rate.
type failoverResult struct {
	Contender, Timings string
	Bound              time.Duration
	Trials             int     // per scenario, as asked
	Graceful           summary // SIGTERM of the holder → the standby's acquisition
	Takeover           summary // crash: the standby's acquisition − (last renewTime + lease duration)
	CrashTotal         summary // crash: SIGKILL of the holder → the standby's acquisition
	Shards             int     // shards running at once, each a holder and a standby
	Window             time.Duration
	WritesPerShard     float64            // Lease writes/s per shard in steady state
	RequestsPerShard   map[string]float64 // API requests on Leases/s per shard, by verb
	Problems           []string           // trials that produced no figure, and why
}

// trial is one shard of a failover run: its holder, whose standby is to take over from it.
type trial struct {
	shard    int
	lease    string
	file     string // the shard's acquisitions
	holder   candidate
	holderID string
}

// measureFailover runs trials graceful and trials crash failovers of c at once on distinct shards,
// so the run costs about one lease duration rather than one per trial. Signals are staggered so
// that the takeovers do not all hit the API server in the same instant: each trial measures one
// failover, not a thundering herd.
func (b *bench) measureFailover(ctx context.Context, c contender) (failoverResult, error) {
	n := b.opts.trials
	res := failoverResult{Contender: c.Name, Timings: c.Timings, Bound: c.Bound, Trials: n, Shards: 2 * n, Window: b.opts.steady}
	var started []candidate
	defer func() {
		for _, p := range started {
			p.Kill()
		}
	}()
	trials := make([]*trial, 2*n)
	names := map[string]bool{}
	// Shard 0 is the admission benchmark's; failover shards start at 1.
	for i := range trials {
		t := &trial{shard: 1 + i, lease: c.leaseName(1 + i)}
		trials[i], names[t.lease] = t, true
	}
	b.step("%s: starting %d holders", c.Name, len(trials))
	for _, t := range trials {
		p, file, err := c.start(t.shard, 0)
		if err != nil {
			return res, err
		}
		t.holder, t.file = p, file
		started = append(started, p)
	}
	for _, t := range trials {
		id, err := b.waitHolder(ctx, t.lease, time.Minute)
		if err != nil {
			return res, err
		}
		t.holderID = id
	}
	b.step("%s: starting %d standbys", c.Name, len(trials))
	for _, t := range trials {
		p, _, err := c.start(t.shard, 1)
		if err != nil {
			return res, err
		}
		started = append(started, p)
	}

	// The steady-state window also gives every standby time to observe its holder's renewals, so
	// a crash trial measures the takeover rule, not a standby that had not looked yet.
	b.step("%s: steady state for %s (%d shards, holder + standby each)", c.Name, secs(b.opts.steady), len(trials))
	var err error
	if res.WritesPerShard, res.RequestsPerShard, err = b.steadyState(ctx, names); err != nil {
		return res, err
	}
	b.step("%s: %d graceful failovers (SIGTERM)", c.Name, n)
	res.Graceful, res.Problems = b.gracefulTrials(ctx, c, trials[:n])
	b.step("%s: %d crash failovers (SIGKILL); the standbys wait out the lease", c.Name, n)
	var problems []string
	res.Takeover, res.CrashTotal, problems = b.crashTrials(ctx, c, trials[n:])
	res.Problems = append(res.Problems, problems...)
	return res, ctx.Err()
}

// steadyState measures, over opts.steady, the Lease writes per shard per second (a watch) and the
// API requests on Leases per shard per second by verb (the API server's own counters).
func (b *bench) steadyState(ctx context.Context, names map[string]bool) (float64, map[string]float64, error) {
	perShard := func(count float64) float64 { return count / float64(len(names)) / b.opts.steady.Seconds() }
	before, err := leaseRequests(ctx, b.cs)
	if err != nil {
		return 0, nil, err
	}
	writes, err := countLeaseWrites(ctx, b.cs, namespace, func(name string) bool { return names[name] }, b.opts.steady)
	if err != nil {
		return 0, nil, err
	}
	after, err := leaseRequests(ctx, b.cs)
	if err != nil {
		return 0, nil, err
	}
	// Only the verbs that are one unit of work each: a WATCH is counted when it ends, not while
	// it streams, and the bench's own LIST and WATCH are no contender's.
	requests := map[string]float64{}
	for _, verb := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if d := after[verb] - before[verb]; d > 0 {
			requests[verb] = perShard(d)
		}
	}
	return perShard(float64(writes)), requests, nil
}

// gracefulTrials sends SIGTERM to each trial's holder and times the standby's acquisition from it.
func (b *bench) gracefulTrials(ctx context.Context, c contender, trials []*trial) (summary, []string) {
	var problems []string
	sent := make([]time.Time, len(trials))
	for i, t := range trials {
		if err := b.checkHolder(ctx, t); err != nil {
			problems = append(problems, "graceful: "+err.Error())
			continue
		}
		sent[i] = time.Now()
		t.holder.Signal(syscall.SIGTERM)
		sleepCtx(ctx, b.opts.stagger)
	}
	// A release that failed would show as a takeover after the lease: allow for it.
	acquired := b.waitAcquisitions(ctx, trials, c.Lease+renewSecs*time.Second+10*time.Second)
	var delays []time.Duration
	for i, t := range trials {
		switch {
		case sent[i].IsZero():
		case acquired[i].IsZero():
			problems = append(problems, fmt.Sprintf("graceful: shard %d: the standby never acquired", t.shard))
		default:
			delays = append(delays, acquired[i].Sub(sent[i]))
		}
	}
	return summarize(delays), problems
}

// crashTrials SIGKILLs each trial's holder, reads the holder's last renewal from the Lease, and
// times the standby's acquisition from the earliest instant the rules allow it and from the kill.
func (b *bench) crashTrials(ctx context.Context, c contender, trials []*trial) (takeover, total summary, problems []string) {
	killed, earliest := make([]time.Time, len(trials)), make([]time.Time, len(trials))
	for i, t := range trials {
		if err := b.checkHolder(ctx, t); err != nil {
			problems = append(problems, "crash: "+err.Error())
			continue
		}
		killed[i] = time.Now()
		t.holder.Kill()
		// The holder's last successful renewal, read once it is dead: nobody may take over before
		// renewTime + leaseDurationSeconds.
		l, err := b.cs.CoordinationV1().Leases(namespace).Get(ctx, t.lease, metav1.GetOptions{})
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("crash: shard %d: reading the lease after the kill: %v", t.shard, err))
			killed[i] = time.Time{}
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != t.holderID || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil:
			problems = append(problems, fmt.Sprintf("crash: shard %d: the lease changed hands before it could be read", t.shard))
			killed[i] = time.Time{}
		default:
			earliest[i] = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		}
		sleepCtx(ctx, b.opts.stagger)
	}
	acquired := b.waitAcquisitions(ctx, trials, 2*c.Lease+renewSecs*time.Second+10*time.Second)
	var takeovers, totals []time.Duration
	for i, t := range trials {
		switch {
		case killed[i].IsZero():
		case acquired[i].IsZero():
			problems = append(problems, fmt.Sprintf("crash: shard %d: the standby never acquired", t.shard))
		default:
			takeovers = append(takeovers, acquired[i].Sub(earliest[i]))
			totals = append(totals, acquired[i].Sub(killed[i]))
		}
	}
	return summarize(takeovers), summarize(totals), problems
}

// checkHolder confirms that the trial's holder still holds its Lease before it is signalled: a
// trial whose holder had already lost it would measure something else.
func (b *bench) checkHolder(ctx context.Context, t *trial) error {
	l, err := b.cs.CoordinationV1().Leases(namespace).Get(ctx, t.lease, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("shard %d: %w", t.shard, err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != t.holderID {
		return fmt.Errorf("shard %d: the first holder lost the lease before the trial", t.shard)
	}
	return nil
}

// waitAcquisitions waits until each trial's file shows an acquisition by someone other than the
// first holder, and returns when each happened (zero where none did within timeout).
func (b *bench) waitAcquisitions(ctx context.Context, trials []*trial, timeout time.Duration) []time.Time {
	at := make([]time.Time, len(trials))
	deadline := time.Now().Add(timeout)
	for {
		missing := 0
		for i, t := range trials {
			if !at[i].IsZero() {
				continue
			}
			if from, err := firstAcquisition(t.file, t.holderID); err == nil && !from.IsZero() {
				at[i] = from
			} else {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return at
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// firstAcquisition is the earliest "from" of an identity other than notBy in an acquisitions
// (or intervals) file; zero if there is none yet. A last line still being written is skipped.
func firstAcquisition(path, notBy string) (time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var first time.Time
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var l acquisitionLine
		if err := json.Unmarshal(line, &l); err != nil {
			return time.Time{}, fmt.Errorf("%s: malformed line %q: %w", path, line, err)
		}
		if l.Identity != notBy && l.Identity != "" && !l.From.IsZero() && (first.IsZero() || l.From.Before(first)) {
			first = l.From
		}
	}
	return first, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
