package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/internal/harness"
)

// The soak's fault types. Every one is injected at least once per run, whatever its length.
var soakFaults = []string{
	"kill",             // SIGKILL of a writer, restarted after a moment
	"term",             // graceful stop (a rolling update), restarted
	"pause",            // SIGSTOP for a while: a GC pause or a frozen VM
	"partition",        // one writer's path to the API server blackholed for a while
	"delay",            // one writer's path slowed
	"apiserver",        // kube-apiserver stopped for a while and restarted (etcd keeps its data)
	"rbac",             // the writers' RoleBinding deleted for a while, then recreated
	"webhook",          // the admission webhook stopped for a while, then started again
	"lease-delete",     // a shard's Lease deleted by a non-participant
	"lease-holder",     // ... its spec.holderIdentity set to an identity no writer has
	"lease-renew-time", // ... its spec.renewTime moved (minutes into the past, or a little into the future)
	"lease-duration",   // ... its spec.leaseDurationSeconds changed (shorter or longer)
	"lease-epoch",      // ... its spec.leaseTransitions raised or lowered
}

// soakSlot is one writer's place: its shard, its own path to the API server and its own clock
// (a node's: a restarted writer keeps it).
type soakSlot struct {
	name   string
	shard  string
	proxy  *proxy
	kube   string
	offset time.Duration
	rate   float64

	mu sync.Mutex
	w  *writer
}

func (sl *soakSlot) writer() *writer {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.w
}

// TestSoak drives the writers of two shards through a random, overlapping schedule of every fault
// in soakFaults, each writer on a clock of its own (an offset of up to ±EHDB_SOAK_OFFSET and a
// rate within ±EHDB_SOAK_DRIFT of the machine's), while a sampler scrapes every writer's /metrics.
// Then it checks: no two validity intervals of a shard overlap, epochs strictly increase (except
// across a deliberate epoch reset), no scrape shows token_valid 1 outside the writer's recorded
// validity, every fault type ran, and each shard ends with a valid holder. It reports the longest
// time each shard had no valid holder.
//
// `make test` runs a short profile; `make soak` runs it as long as EHDB_SOAK says (e.g. 20m). The
// seed is printed; EHDB_SOAK_SEED replays a schedule, EHDB_SOAK_FAULTS=kill,pause,... narrows it.
func TestSoak(t *testing.T) {
	duration := 45 * time.Second
	if v := os.Getenv("EHDB_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("EHDB_SOAK=%q: %v", v, err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("EHDB_SOAK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("EHDB_SOAK_SEED=%q: %v", v, err)
		}
	}
	kinds := soakFaults
	if v := os.Getenv("EHDB_SOAK_FAULTS"); v != "" {
		kinds = strings.Split(v, ",")
		for _, k := range kinds {
			if !slices.Contains(soakFaults, k) {
				t.Fatalf("EHDB_SOAK_FAULTS: unknown fault %q (known: %v)", k, soakFaults)
			}
		}
	}
	// The election tolerates a documented clock-rate difference between nodes; stay inside it.
	drift := envFloat(t, "EHDB_SOAK_DRIFT", 0.005)
	maxOffset := envDuration(t, "EHDB_SOAK_OFFSET", 2*time.Minute)
	t.Logf("soak: %s of random faults, seed %d (replay with EHDB_SOAK_SEED=%d), faults %v, clock offsets within ±%s, rates within ±%g",
		duration, seed, seed, kinds, maxOffset, drift)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	// The lease guard in Warn mode: the API server lets a non-participant delete and edit Leases
	// (and says so in a warning), so the election itself must stay safe.
	s := newSystem(t, map[string]any{"leaseGuard": map[string]any{"validationActions": []any{"Warn"}}})
	if !s.c.Local() {
		t.Skip("the soak stops and starts the API server: it needs the local control plane")
	}
	ctx := context.Background()
	cs := s.c.Clientset()
	sk := &soak{t: t, s: s, counts: map[string]int{}, binding: s.writerBinding(),
		deleted: map[string]time.Time{}, started: map[string]time.Time{}}
	sk.startWebhook()

	cfg, err := clientcmd.LoadFromFile(s.writerKube)
	if err != nil {
		t.Fatal(err)
	}
	shards := []string{shard0, shard1}
	var slots []*soakSlot
	for i, shard := range []string{shard0, shard0, shard0, shard1, shard1} {
		sl := &soakSlot{
			name:   fmt.Sprintf("%s/%d", shard, i),
			shard:  shard,
			proxy:  newProxy(t, strings.TrimPrefix(s.c.Config.Host, "https://")),
			kube:   filepath.Join(s.dir, "soak-"+strconv.Itoa(i)+".kubeconfig"),
			offset: time.Duration((2*rng.Float64() - 1) * float64(maxOffset)).Round(time.Millisecond),
			rate:   1 + (2*rng.Float64()-1)*drift,
		}
		for _, cl := range cfg.Clusters {
			cl.Server = "https://" + sl.proxy.addr()
		}
		if err := clientcmd.WriteToFile(*cfg, sl.kube); err != nil {
			t.Fatal(err)
		}
		t.Logf("soak: writer %s: clock offset %s, rate %.5f", sl.name, sl.offset, sl.rate)
		slots = append(slots, sl)
	}
	start := func(sl *soakSlot) {
		sk.waitBornSafe(sl.shard)
		spec := s.writerSpec(sl.shard, sl.kube)
		spec.ClockOffset, spec.ClockRate = sl.offset, sl.rate
		w := startWriter(t, spec)
		sl.mu.Lock()
		sl.w = w
		sl.mu.Unlock()
		sk.mu.Lock()
		sk.started[sl.shard] = time.Now()
		sk.mu.Unlock()
	}
	for _, sl := range slots {
		start(sl)
	}
	began := time.Now()

	// The sampler: every writer's /metrics, continuously, with each scrape's start and end.
	var samplesMu sync.Mutex
	var samples []scrapeSample
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	for _, sl := range slots {
		sampling.Add(1)
		go func() {
			defer sampling.Done()
			for {
				select {
				case <-stopSampling:
					return
				case <-time.After(time.Duration(50+rand.IntN(150)) * time.Millisecond):
				}
				w := sl.writer()
				t0 := time.Now()
				tok, err := w.Token()
				t1 := time.Now()
				if err != nil {
					continue // paused, killed or restarting
				}
				samplesMu.Lock()
				samples = append(samples, scrapeSample{Identity: w.Identity, Start: t0, End: t1, Valid: tok.Valid, Epoch: tok.Epoch})
				samplesMu.Unlock()
			}
		}()
	}

	// The schedule: rounds of every fault type in random order, until the time is up and every
	// type ran at least once.
	deadline := time.Now().Add(duration)
	giveUp := deadline.Add(5 * time.Minute) // a fault type that can never be injected must not hang the soak
	for round := 0; (time.Now().Before(deadline) || sk.missing(kinds) != nil) && time.Now().Before(giveUp); round++ {
		order := slices.Clone(kinds)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, kind := range order {
			if round > 0 && !time.Now().Before(deadline) && sk.count(kind) > 0 {
				continue
			}
			sl := slots[rng.IntN(len(slots))]
			shard := shards[rng.IntN(len(shards))]
			span := time.Duration((0.3 + 2.5*rng.Float64()) * float64(lease))
			sk.inject(ctx, kind, sl, shard, span, rng, start)
			time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		}
	}
	sk.pending.Wait()
	counts := sk.snapshot()
	t.Logf("soak: faults injected: %v", counts)
	if m := sk.missing(kinds); m != nil {
		t.Errorf("fault types never injected: %v", m)
	}

	// Liveness after the storm: every shard ends with exactly one valid holder.
	for _, shard := range shards {
		var ws []*writer
		for _, sl := range slots {
			if sl.shard == shard {
				ws = append(ws, sl.writer())
			}
		}
		_, epoch := waitValid(t, lease+renew+30*time.Second, ws...)
		t.Logf("soak: shard %s ends with a valid holder at epoch %d", shard, epoch)
	}
	close(stopSampling)
	sampling.Wait()
	ended := time.Now()

	// The webhook came back from every restart: it answers an admission review again (allowed or
	// refused on its own reasons; never "failed calling webhook").
	_, err = cs.AppsV1().StatefulSets(s.ns).Create(ctx, referenceWriter(s.ns, writerSA, 2, env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "true")),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("after the soak the webhook does not answer: %v", err)
	}
	t.Logf("soak: an armed StatefulSet, dry run, after the soak: %v", errOrAdmitted(err))

	resets := sk.resetTimes()
	var all []interval
	for _, shard := range shards {
		ivs := s.checkSafetyResets(shard, resets)
		all = append(all, ivs...)
		gap, at := longestGap(ivs, began, ended)
		var last uint64
		if len(ivs) > 0 {
			last = ivs[len(ivs)-1].Epoch
		}
		t.Logf("soak: shard %s: %d validity intervals, last epoch %d, longest time without a valid holder %s (from %s; faults around it: %s)",
			shard, len(ivs), last, gap.Round(time.Millisecond), at.Format(time.StampMilli), sk.around(at.Add(-lease-renew), at.Add(gap)))
		if len(ivs) < 2 {
			t.Errorf("shard %s: only %d intervals: the soak exercised no handover", shard, len(ivs))
		}
	}
	samplesMu.Lock()
	defer samplesMu.Unlock()
	valid := 0
	for _, sm := range samples {
		if sm.Valid {
			valid++
		}
	}
	t.Logf("soak: %d scrapes cross-checked against the recorded intervals (%d showed token_valid 1), %d epoch resets by non-participants",
		len(samples), valid, len(resets))
	if valid == 0 {
		t.Errorf("no scrape ever showed token_valid 1: the cross-check saw nothing")
	}
	reportViolations(t, "scrapes", scrapeViolations(samples, all))
	if t.Failed() {
		t.Logf("soak: seed %d; the schedule's last faults:\n%s", seed, sk.tail(40))
	}
}

// soak is the fault injector's state.
type soak struct {
	t *testing.T
	s *system

	mu      sync.Mutex
	counts  map[string]int
	log     []soakEvent
	resets  []time.Time
	webhook *harness.Webhook
	binding *rbacv1.RoleBinding  // the chart's writer RoleBinding, as installed
	deleted map[string]time.Time // shard -> when its Lease was last deleted
	started map[string]time.Time // shard -> when a writer of it last started

	// api is held shared by every control-plane call of a fault and exclusively while the API
	// server is down, so those calls wait for it rather than fail.
	api     sync.RWMutex
	kindMu  sync.Map // fault type -> *sync.Mutex: one injection of a type at a time
	pending sync.WaitGroup
	intrude int
}

type soakEvent struct {
	at   time.Time
	what string
}

func (sk *soak) note(kind, detail string) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.counts[kind]++
	sk.log = append(sk.log, soakEvent{time.Now(), kind + " " + detail})
}

func (sk *soak) count(kind string) int {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return sk.counts[kind]
}

func (sk *soak) snapshot() map[string]int {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	out := map[string]int{}
	for k, v := range sk.counts {
		out[k] = v
	}
	return out
}

func (sk *soak) missing(kinds []string) []string {
	var out []string
	for _, k := range kinds {
		if sk.count(k) == 0 {
			out = append(out, k)
		}
	}
	return out
}

func (sk *soak) resetTimes() []time.Time {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return slices.Clone(sk.resets)
}

// around lists the faults injected in [from, to].
func (sk *soak) around(from, to time.Time) string {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	var out []string
	for _, e := range sk.log {
		if !e.at.Before(from) && !e.at.After(to) {
			out = append(out, e.at.Format("15:04:05.000")+" "+e.what)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func (sk *soak) tail(n int) string {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	var b strings.Builder
	for _, e := range sk.log[max(0, len(sk.log)-n):] {
		fmt.Fprintf(&b, "  %s %s\n", e.at.Format("15:04:05.000"), e.what)
	}
	return b.String()
}

func (sk *soak) kindLock(kind string) *sync.Mutex {
	m, _ := sk.kindMu.LoadOrStore(kind, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// async runs a fault that lasts a while on its own goroutine, one of each type at a time.
func (sk *soak) async(kind string, f func()) {
	sk.pending.Add(1)
	go func() {
		defer sk.pending.Done()
		m := sk.kindLock(kind)
		m.Lock()
		defer m.Unlock()
		f()
	}()
}

// call runs one control-plane call of a fault, waiting out an API server restart and retrying
// transient errors for a while.
func (sk *soak) call(what string, f func(context.Context) error) {
	sk.api.RLock()
	defer sk.api.RUnlock()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil, nil
	})
	if err != nil {
		sk.t.Errorf("soak: %s: %v (last error: %v)", what, err, last)
	}
}

func (sk *soak) startWebhook() {
	w, err := harness.StartWebhook(context.Background(), sk.s.c, binaries(sk.t)+"/webhook", sk.s.ns, release, sk.s.dir)
	if err != nil {
		sk.t.Errorf("soak: starting the webhook: %v", err)
		return
	}
	sk.mu.Lock()
	sk.webhook = w
	sk.mu.Unlock()
	sk.t.Cleanup(w.Stop)
}

func (sk *soak) inject(ctx context.Context, kind string, sl *soakSlot, shard string, span time.Duration, rng *rand.Rand, start func(*soakSlot)) {
	t, s := sk.t, sk.s
	w := sl.writer()
	switch kind {
	case "kill":
		sk.note(kind, sl.name)
		w.Kill()
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		start(sl)
	case "term":
		sk.note(kind, sl.name)
		w.stop()
		start(sl)
	case "pause":
		sk.note(kind, fmt.Sprintf("%s for %s", sl.name, span.Round(time.Millisecond)))
		w.Signal(syscall.SIGSTOP)
		sk.pending.Add(1)
		go func() { defer sk.pending.Done(); time.Sleep(span); w.Signal(syscall.SIGCONT) }()
	case "partition":
		sk.note(kind, fmt.Sprintf("%s for %s", sl.name, span.Round(time.Millisecond)))
		sl.proxy.blackhole()
		sk.pending.Add(1)
		go func() { defer sk.pending.Done(); time.Sleep(span); sl.proxy.heal() }()
	case "delay":
		d := time.Duration(rng.IntN(400)) * time.Millisecond
		sk.note(kind, fmt.Sprintf("%s by %s for %s", sl.name, d, span.Round(time.Millisecond)))
		sl.proxy.setDelay(d)
		sk.pending.Add(1)
		go func() { defer sk.pending.Done(); time.Sleep(span); sl.proxy.heal() }()
	case "apiserver":
		sk.async(kind, func() {
			sk.api.Lock()
			defer sk.api.Unlock()
			sk.note(kind, fmt.Sprintf("down for %s", span.Round(time.Millisecond)))
			if err := s.c.StopAPIServer(); err != nil {
				t.Errorf("soak: stopping the API server: %v", err)
			}
			time.Sleep(span)
			if err := s.c.StartAPIServer(context.Background()); err != nil {
				t.Errorf("soak: restarting the API server: %v", err)
			}
		})
	case "rbac":
		sk.async(kind, func() {
			rbs := s.c.Clientset().RbacV1().RoleBindings(s.ns)
			rb := sk.binding.DeepCopy()
			// The webhook's RBAC entry fails closed: an RBAC change waits for a webhook that is
			// down (the webhook fault holds its lock until the webhook serves again).
			wh := sk.kindLock("webhook")
			wh.Lock()
			sk.call("revoking the writers' RoleBinding", func(ctx context.Context) error {
				err := rbs.Delete(ctx, rb.Name, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
			wh.Unlock()
			sk.note(kind, fmt.Sprintf("revoked for %s", span.Round(time.Millisecond)))
			time.Sleep(span)
			rb.ResourceVersion, rb.UID = "", ""
			sk.call("restoring the writers' RoleBinding", func(ctx context.Context) error {
				_, err := rbs.Create(ctx, rb, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			})
		})
	case "webhook":
		sk.async(kind, func() {
			sk.mu.Lock()
			wh := sk.webhook
			sk.mu.Unlock()
			sk.note(kind, fmt.Sprintf("down for %s", span.Round(time.Millisecond)))
			if wh != nil {
				wh.Stop()
			}
			time.Sleep(span)
			sk.api.RLock()
			defer sk.api.RUnlock()
			sk.startWebhook()
		})
	case "lease-delete", "lease-holder", "lease-renew-time", "lease-duration", "lease-epoch":
		sk.editLease(ctx, kind, shard, rng)
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// editLease is a non-participant (an administrator) deleting or editing one spec field of a
// shard's Lease. A Lease that does not exist at the moment (just deleted) is left alone, and the
// fault is tried again in a later round.
func (sk *soak) editLease(ctx context.Context, kind, shard string, rng *rand.Rand) {
	leases := sk.s.c.Clientset().CoordinationV1().Leases(sk.s.ns)
	name := election.LeaseName(shardOrdinal(sk.t, shard))
	sk.api.RLock()
	defer sk.api.RUnlock()
	if kind == "lease-delete" {
		// The election documents what a deletion can break and leaves to the lease guard: a
		// process that never saw the Lease exist creates it at once and may overlap the holder
		// whose Lease was deleted, and a create in flight across someone else's
		// create-then-delete may land. The schedule stays out of both: no deletion within two
		// seconds of a writer's start (it may not have read the Lease yet) or of the Lease's
		// creation; no writer starts while a deleted Lease may still back a token (waitBornSafe).
		sk.mu.Lock()
		recent := time.Since(sk.started[shard]) < 2*time.Second
		sk.mu.Unlock()
		if l, err := leases.Get(ctx, name, metav1.GetOptions{}); err != nil || recent || time.Since(l.CreationTimestamp.Time) < 2*time.Second {
			return // tried again in a later round
		}
		err := leases.Delete(ctx, name, metav1.DeleteOptions{})
		switch {
		case err == nil:
			sk.mu.Lock()
			sk.resets = append(sk.resets, time.Now())
			sk.deleted[shard] = time.Now()
			sk.mu.Unlock()
			sk.note(kind, name)
		case !apierrors.IsNotFound(err):
			sk.t.Errorf("soak: deleting %s: %v", name, err)
		}
		return
	}
	// Draw the edit first, so the schedule does not depend on how many conflicts the retry meets.
	r := rng.Float64()
	k := int32(1 + rng.IntN(5))
	sk.intrude++
	intruder := fmt.Sprintf("intruder#%d", sk.intrude)
	var detail string
	var lowered bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := &l.Spec
		switch kind {
		case "lease-holder":
			detail = fmt.Sprintf("holder %q -> %q", ptr.Deref(spec.HolderIdentity, ""), intruder)
			spec.HolderIdentity = ptr.To(intruder)
		case "lease-renew-time":
			// Up to ten minutes back, or up to a lease duration forward, from the record's own
			// renewTime (written on its holder's clock): a wall-clock jump far into the future
			// would only stall every candidate whose clock is behind it (the takeover rule's
			// wall-clock half), which the soak's liveness check is not about.
			shift := time.Duration(r*float64(10*time.Minute+lease)) - 10*time.Minute
			at := time.Now()
			if spec.RenewTime != nil {
				at = spec.RenewTime.Time
			}
			detail = fmt.Sprintf("renewTime %+v", shift.Round(time.Millisecond))
			spec.RenewTime = &metav1.MicroTime{Time: at.Add(shift)}
		case "lease-duration":
			d := []int32{1, 2, 6, 10}[int(r*4)]
			detail = fmt.Sprintf("leaseDurationSeconds %d -> %d", ptr.Deref(spec.LeaseDurationSeconds, 0), d)
			spec.LeaseDurationSeconds = ptr.To(d)
		case "lease-epoch":
			cur := ptr.Deref(spec.LeaseTransitions, 0)
			next := cur + k
			if r < 0.5 {
				next = max(0, cur-k)
			}
			lowered = next < cur
			detail = fmt.Sprintf("leaseTransitions %d -> %d", cur, next)
			spec.LeaseTransitions = ptr.To(next)
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	switch {
	case err == nil:
		if lowered {
			sk.mu.Lock()
			sk.resets = append(sk.resets, time.Now())
			sk.mu.Unlock()
		}
		sk.note(kind, name+": "+detail)
	case apierrors.IsNotFound(err):
	default:
		sk.t.Errorf("soak: %s of %s: %v", kind, name, err)
	}
}

// waitBornSafe holds a writer's start while its shard's Lease is deleted and may still back a
// token (for a lease duration after the deletion), unless the Lease exists again: a process born
// in that window never saw the Lease and may create it at once, overlapping — a documented
// non-guarantee of the election that the chart's lease guard closes by refusing deletes.
func (sk *soak) waitBornSafe(shard string) {
	sk.mu.Lock()
	deleted := sk.deleted[shard]
	sk.mu.Unlock()
	safeAt := deleted.Add(lease + 500*time.Millisecond)
	if time.Now().After(safeAt) {
		return
	}
	leases := sk.s.c.Clientset().CoordinationV1().Leases(sk.s.ns)
	name := election.LeaseName(shardOrdinal(sk.t, shard))
	for time.Now().Before(safeAt) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := leases.Get(ctx, name, metav1.GetOptions{})
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func shardOrdinal(t *testing.T, podName string) uint32 {
	i := strings.LastIndexByte(podName, '-')
	n, err := strconv.ParseUint(podName[i+1:], 10, 32)
	if err != nil {
		t.Fatalf("pod name %q has no ordinal", podName)
	}
	return uint32(n)
}

func errOrAdmitted(err error) string {
	if err == nil {
		return "admitted"
	}
	return "refused: " + err.Error()
}

func envFloat(t *testing.T, key string, def float64) float64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return f
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return d
}
