// Package election runs the per-shard Lease election that mints a writer's fencing tokens.
//
// One process runs one election, over the coordination.k8s.io/v1 Lease LeaseName(shard). The epoch
// (the fencing token) lives in spec.leaseTransitions: 0 is "never issued", every acquisition writes
// the previous value + 1, a renewal never changes it. A writer asks Token() on its write path, a
// lock-free read; the answer is computed locally from the send time of the last successful write,
// so a partitioned or paused writer stops claiming a valid token on time, with no API call.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// Token is the fencing token as the write path sees it. A fence must act on Valid, never on
// whether the Lease names us: Valid already accounts for a lease that may have lapsed unseen.
type Token struct {
	Epoch uint64 // the last epoch this process held; 0 = never issued
	Valid bool   // we hold the Lease and our last successful write is younger than the lease duration
}

// Outcome is what one round of the election ended in.
type Outcome string

// The outcomes counted in ehdb_election_outcomes_total, and Released, which is only an Event.
const (
	Acquired    Outcome = "acquired"
	Renewed     Outcome = "renewed"
	Lost        Outcome = "lost"
	HeldByOther Outcome = "held_by_other"
	Released    Outcome = "released"
)

var outcomeNames = [...]Outcome{Acquired, Renewed, Lost, HeldByOther}

// Event reports a round's outcome to Options.OnEvent.
type Event struct {
	Outcome Outcome
	Epoch   uint64 // the epoch held, or last held
	Holder  string // the Lease's holder as last seen; "" = released or absent
	// From is when the current (or last) holding began: the arrival of the acquisition's answer.
	From time.Time
	// Until is when the token stops being valid: for Acquired and Renewed the send time of that
	// write plus the lease duration; for Lost and Released the instant the token was dropped.
	Until time.Time
}

// Options are the optional parts of an election; the zero value is usable.
type Options struct {
	// Identity of the holder; default NewIdentity(hostname). Tests only should set it.
	Identity string
	// Registerer receives the election's metrics; nil means prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Clock; nil means the real clock.
	Clock clock.Clock
	// OnEvent, when set, is called on the election's goroutine after every round and on Release.
	// It must return quickly: the election does not renew while it runs.
	OnEvent func(Event)
}

// NewIdentity returns a holder identity "<hostname>#<uuid>", to be minted once per process. The
// suffix matters: a StatefulSet pod's name is stable, so a name-only identity would let a restarted
// writer renew its predecessor's Lease and silently inherit its epoch — a fence could then not tell
// it from the zombie it replaced, the split brain the epoch exists to catch.
func NewIdentity(hostname string) string {
	return hostname + "#" + uuid.NewString()
}

// minRoundGap bounds how often rounds may run back to back, so that no sequence of events can
// spin the driver.
const minRoundGap = time.Millisecond

// Election is one process's election for one shard. Its methods are safe for concurrent use.
type Election struct {
	cfg         Config
	name        string
	identity    string
	store       LeaseStore
	watcher     LeaseWatcher
	clock       clock.Clock
	log         *slog.Logger
	onEvent     func(Event)
	callTimeout time.Duration

	state    atomic.Pointer[snapshot] // what Token() and the metrics read
	active   atomic.Bool
	outcomes [len(outcomeNames)]atomic.Uint64
	errs     [numReasons]atomic.Uint64
	// watchEvents counts the watch events the driver has handled (tests wait on it).
	watchEvents atomic.Uint64

	pubMu    sync.Mutex // orders publish against Release's drop of the token
	released bool

	cancel      context.CancelFunc
	done        chan struct{}
	releaseOnce sync.Once
	releaseErr  error

	d driver // owned by the election's goroutine (or by Release once it has stopped)
}

// snapshot is an immutable view of the holding, swapped atomically so that Token() never locks.
type snapshot struct {
	epoch    uint64
	holds    bool
	sent     bool      // lastSend is set
	lastSend time.Time // send time of the last successful acquire/renew write (monotonic reading)
}

// driver is the election's private state.
type driver struct {
	rec      *coordinationv1.Lease // last known record; nil = absent (when known)
	known    bool                  // rec is something we learned, not the zero value
	stale    bool                  // a write failed or conflicted: read again before deciding
	ownWrite bool                  // rec is the answer to our own successful write
	watching bool                  // a watch is streaming the Lease's changes

	obs     observation
	maxSeen uint64 // highest epoch seen for this shard, so epochs never go backwards

	holds    bool
	epoch    uint64
	sent     bool
	lastSend time.Time
	heldFrom time.Time

	lastRound time.Time

	lastOutcome Outcome
	lastHolder  string
	lastEpoch   uint64
}

// observation is the record a candidate is timing: expiry by the holder's wall clock is not enough
// to take over, because clocks differ between nodes; a candidate must also have watched the same
// resourceVersion unchanged for longer than the lease duration on its own monotonic clock.
type observation struct {
	rv       string
	since    time.Time // when we first saw rv, on our clock (monotonic reading)
	holder   string
	duration time.Duration
}

// Start starts the election described by cfg over store, in a goroutine of its own that stops when
// ctx is done (without releasing: that is a crash as far as the Lease is concerned; use Release to
// hand over). With cfg.Enabled false it only registers the metrics (active=0) and returns an
// Election whose Token is never valid. The metrics are registered in both cases, so a scrape can tell
// "election off" from "build without election".
func Start(ctx context.Context, store LeaseStore, cfg Config, opts Options) (*Election, error) {
	if cfg.Enabled {
		if err := validate(store, cfg); err != nil {
			return nil, err
		}
	}
	e := newElection(store, cfg, opts)
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if err := reg.Register(newCollector(e)); err != nil {
		return nil, fmt.Errorf("election: registering metrics: %w", err)
	}
	if !cfg.Enabled {
		return e, nil
	}
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan struct{})
	e.active.Store(true)
	e.log.Info("election starting", "identity", e.identity, "lease", e.name, "namespace", cfg.Namespace,
		"leaseDurationSeconds", cfg.LeaseDuration.Seconds(), "renewIntervalSeconds", cfg.RenewInterval.Seconds())
	go e.run(ctx)
	return e, nil
}

func validate(store LeaseStore, cfg Config) error {
	switch {
	case store == nil:
		return errors.New("election: no LeaseStore")
	case !cfg.HasShard:
		return errors.New("election: no shard")
	case cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0:
		// A Lease records whole seconds; a rounded-down duration would let candidates take over
		// while the holder still believes its token valid.
		return fmt.Errorf("election: lease duration %v is not a whole number of seconds >= 1s", cfg.LeaseDuration)
	case cfg.RenewInterval <= 0 || cfg.RenewInterval >= cfg.LeaseDuration:
		return fmt.Errorf("election: renew interval %v must be positive and below the lease duration %v", cfg.RenewInterval, cfg.LeaseDuration)
	case cfg.LeaseDuration/time.Second > 1<<31-1:
		return fmt.Errorf("election: lease duration %v does not fit a Lease", cfg.LeaseDuration)
	}
	return nil
}

func newElection(store LeaseStore, cfg Config, opts Options) *Election {
	e := &Election{
		cfg:      cfg,
		name:     LeaseName(cfg.Shard),
		identity: opts.Identity,
		store:    store,
		clock:    opts.Clock,
		log:      opts.Logger,
		onEvent:  opts.OnEvent,
		// Below the renew interval, so a hung call cannot stretch the loop's rhythm: a GET and a
		// write together still fit in one interval.
		callTimeout: cfg.RenewInterval / 2,
	}
	if w, ok := store.(LeaseWatcher); ok {
		e.watcher = w
	}
	if e.identity == "" {
		host, _ := os.Hostname()
		e.identity = NewIdentity(host)
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.log = e.log.With("component", "ehdb-election", "shard", cfg.Shard)
	e.state.Store(&snapshot{})
	return e
}

// Identity is the holder identity this election writes into the Lease.
func (e *Election) Identity() string { return e.identity }

// Token is the write path's read: lock-free and allocation-free. Valid requires that the last
// successful call left us holder AND that its write was sent less than a lease duration ago; it is
// computed now, not at the last renewal, so it turns false on time even while a call hangs.
func (e *Election) Token() Token {
	s := e.state.Load()
	return Token{Epoch: s.epoch, Valid: e.valid(s)}
}

func (e *Election) valid(s *snapshot) bool {
	return s.holds && e.clock.Since(s.lastSend) < e.cfg.LeaseDuration
}

// Release ends the election and hands the Lease over. It first drops the token locally (Token is
// invalid from here on), then stops the driver, then marks the Lease released (empty holder) so a
// successor acquires at once with the next epoch instead of waiting out the lease. Idempotent; on an
// election that is not running it does nothing.
func (e *Election) Release(ctx context.Context) error {
	if e.done == nil {
		return nil
	}
	e.releaseOnce.Do(func() { e.releaseErr = e.release(ctx) })
	return e.releaseErr
}

func (e *Election) release(ctx context.Context) error {
	dropped := e.clock.Now()
	e.pubMu.Lock()
	e.released = true
	old := e.state.Load()
	e.state.Store(&snapshot{epoch: old.epoch, sent: old.sent, lastSend: old.lastSend})
	e.pubMu.Unlock()

	e.cancel()
	select {
	case <-e.done:
	case <-ctx.Done():
		return fmt.Errorf("election: release: the driver did not stop: %w", ctx.Err())
	}

	d := &e.d
	if d.holds {
		d.holds = false
		e.emit(Event{Outcome: Released, Epoch: d.epoch, Holder: e.identity, From: d.heldFrom, Until: e.dropInstant(dropped)})
	}
	if d.rec == nil || holderOf(d.rec) != e.identity {
		return nil
	}
	err := e.putReleased(ctx, d.rec)
	if apierrors.IsConflict(err) {
		// Our last view was stale (e.g. a renewal was cut off in flight): one fresh read decides.
		fresh, gerr := e.store.Get(ctx, e.name)
		if gerr != nil || holderOf(fresh) != e.identity {
			return nil
		}
		err = e.putReleased(ctx, fresh)
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // no longer ours to release
		}
		e.countError("release", err)
		return fmt.Errorf("election: releasing lease %s: %w", e.name, err)
	}
	e.log.Info("released the lease", "epoch", d.epoch)
	return nil
}

func (e *Election) putReleased(ctx context.Context, rec *coordinationv1.Lease) error {
	next := rec.DeepCopy()
	empty := ""
	next.Spec.HolderIdentity = &empty
	next.Spec.RenewTime = microTime(e.clock.Now())
	_, err := e.store.Update(ctx, next)
	return err
}

// dropInstant is when a token dropped at now actually stopped being valid: it may have lapsed on
// its own before.
func (e *Election) dropInstant(now time.Time) time.Time {
	if lapse := e.d.lastSend.Add(e.cfg.LeaseDuration); e.d.sent && lapse.Before(now) {
		return lapse
	}
	return now
}

// run is the driver goroutine. It never returns before ctx is done.
func (e *Election) run(ctx context.Context) {
	defer close(e.done)
	defer e.active.Store(false)
	events := make(chan watchMsg, 16)
	if e.watcher != nil {
		go e.watchLoop(ctx, events)
	}
	e.safely(ctx, nil)
	for {
		delay := e.nextDelay()
		if delay <= 0 {
			if ctx.Err() != nil {
				return
			}
			e.safely(ctx, nil)
			continue
		}
		timer := e.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
			e.safely(ctx, nil)
		case m := <-events:
			timer.Stop()
			e.safely(ctx, &m)
		}
	}
}

// safely runs one round (m == nil) or handles one watch message. A panic below — a broken store,
// say — is counted and survived: the loop must never exit while the writer runs.
func (e *Election) safely(ctx context.Context, m *watchMsg) {
	defer func() {
		if r := recover(); r != nil {
			e.d.stale = true
			e.countError("round", fmt.Errorf("panic: %v", r))
		}
	}()
	if m != nil {
		e.handle(*m)
		return
	}
	e.round(ctx)
}

// round is one attempt: learn the record (unless a watch or our own write keeps it current), decide,
// write at most once. A lost compare-and-swap ends the attempt; the next one starts from a fresh read.
func (e *Election) round(ctx context.Context) {
	d := &e.d
	d.lastRound = e.clock.Now()
	if !d.current() {
		cctx, cancel := context.WithTimeout(ctx, e.callTimeout)
		lease, err := e.store.Get(cctx, e.name)
		cancel()
		switch {
		case err == nil:
			e.see(lease)
		case apierrors.IsNotFound(err):
			e.seeAbsent()
		default:
			d.stale = true
			e.countError("get", err)
			return
		}
	}
	now := e.clock.Now()
	e.checkLoss(now)
	switch holder := holderOf(d.rec); {
	case d.rec == nil:
		if !e.mayCreate() {
			e.report(HeldByOther, d.obs.holder)
			return
		}
		e.create(ctx)
	case holder == e.identity:
		e.write(ctx, e.lapsed(now))
	case holder == "":
		e.write(ctx, true) // released: free at once
	case e.takeoverAllowed(now):
		e.write(ctx, true)
	default:
		e.report(HeldByOther, holder)
	}
}

// current says whether the known record can be decided on without a read.
func (d *driver) current() bool {
	return d.known && !d.stale && (d.ownWrite || d.watching)
}

// checkLoss drops the holding when the record we know no longer names us. The drop happens here,
// when we learn it, not at the next renewal.
func (e *Election) checkLoss(now time.Time) {
	d := &e.d
	if !d.holds || (d.rec != nil && holderOf(d.rec) == e.identity) {
		return
	}
	d.holds = false
	e.publish()
	holder := holderOf(d.rec)
	e.log.Warn("lost the lease", "epoch", d.epoch, "holder", holder, "deleted", d.rec == nil)
	e.report(Lost, holder)
	e.emit(Event{Outcome: Lost, Epoch: d.epoch, Holder: holder, From: d.heldFrom, Until: e.dropInstant(now)})
}

// mayCreate says whether an absent Lease may be created now. A Lease that vanished while another
// process held it is timed like a record that stopped changing: its holder may still hold a valid
// token until it has not been seen renewing for a lease duration.
func (e *Election) mayCreate() bool {
	o := &e.d.obs
	return o.holder == "" || o.holder == e.identity || e.clock.Since(o.since) > o.duration
}

// takeoverAllowed says whether another process's record may be taken over now: expired by its own
// renewTime (live while now <= renewTime + duration; the strict > is the boundary a failover bound
// is computed from) AND unchanged for more than the duration on our monotonic clock, so no wall
// clock skew between nodes can let two holders overlap.
func (e *Election) takeoverAllowed(now time.Time) bool {
	rec := e.d.rec
	dur := leaseDuration(rec, e.cfg.LeaseDuration)
	return expired(rec, now, e.cfg.LeaseDuration) &&
		e.d.obs.rv == rec.ResourceVersion && e.clock.Since(e.d.obs.since) > dur
}

// lapsed says whether our own record must be re-acquired (epoch + 1) rather than renewed: its
// lease ran out by the record, or our token did (no successful write for a lease duration), in which
// case the fence may already have seen someone else's epoch and renewing ours would revive it.
func (e *Election) lapsed(now time.Time) bool {
	d := &e.d
	return expired(d.rec, now, e.cfg.LeaseDuration) ||
		(d.sent && e.clock.Since(d.lastSend) >= e.cfg.LeaseDuration)
}

// expired applies the liveness rule to a record: live while now <= renewTime + duration.
func expired(rec *coordinationv1.Lease, now time.Time, fallback time.Duration) bool {
	if rec.Spec.RenewTime == nil {
		return true
	}
	return now.After(rec.Spec.RenewTime.Add(leaseDuration(rec, fallback)))
}

func leaseDuration(rec *coordinationv1.Lease, fallback time.Duration) time.Duration {
	if s := rec.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return fallback
}

func holderOf(rec *coordinationv1.Lease) string {
	if rec == nil || rec.Spec.HolderIdentity == nil {
		return ""
	}
	return *rec.Spec.HolderIdentity
}

func epochOf(rec *coordinationv1.Lease) uint64 {
	if rec == nil || rec.Spec.LeaseTransitions == nil || *rec.Spec.LeaseTransitions < 0 {
		return 0
	}
	return uint64(*rec.Spec.LeaseTransitions)
}

// microTime is t as a Lease stores it (microseconds), rounded up so that a record never claims a
// renewal earlier than the write was sent.
func microTime(t time.Time) *metav1.MicroTime {
	w := t.Round(0)
	if tr := w.Truncate(time.Microsecond); !tr.Equal(w) {
		w = tr.Add(time.Microsecond)
	}
	mt := metav1.NewMicroTime(w)
	return &mt
}

// see records a Lease we were shown (by a read, a watch or our own write).
func (e *Election) see(l *coordinationv1.Lease) {
	d := &e.d
	if l.ResourceVersion != d.obs.rv {
		d.obs = observation{
			rv:       l.ResourceVersion,
			since:    e.clock.Now(),
			holder:   holderOf(l),
			duration: leaseDuration(l, e.cfg.LeaseDuration),
		}
	}
	d.rec, d.known, d.stale, d.ownWrite = l, true, false, false
	d.maxSeen = max(d.maxSeen, epochOf(l))
}

// seeAbsent records that the Lease does not exist. The observation is kept: what it last showed
// still decides when a new Lease may be created.
func (e *Election) seeAbsent() {
	d := &e.d
	d.rec, d.known, d.stale, d.ownWrite = nil, true, false, false
}

func (e *Election) create(ctx context.Context) {
	d := &e.d
	epoch := d.maxSeen + 1
	if epoch > 1<<31-1 {
		e.countError("create", fmt.Errorf("epoch %d does not fit spec.leaseTransitions", epoch))
		return
	}
	secs, transitions := int32(e.cfg.LeaseDuration/time.Second), int32(epoch)
	sent := e.clock.Now()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: e.cfg.Namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &e.identity,
			LeaseDurationSeconds: &secs,
			AcquireTime:          microTime(sent),
			RenewTime:            microTime(sent),
			LeaseTransitions:     &transitions,
		},
	}
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout)
	got, err := e.store.Create(cctx, lease)
	cancel()
	e.settle(got, err, sent, epoch, Acquired, "create")
}

// write PUTs the record with us as holder: an acquisition (next epoch) or a renewal (same epoch).
func (e *Election) write(ctx context.Context, acquire bool) {
	d := &e.d
	next := d.rec.DeepCopy()
	epoch, outcome := epochOf(d.rec), Renewed
	if acquire {
		epoch, outcome = max(epochOf(d.rec), d.maxSeen)+1, Acquired
		if epoch > 1<<31-1 {
			e.countError("update", fmt.Errorf("epoch %d does not fit spec.leaseTransitions", epoch))
			return
		}
	}
	secs, transitions := int32(e.cfg.LeaseDuration/time.Second), int32(epoch)
	sent := e.clock.Now()
	next.Spec.HolderIdentity = &e.identity
	next.Spec.LeaseDurationSeconds = &secs
	next.Spec.RenewTime = microTime(sent)
	next.Spec.LeaseTransitions = &transitions
	if acquire {
		next.Spec.AcquireTime = microTime(sent)
	}
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout)
	got, err := e.store.Update(cctx, next)
	cancel()
	e.settle(got, err, sent, epoch, outcome, "update")
}

// settle applies a write's answer. sent is when the write left: the token is valid for a lease
// duration from then, never from the answer, because the server may have committed it at any
// point in between.
func (e *Election) settle(got *coordinationv1.Lease, err error, sent time.Time, epoch uint64, outcome Outcome, op string) {
	d := &e.d
	switch {
	case err == nil:
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		// Someone else wrote first: a lost round, not an error, and never retried here.
		d.stale = true
		if d.holds {
			e.log.Info("the lease changed under us; the next round reads it again", "op", op, "epoch", d.epoch)
		} else {
			e.report(HeldByOther, d.obs.holder)
		}
		return
	default:
		d.stale = true
		e.countError(op, err)
		return
	}
	answered := e.clock.Now()
	e.see(got)
	d.ownWrite = true
	if outcome == Acquired || !d.holds {
		d.heldFrom = answered
	}
	d.holds, d.epoch, d.sent, d.lastSend = true, epoch, true, sent
	e.publish()
	e.report(outcome, e.identity)
	e.emit(Event{Outcome: outcome, Epoch: epoch, Holder: e.identity, From: d.heldFrom, Until: sent.Add(e.cfg.LeaseDuration)})
}

func (e *Election) publish() {
	d := &e.d
	s := &snapshot{epoch: d.epoch, holds: d.holds, sent: d.sent, lastSend: d.lastSend}
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	if !e.released {
		e.state.Store(s)
	}
}

// report counts an outcome and logs it when it differs from the previous one.
func (e *Election) report(o Outcome, holder string) {
	for i, name := range outcomeNames {
		if name == o {
			e.outcomes[i].Add(1)
		}
	}
	d := &e.d
	if o != d.lastOutcome || holder != d.lastHolder || d.epoch != d.lastEpoch {
		switch o {
		case Acquired:
			e.log.Info("acquired the lease", "epoch", d.epoch)
		case Renewed:
			e.log.Info("renewing the lease", "epoch", d.epoch)
		case HeldByOther:
			e.log.Info("the lease is held by another writer", "holder", holder)
		}
	}
	d.lastOutcome, d.lastHolder, d.lastEpoch = o, holder, d.epoch
	if o == HeldByOther {
		e.emit(Event{Outcome: o, Epoch: d.epoch, Holder: holder})
	}
}

func (e *Election) emit(ev Event) {
	if e.onEvent != nil {
		e.onEvent(ev)
	}
}

// countError counts a store error by reason and logs its first occurrence and then every 60th:
// a premature flip without RBAC fails every tick, and the log must stay readable while the
// counter tells the story. context.Canceled is shutdown, not an error.
func (e *Election) countError(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	r := classify(err)
	if n := e.errs[r].Add(1); n%60 == 1 {
		e.log.Error("lease store error (logged on the first occurrence and every 60th)",
			"op", op, "reason", r.String(), "count", n, "error", err)
	}
}

// nextDelay is how long the driver may sleep: until the next renewal or poll, or earlier, to the
// first instant a takeover is allowed, or not at all when the Lease is free now.
func (e *Election) nextDelay() time.Duration {
	d := &e.d
	since := e.clock.Since(d.lastRound)
	delay := e.cfg.RenewInterval - since
	// Only from a record not known to be stale: after a failed or lost write the next attempt waits
	// for the poll (or a watch event), so an error can never make the driver spin.
	if !d.holds && d.known && !d.stale {
		delay = min(delay, e.takeoverDelay())
	}
	return max(delay, minRoundGap-since)
}

// takeoverDelay is the time until the known record may be acted on.
func (e *Election) takeoverDelay() time.Duration {
	d := &e.d
	mono := d.obs.duration - e.clock.Since(d.obs.since) + time.Microsecond
	switch holder := holderOf(d.rec); {
	case d.rec == nil:
		if e.mayCreate() {
			return 0
		}
		return mono
	case holder == "":
		return 0
	case holder == e.identity:
		return e.cfg.RenewInterval
	default:
		wall := time.Duration(1<<63 - 1)
		if rt := d.rec.Spec.RenewTime; rt != nil {
			wall = rt.Add(leaseDuration(d.rec, e.cfg.LeaseDuration)).Sub(e.clock.Now()) + time.Microsecond
		}
		return max(mono, wall)
	}
}

// watchMsg is what the watch goroutine tells the driver.
type watchMsg struct {
	started, ended bool
	ev             watch.Event
}

// watchLoop streams the Lease's changes to the driver, so a standby acts on a release within
// milliseconds and times a holder's renewals from when they happen. When the watch fails the
// driver polls at the renew interval until it is back.
func (e *Election) watchLoop(ctx context.Context, out chan<- watchMsg) {
	send := func(m watchMsg) bool {
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		began := e.clock.Now()
		w, err := e.watcher.Watch(ctx, e.name)
		if err != nil {
			if ctx.Err() == nil {
				e.countError("watch", err)
			}
		} else {
			if !send(watchMsg{started: true}) {
				w.Stop()
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					// A stream we cancelled ourselves ends with an error event too; that is shutdown.
					err := apierrors.FromObject(ev.Object)
					if ctx.Err() == nil && !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
						e.countError("watch", err)
					}
					break
				}
				if ev.Type == watch.Bookmark {
					continue
				}
				if !send(watchMsg{ev: ev}) {
					w.Stop()
					return
				}
			}
			w.Stop()
			if !send(watchMsg{ended: true}) {
				return
			}
		}
		if e.clock.Since(began) < e.cfg.RenewInterval {
			t := e.clock.NewTimer(e.cfg.RenewInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}
}

// handle applies a watch message. A change that frees the Lease makes nextDelay zero; a change
// that names someone else drops our holding at once.
func (e *Election) handle(m watchMsg) {
	d := &e.d
	switch {
	case m.started:
		d.watching = true
		return
	case m.ended:
		d.watching = false
		return
	}
	l, ok := m.ev.Object.(*coordinationv1.Lease)
	if !ok || l.Name != e.name {
		return
	}
	defer e.watchEvents.Add(1)
	switch m.ev.Type {
	case watch.Added, watch.Modified:
		if d.rec != nil && !newer(l.ResourceVersion, d.rec.ResourceVersion) {
			return
		}
		e.see(l)
	case watch.Deleted:
		if d.rec != nil && d.rec.UID != l.UID {
			return // an older incarnation
		}
		d.maxSeen = max(d.maxSeen, epochOf(l))
		e.seeAbsent()
	default:
		return
	}
	e.checkLoss(e.clock.Now())
}

// newer orders resourceVersions. They are opaque to clients, but the API server's are etcd
// revisions; when either does not parse as a number, a different one is taken as newer.
func newer(rv, than string) bool {
	if rv == than {
		return false
	}
	a, err1 := strconv.ParseUint(rv, 10, 64)
	b, err2 := strconv.ParseUint(than, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return a > b
}
