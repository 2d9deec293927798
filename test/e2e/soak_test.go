package e2e

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// TestSoak drives three writers of one shard through a random schedule of faults — crashes,
// graceful stops, pauses, partitions and slow paths, overlapping — and then runs the safety
// checker over everything they claimed. `make test` runs a short profile; `make soak` runs it as
// long as EHDB_SOAK says (e.g. 20m). The seed is printed; EHDB_SOAK_SEED replays a schedule.
func TestSoak(t *testing.T) {
	duration := 40 * time.Second
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
	t.Logf("soak: %s of random faults, seed %d (replay with EHDB_SOAK_SEED=%d)", duration, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	s := newSystem(t, nil)
	const n = 3
	proxies := make([]*proxy, n)
	kubes := make([]string, n)
	cfg, err := clientcmd.LoadFromFile(s.writerKube)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		proxies[i] = newProxy(t, strings.TrimPrefix(s.c.Config.Host, "https://"))
		for _, cl := range cfg.Clusters {
			cl.Server = "https://" + proxies[i].addr()
		}
		kubes[i] = filepath.Join(s.dir, "soak-"+strconv.Itoa(i)+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, kubes[i]); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	ws := make([]*writer, n)
	start := func(i int) *writer {
		return startWriter(t, s.writerSpec(shard0, kubes[i]))
	}
	for i := range n {
		ws[i] = start(i)
	}
	var pending sync.WaitGroup
	faults := map[string]int{}
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) {
		i := rng.IntN(n)
		mu.Lock()
		w := ws[i]
		mu.Unlock()
		span := time.Duration((0.3 + 2.5*rng.Float64()) * float64(lease))
		switch f := rng.IntN(5); f {
		case 0: // crash, restart after a moment
			faults["kill"]++
			w.Kill()
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			mu.Lock()
			ws[i] = start(i)
			mu.Unlock()
		case 1: // graceful stop (rolling update), restart
			faults["term"]++
			w.stop()
			mu.Lock()
			ws[i] = start(i)
			mu.Unlock()
		case 2: // pause: a GC pause or a frozen VM
			faults["pause"]++
			w.Signal(syscall.SIGSTOP)
			pending.Add(1)
			go func() { defer pending.Done(); time.Sleep(span); w.Signal(syscall.SIGCONT) }()
		case 3: // partition of this writer alone
			faults["partition"]++
			proxies[i].blackhole()
			pending.Add(1)
			go func() { defer pending.Done(); time.Sleep(span); proxies[i].heal() }()
		case 4: // a slow path
			faults["delay"]++
			proxies[i].setDelay(time.Duration(rng.IntN(400)) * time.Millisecond)
			pending.Add(1)
			go func() { defer pending.Done(); time.Sleep(span); proxies[i].heal() }()
		}
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
	}
	pending.Wait()
	t.Logf("soak: faults injected: %v", faults)

	// Liveness after the storm: the shard ends with exactly one valid holder.
	mu.Lock()
	final := append([]*writer(nil), ws...)
	mu.Unlock()
	_, epoch := waitValid(t, lease+renew+10*time.Second, final...)
	ivs := s.checkSafety(shard0)
	t.Logf("soak: %d validity intervals checked, final epoch %d, seed %d", len(ivs), epoch, seed)
	if len(ivs) < 2 {
		t.Errorf("only %d intervals: the soak exercised no handover", len(ivs))
	}
}
