package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// What ConfigMap reads may hold. A review keeps only the keys that can matter (keyFilter), at
// most reviewKeptBytes of them; every review in the process together at most processKeptBytes,
// a review waiting (until its deadline) for its share rather than being refused; and at most
// maxConfigMapStreams responses are being read at once, each through a small buffer.
const (
	reviewKeptBytes  = 1 << 20
	processKeptBytes = 8 << 20
	// requesterKeptBytes is a requester's share of processKeptBytes (requesterOf): a review that
	// would wait for the pool while its own requester's reviews hold this much is refused at
	// once (errOwnLoad) rather than made to wait. Red team J's 30 loops of Pods reading 20
	// ConfigMaps of 50 KB each held the pool piecemeal, every review waiting for the rest
	// (hold-and-wait), until their deadlines ran out on the Lease read after it: "could not
	// verify", and the Pods entry admitted 46 of 220 unjudged (Pods fail open when the guard
	// cannot look). A review's own requester's load is not an outage.
	requesterKeptBytes  = processKeptBytes / 4
	maxConfigMapStreams = 8
	// wholeConfigMapBytes is more than any ConfigMap etcd stores holds.
	wholeConfigMapBytes = 3 << 20
	// configMapFetchTimeout bounds one shared GET (its waiters each keep their own deadline).
	configMapFetchTimeout = 10 * time.Second
)

// reviewLoad is what one review has loaded: the ConfigMap keys it may keep, when it began (a GET
// it shares must have started after that), and the bytes it holds of the process budget.
type reviewLoad struct {
	start time.Time
	// needs is the filter per ConfigMap; nil keeps every key (callers outside the handler).
	needs map[string]*keyFilter
	// who is the review's requester (requesterOf; "" for none: it waits as long as it must).
	who  string
	mu   sync.Mutex
	pool *keptPool
	held int64
	// ownLoad is set once a charge was refused because who's reviews held their share.
	ownLoad bool
}

// errOwnLoad is a charge refused because the review's own requester holds its share of the pool.
var errOwnLoad = errors.New("its requester's reviews hold their share of the guard's ConfigMap budget")

// keptPool is the process's budget of kept ConfigMap bytes, with what each requester holds.
type keptPool struct {
	sem *semaphore.Weighted
	mu  sync.Mutex
	by  map[string]int64
}

func newKeptPool() *keptPool {
	return &keptPool{sem: semaphore.NewWeighted(processKeptBytes), by: map[string]int64{}}
}

// acquire takes n bytes for a review of who, waiting until ctx is done unless who holds
// requesterKeptBytes already (errOwnLoad, at once or when the wait ends).
func (p *keptPool) acquire(ctx context.Context, who string, n int64) error {
	if !p.sem.TryAcquire(n) {
		if p.over(who) {
			return errOwnLoad
		}
		if err := p.sem.Acquire(ctx, n); err != nil {
			if p.over(who) {
				return errOwnLoad
			}
			return err
		}
	}
	if who != "" {
		p.mu.Lock()
		p.by[who] += n
		p.mu.Unlock()
	}
	return nil
}

func (p *keptPool) over(who string) bool {
	if who == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[who] >= requesterKeptBytes
}

func (p *keptPool) release(who string, n int64) {
	p.sem.Release(n)
	if who != "" {
		p.mu.Lock()
		if p.by[who] -= n; p.by[who] <= 0 {
			delete(p.by, who)
		}
		p.mu.Unlock()
	}
}

type reviewLoadKey struct{}

// withReviewLoad returns ctx carrying a review's load; release it when the review is answered.
func withReviewLoad(ctx context.Context, l *reviewLoad) context.Context {
	return context.WithValue(ctx, reviewLoadKey{}, l)
}

func loadOf(ctx context.Context) *reviewLoad {
	l, _ := ctx.Value(reviewLoadKey{}).(*reviewLoad)
	return l
}

// newReviewLoad begins the load of a review of the given workloads.
func newReviewLoad(start time.Time, ws ...*Workload) *reviewLoad {
	return &reviewLoad{start: start, needs: configMapNeeds(ws...)}
}

func (l *reviewLoad) filter(name string) *keyFilter {
	if l == nil || l.needs == nil {
		return nil
	}
	if f, ok := l.needs[name]; ok {
		return f
	}
	return &keyFilter{} // read by nothing the review judges: no key matters
}

// charge takes n bytes of pool for the review, waiting until ctx is done (keptPool.acquire).
func (l *reviewLoad) charge(ctx context.Context, pool *keptPool, n int64) error {
	if l == nil || n == 0 {
		return nil
	}
	l.mu.Lock()
	over := l.held+n > reviewKeptBytes
	l.mu.Unlock()
	if over {
		return errTooLarge
	}
	if err := pool.acquire(ctx, l.who, n); err != nil {
		if errors.Is(err, errOwnLoad) {
			l.mu.Lock()
			l.ownLoad = true
			l.mu.Unlock()
		}
		return fmt.Errorf("waiting for the guard's memory budget: %w", err)
	}
	l.mu.Lock()
	l.pool, l.held = pool, l.held+n
	l.mu.Unlock()
	return nil
}

// starvedByOwnLoad reports whether a charge of the review was refused for its requester's load.
func (l *reviewLoad) starvedByOwnLoad() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ownLoad
}

// release gives back everything the review holds.
func (l *reviewLoad) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pool != nil && l.held > 0 {
		l.pool.release(l.who, l.held)
	}
	l.held = 0
}

// configMapReader reads ConfigMaps for an APIResolver: as a stream that keeps only the keys a
// review needs, under the process budget, sharing a GET among concurrent reviews with the same
// needs when it began after each of them did (so no review sees a ConfigMap older than itself).
type configMapReader struct {
	client  APIClient
	streams *semaphore.Weighted
	kept    *keptPool
	mu      sync.Mutex
	flights map[string]*cmFlights
	// cache keeps what reads kept, by the resourceVersion they were read at.
	cache      map[string]cmCached
	cacheBytes int64
}

func newConfigMapReader(c APIClient) *configMapReader {
	return &configMapReader{client: c, streams: semaphore.NewWeighted(maxConfigMapStreams), kept: newKeptPool(), flights: map[string]*cmFlights{}, cache: map[string]cmCached{}}
}

// cmFlights is the GET in flight for one key and the one that will follow it.
type cmFlights struct {
	cur, next *cmFlight
}

type cmFlight struct {
	started time.Time
	done    chan struct{}
	fact    ConfigMapFact
	kept    int64
}

// get returns the ConfigMap as the review in ctx may see it.
func (r *configMapReader) get(ctx context.Context, namespace, name string) ConfigMapFact {
	l := loadOf(ctx)
	since := time.Now()
	if l != nil {
		since = l.start
	}
	f := l.filter(name)
	key := namespace + "/" + name + "\x02" + f.signature()

	r.mu.Lock()
	fl := r.flights[key]
	if fl == nil {
		fl = &cmFlights{}
		r.flights[key] = fl
	}
	var mine *cmFlight
	switch {
	case fl.cur != nil && !fl.cur.started.Before(since):
		mine = fl.cur
	case fl.cur != nil:
		if fl.next == nil {
			fl.next = &cmFlight{done: make(chan struct{})}
		}
		mine = fl.next
	default:
		fl.cur = &cmFlight{started: time.Now(), done: make(chan struct{})}
		mine = fl.cur
		go r.fly(key, fl, fl.cur, namespace, name, f)
	}
	r.mu.Unlock()

	select {
	case <-mine.done:
	case <-ctx.Done():
		return ConfigMapFact{Err: fmt.Errorf("getting ConfigMap %s/%s: %w", namespace, name, ctx.Err())}
	}
	if mine.fact.Err == nil {
		if err := l.charge(ctx, r.kept, mine.kept); err != nil {
			return ConfigMapFact{Err: fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err)}
		}
	}
	return mine.fact
}

// fly performs one GET, then starts the one queued behind it, if any.
func (r *configMapReader) fly(key string, fl *cmFlights, f *cmFlight, namespace, name string, filter *keyFilter) {
	for f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), configMapFetchTimeout)
		f.fact, f.kept = r.fetch(ctx, namespace, name, filter)
		cancel()
		close(f.done)
		r.mu.Lock()
		f = fl.next
		fl.cur, fl.next = f, nil
		if f == nil {
			delete(r.flights, key)
		} else {
			f.started = time.Now()
		}
		r.mu.Unlock()
	}
}

// fetch GETs the ConfigMap as a stream and keeps what filter accepts: at most reviewKeptBytes,
// or a whole ConfigMap (wholeConfigMapBytes) for a caller that gave no filter.
func (r *configMapReader) fetch(ctx context.Context, namespace, name string, filter *keyFilter) (ConfigMapFact, int64) {
	limit := reviewKeptBytes
	if filter == nil {
		limit = wholeConfigMapBytes
	}
	if err := r.streams.Acquire(ctx, 1); err != nil {
		return ConfigMapFact{Err: fmt.Errorf("getting ConfigMap %s/%s: %w", namespace, name, err)}, 0
	}
	defer r.streams.Release(1)
	rc := r.client.CoreREST()
	if rc == nil {
		// A client without a REST transport (the fake clientset): a typed GET, then the filter.
		cm, err := r.client.GetConfigMap(ctx, namespace, name)
		if err != nil {
			return getError(namespace, name, err), 0
		}
		data := map[string]string{}
		kept := 0
		for k, v := range cm.Data {
			if filter.keep(k) {
				data[k], kept = v, kept+len(v)
			}
		}
		if kept > limit {
			return ConfigMapFact{Err: fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, errTooLarge)}, 0
		}
		changed, _ := lastChange(&cm.ObjectMeta)
		return ConfigMapFact{Data: data, Changed: changed}, int64(kept)
	}
	// Its metadata first: when its resourceVersion is the one the kept keys were read at, they
	// are current (the GET is a quorum read made after the review began), and the API server
	// need not send the whole ConfigMap again.
	meta, fact := r.metadata(ctx, rc, namespace, name)
	if meta == nil {
		return fact, 0
	}
	key := namespace + "/" + name + "\x02" + filter.signature()
	if c, ok := r.cached(key, meta.ResourceVersion); ok {
		return c.fact, c.kept
	}
	body, err := rc.Get().Namespace(namespace).Resource("configmaps").Name(name).SetHeader("Accept", "application/json").Stream(ctx)
	if err != nil {
		return getError(namespace, name, err), 0
	}
	defer body.Close()
	data, _, err := skimConfigMap(body, filter.keep, limit)
	if err != nil {
		return ConfigMapFact{Err: fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)}, 0
	}
	kept := 0
	for _, v := range data {
		kept += len(v)
	}
	// When it last changed (started.go), from metadata read after the content: the content is of
	// that version or an earlier one, so the time is never earlier than the content's change.
	after, fact := r.metadata(ctx, rc, namespace, name)
	if after == nil {
		return fact, 0
	}
	changed, _ := lastChange(&after.ObjectMeta)
	fact = ConfigMapFact{Data: data, Changed: changed}
	if after.ResourceVersion != meta.ResourceVersion {
		return fact, int64(kept) // changed in between: the content's version is not known
	}
	// Kept under the version its metadata had before and after: the content is of that version,
	// served only while it is still the current one.
	r.keep(key, meta.ResourceVersion, fact, int64(kept))
	return fact, int64(kept)
}

// metadata GETs the ConfigMap's metadata only, or says why it could not.
func (r *configMapReader) metadata(ctx context.Context, rc *rest.RESTClient, namespace, name string) (*metav1.PartialObjectMetadata, ConfigMapFact) {
	raw, err := rc.Get().Namespace(namespace).Resource("configmaps").Name(name).
		SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").Do(ctx).Raw()
	if err != nil {
		return nil, getError(namespace, name, err)
	}
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &meta); err != nil || meta.ResourceVersion == "" {
		return nil, ConfigMapFact{Err: fmt.Errorf("reading the metadata of ConfigMap %s/%s: no resourceVersion (%v)", namespace, name, err)}
	}
	return &meta, ConfigMapFact{}
}

// The kept keys of ConfigMaps by what they were read at, at most maxCachedKeptBytes in all.
const maxCachedKeptBytes = 1 << 20

type cmCached struct {
	version string
	fact    ConfigMapFact
	kept    int64
}

func (r *configMapReader) cached(key, version string) (cmCached, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cache[key]
	return c, ok && c.version == version
}

func (r *configMapReader) keep(key, version string, fact ConfigMapFact, kept int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kept > maxCachedKeptBytes/64 {
		return
	}
	if old, ok := r.cache[key]; ok {
		r.cacheBytes -= old.kept + int64(len(key))
	}
	if r.cacheBytes+kept+int64(len(key)) > maxCachedKeptBytes {
		clear(r.cache)
		r.cacheBytes = 0
	}
	r.cache[key] = cmCached{version: version, fact: fact, kept: kept}
	r.cacheBytes += kept + int64(len(key))
}

func getError(namespace, name string, err error) ConfigMapFact {
	if apierrors.IsNotFound(err) {
		return ConfigMapFact{NotFound: true}
	}
	return ConfigMapFact{Err: fmt.Errorf("getting ConfigMap %s/%s: %w", namespace, name, err)}
}
