package election

import (
	"context"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/noetl/ehdb-election/election/fake"
)

// chaosStore loses answers (the write commits, the caller gets a timeout), fails calls before they
// arrive, delays them, and drops watches after a few events.
type chaosStore struct {
	inner *fake.LeaseStore
	mu    sync.Mutex
	rnd   *rand.Rand
}

func (c *chaosStore) roll() float64 { c.mu.Lock(); defer c.mu.Unlock(); return c.rnd.Float64() }

func (c *chaosStore) do(f func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	r := c.roll()
	switch {
	case r < 0.05:
		return nil, apierrors.NewServiceUnavailable("chaos: not sent")
	case r < 0.15:
		time.Sleep(time.Duration(c.roll() * float64(150*time.Millisecond)))
	}
	l, err := f()
	if c.roll() < 0.08 {
		time.Sleep(time.Duration(c.roll() * float64(100*time.Millisecond)))
		return nil, context.DeadlineExceeded // lost answer (or lost 409)
	}
	return l, err
}

func (c *chaosStore) Get(ctx context.Context, n string) (*coordinationv1.Lease, error) {
	return c.do(func() (*coordinationv1.Lease, error) { return c.inner.Get(ctx, n) })
}
func (c *chaosStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.do(func() (*coordinationv1.Lease, error) { return c.inner.Create(ctx, l) })
}
func (c *chaosStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.do(func() (*coordinationv1.Lease, error) { return c.inner.Update(ctx, l) })
}

type dropWatch struct {
	w  watch.Interface
	ch chan watch.Event
}

func (d *dropWatch) Stop()                          { d.w.Stop() }
func (d *dropWatch) ResultChan() <-chan watch.Event { return d.ch }

func (c *chaosStore) Watch(ctx context.Context, n string) (watch.Interface, error) {
	if c.roll() < 0.1 {
		return nil, apierrors.NewServiceUnavailable("chaos: no watch")
	}
	w, err := c.inner.Watch(ctx, n)
	if err != nil {
		return nil, err
	}
	keep := 1 + int(c.roll()*6)
	lag := c.roll() < 0.3
	d := &dropWatch{w: w, ch: make(chan watch.Event)}
	go func() {
		defer close(d.ch)
		defer w.Stop()
		for i := 0; i < keep; i++ {
			ev, ok := <-w.ResultChan()
			if !ok {
				return
			}
			if lag {
				time.Sleep(time.Duration(c.roll() * float64(300*time.Millisecond)))
			}
			select {
			case d.ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return d, nil
}

// Several writers through the real Start/run loop (-race), with lost answers, failed and delayed
// calls, dropping and lagging watches, mixed durations, Release at random moments and restarts.
// No outside edits and no deletes (so no named case applies). A sampler reads a, b, a.
func TestRT1StressRunLoop(t *testing.T) { stressRunLoop(t, false, false) }

// The same with one shared identity for every writer (by mistake), and uniform durations.
func TestRT1StressSharedIdentity(t *testing.T) { stressRunLoop(t, true, false) }

// The same with an editor: random outside edits of epoch (any int32, nil, negative), renewTime
// (nil, far past, far future), holder (another writer's identity, never ""), and longer/nil/0
// durations (never shorter: all writers run one duration, so no shortened duration is trusted).
func TestRT1StressOutsideEdits(t *testing.T) { stressRunLoop(t, false, true) }

func stressRunLoop(t *testing.T, shared, edits bool) {
	dur := 40 * time.Second
	if os.Getenv("RT1_STRESS") == "" {
		dur = 5 * time.Second
	}
	mem := fake.NewLeaseStore()
	// Someone creates the Lease first, so later writers have seen it exist (never-seen is excused).
	seed := &chaosStore{inner: mem, rnd: rand.New(rand.NewSource(1))}
	_ = seed
	cs := &chaosStore{inner: mem, rnd: rand.New(rand.NewSource(time.Now().UnixNano()))}
	var mu sync.Mutex
	live := map[*Election]bool{}
	var broken atomic.Int64
	start := func(i int) *Election {
		lease := time.Duration(1+i%3) * time.Second
		id := NewIdentity("w")
		if shared || edits {
			lease = 2 * time.Second
		}
		if shared {
			id = "w#shared"
		}
		cfg := testConfig(lease, lease/4)
		e, err := Start(context.Background(), cs, cfg, Options{Identity: id, Registerer: newPlainRegistry(), Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		live[e] = true
		mu.Unlock()
		return e
	}
	first := start(0)
	waitFor(t, "first acquires", func() bool { return first.Token().Valid })
	for i := 1; i < 4; i++ {
		start(i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // sampler
		defer wg.Done()
		lastEpoch := map[*Election]uint64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			es := make([]*Election, 0, len(live))
			for e := range live {
				es = append(es, e)
			}
			mu.Unlock()
			for _, a := range es {
				ta := a.Token()
				if ta.Epoch < lastEpoch[a] {
					t.Errorf("BROKEN: epoch went down %d -> %d", lastEpoch[a], ta.Epoch)
					broken.Add(1)
				}
				lastEpoch[a] = ta.Epoch
				if !ta.Valid {
					continue
				}
				for _, b := range es {
					if a == b {
						continue
					}
					tb := b.Token()
					ta2 := a.Token()
					if tb.Valid && ta2.Valid && ta2.Epoch == ta.Epoch {
						t.Errorf("BROKEN: %s epoch %d and %s epoch %d valid at once", a.Identity(), ta.Epoch, b.Identity(), tb.Epoch)
						broken.Add(1)
					}
				}
			}
		}
	}()
	if edits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(50+rnd.Intn(700)) * time.Millisecond):
				}
				l, err := mem.Get(context.Background(), testLease)
				if err != nil {
					continue
				}
				switch rnd.Intn(9) {
				case 0:
					v := int32(rnd.Intn(1 << 20))
					l.Spec.LeaseTransitions = &v
				case 1:
					v := []int32{-1, 0, 1<<31 - 2, 1<<31 - 1}[rnd.Intn(4)]
					l.Spec.LeaseTransitions = &v
				case 2:
					l.Spec.LeaseTransitions = nil
				case 3:
					l.Spec.RenewTime = nil
				case 4:
					l.Spec.RenewTime = microTime(time.Now().Add(time.Duration(rnd.Intn(2)*2-1) * 1000 * time.Hour))
				case 5:
					mu.Lock()
					for e := range live {
						id := e.Identity()
						l.Spec.HolderIdentity = &id
						break
					}
					mu.Unlock()
				case 6:
					v := []int32{2, 3, 4}[rnd.Intn(3)]
					if holderOf(l) == "" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= v {
						l.Spec.LeaseDurationSeconds = &v
					}
				case 7:
					l.Spec.LeaseDurationSeconds = nil
				case 8:
					l.Labels = map[string]string{"x": time.Now().String()[:10]}
				}
				if holderOf(l) == "" {
					continue // a blanked holder would be an impersonated release (named)
				}
				_, _ = mem.Update(context.Background(), l)
			}
		}()
	}
	deadline := time.Now().Add(dur)
	n := 4
	for time.Now().Before(deadline) && broken.Load() == 0 {
		time.Sleep(time.Duration(200+rand.Intn(800)) * time.Millisecond)
		mu.Lock()
		var victim *Election
		for e := range live {
			if victim == nil || rand.Intn(2) == 0 {
				victim = e
			}
		}
		mu.Unlock()
		if rand.Intn(2) == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = victim.Release(ctx)
			cancel()
		} else {
			victim.cancel() // crash
			<-victim.done
		}
		mu.Lock()
		delete(live, victim)
		mu.Unlock()
		start(n)
		n++
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	for e := range live {
		e.cancel()
		<-e.done
	}
	mu.Unlock()
	t.Logf("%d writers run; final epoch %d", n, epochOf(mustLease(t, mem)))
}

// Release from OnEvent (on Acquired, Renewed, HeldByOther, Lost) through the run loop, with chaos;
// released writers are replaced; a sampler looks for an overlap.
func TestRT1ReleaseFromOnEvent(t *testing.T) {
	mem := fake.NewLeaseStore()
	cs := &chaosStore{inner: mem, rnd: rand.New(rand.NewSource(time.Now().UnixNano()))}
	var mu sync.Mutex
	live := map[*Election]bool{}
	outs := []Outcome{Acquired, Renewed, HeldByOther, Lost}
	var releases atomic.Int64
	start := func(i int) {
		var e atomic.Pointer[Election]
		on := outs[i%len(outs)]
		cfg := testConfig(time.Second, 250*time.Millisecond)
		ee, err := Start(context.Background(), cs, cfg, Options{Identity: NewIdentity("r"), Registerer: newPlainRegistry(), Logger: discard,
			OnEvent: func(ev Event) {
				if p := e.Load(); p != nil && (ev.Outcome == on || ev.Outcome == Renewed) && rand.Intn(4) == 0 {
					_ = p.Release(context.Background())
					releases.Add(1)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		e.Store(ee)
		mu.Lock()
		live[ee] = true
		mu.Unlock()
	}
	n := 0
	for ; n < 4; n++ {
		start(n)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		var es []*Election
		for e := range live {
			select {
			case <-e.done:
				delete(live, e)
			default:
				es = append(es, e)
			}
		}
		mu.Unlock()
		for len(es) < 4 {
			start(n)
			n++
			es = append(es, nil)
		}
		for _, a := range es {
			if a == nil {
				continue
			}
			ta := a.Token()
			if !ta.Valid {
				continue
			}
			for _, b := range es {
				if b != nil && a != b {
					if tb, ta2 := b.Token(), a.Token(); tb.Valid && ta2.Valid && ta2.Epoch == ta.Epoch {
						t.Fatalf("BROKEN: epochs %d and %d valid at once", ta.Epoch, tb.Epoch)
					}
				}
			}
		}
	}
	mu.Lock()
	for e := range live {
		e.cancel()
		<-e.done
	}
	mu.Unlock()
	t.Logf("%d writers, %d releases from OnEvent, final epoch %d", n, releases.Load(), epochOf(mustLease(t, mem)))
}
