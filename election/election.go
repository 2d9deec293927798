package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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

// MaxClockRateDifference is the largest relative difference between two nodes' clock rates that
// the election tolerates (1%: a crystal is typically within 0.01%, a VM under NTP far better). A
// holder counts its token valid for (1 − MaxClockRateDifference) × the lease duration after a
// write's send: a candidate whose clock runs up to this much faster still waits out at least that
// long in real time before it takes over.
const MaxClockRateDifference = 0.01

// Event reports a round's outcome to Options.OnEvent.
type Event struct {
	Outcome Outcome
	Epoch   uint64 // the epoch held, or last held
	Holder  string // the Lease's holder as last seen; "" = released or absent
	// From is when the current (or last) holding began: the arrival of the acquisition's answer.
	From time.Time
	// Until is when the token stops being valid: for Acquired and Renewed the send time of that
	// write plus the lease duration less the clock-rate margin (MaxClockRateDifference); for Lost
	// and Released the instant the token was dropped.
	Until time.Time
}

// Options are the optional parts of an election; the zero value is usable.
type Options struct {
	// Identity of the holder; default NewIdentity(os.Hostname()). Set it only to a value from
	// NewIdentity (e.g. to know it before the first event); never to a bare pod name.
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
	// validFor is how long after its send a successful write keeps our token valid: the lease
	// duration less the clock-rate margin (see MaxClockRateDifference).
	validFor time.Duration
	// boot, when set, is a reading that keeps counting while the host is suspended, for an injected
	// Options.Clock (whose times carry no separate monotonic reading). Unset, the wall-clock part
	// of the real clock's own reading serves: free, since Now already read it.
	boot func() time.Duration

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
	// inCallback is set while the driver runs OnEvent; handOverOnExit asks the driver to release
	// the Lease itself as it stops (Release was called from OnEvent and cannot wait for it).
	inCallback     atomic.Bool
	handOverOnExit atomic.Bool
	releasing      atomic.Bool // Release has begun

	d driver // owned by the election's goroutine (or by Release once it has stopped)
}

// snapshot is an immutable view of the holding, swapped atomically so that Token() never locks.
type snapshot struct {
	epoch    uint64
	holds    bool
	sent     bool          // lastSend is set
	lastSend time.Time     // send time of the last successful acquire/renew write (monotonic reading)
	lastBoot time.Duration // the boot clock at the same instant
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

	watchFrom time.Time // when the current unbroken watch began (the driver learned of it)
	seenRV    string    // the newest resourceVersion seen (records and deletions): older ones are ignored

	// everSeen: this process has seen the Lease exist (or be deleted). absentSince/absentWait time
	// an absent Lease from the first sighting of its absence.
	everSeen    bool
	absentSince time.Time
	absentWait  time.Duration
	absentOurs  bool // we held a valid token as we learned of the absence (see mayCreate)
	// absentUnheard: a read found the Lease gone that the watch still shows existing; the
	// absence is timed only from the DELETED event, which follows every write before the delete.
	absentUnheard bool
	// absentRead: the absence we know was found by a read, not by a DELETED event; recRead: so
	// was rec. incUnheard: a read showed the Lease recreated while the stream still carries the
	// old incarnation; no takeover until the stream catches up (see round, streamBehind).
	absentRead, recRead, incUnheard bool
	recreatedFrom                   types.UID // the incarnation a read last showed replaced
	// streamLags: the current stream has shown an event older than the newest record we saw,
	// and nothing as new since: a read's absence or recreated Lease is ahead of it.
	streamLags bool
	skewRV     string // the record whose clock skew warnSkew logged
	// streamWarned: a stream ended early under this absence, and we said so (see handle).
	streamWarned bool
	// recUnderStream: rec was seen after the current watch stream began (by the stream, a read
	// or our own write), so the stream will carry the record's deletion.
	recUnderStream bool
	// longest is the longest leaseDurationSeconds seen on incarnation longestUID since the last
	// release seen there; longestGone the longest seen on any other incarnation (never forgotten:
	// no release on another incarnation ends their holdings).
	longest, longestGone time.Duration
	longestUID           types.UID
	// ownRV is the resourceVersion of the record our last successful write produced (or that ours
	// accepted as our holding): the record a renewal or a release may act on.
	ownRV    string
	ownUID   types.UID // the incarnation of that record: no other one is ever our holding
	raceLost bool      // a write lost with a 409: log the winner once the next read shows it
	// reclaimRV is the record, naming us, that was edited under a valid token of ours: re-acquire
	// at once while the Lease is still at exactly that resourceVersion, and only then (no one else
	// can have acquired before it, since our token was valid; anyone may have after).
	reclaimRV   string
	reclaimedAt time.Time // when we last re-acquired at once (see checkLoss)

	holds    bool
	epoch    uint64
	sent     bool
	lastSend time.Time
	lastBoot time.Duration // boot-clock reading at lastSend
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
	rv     string
	since  time.Time // when we first saw rv, on our clock (monotonic reading)
	holder string
}

// Start starts the election described by cfg over store, in a goroutine of its own that stops when
// ctx is done (without releasing: that is a crash as far as the Lease is concerned; use Release to
// hand over). With cfg.Enabled false it only registers the metrics (active=0) and returns an
// Election whose Token is never valid. The metrics are registered in both cases, so a scrape can tell
// "election off" from "build without election".
func Start(ctx context.Context, store LeaseStore, cfg Config, opts Options) (*Election, error) {
	if cfg.Enabled {
		if err := validate(store, cfg, opts); err != nil {
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

// identityRE is the shape NewIdentity produces: a name, "#", a per-process suffix.
var identityRE = regexp.MustCompile(`^[^#\s]+#[^#\s]+$`)

func validate(store LeaseStore, cfg Config, opts Options) error {
	switch {
	case opts.Identity != "" && !identityRE.MatchString(opts.Identity):
		// A bare pod name would let a restarted writer renew its predecessor's Lease and inherit
		// its epoch (see NewIdentity).
		return fmt.Errorf("election: identity %q is not <host>#<per-process suffix>; use NewIdentity", opts.Identity)
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
		validFor:    cfg.LeaseDuration - time.Duration(float64(cfg.LeaseDuration)*MaxClockRateDifference),
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
	} else {
		origin := e.clock.Now()
		e.boot = func() time.Duration { return e.clock.Since(origin) }
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
	return s.holds && e.fresh(e.clock.Now(), s.lastSend, s.lastBoot)
}

// fresh says whether a write sent at (sent, boot) still backs a valid token at now. Both readings
// must agree: Go's monotonic clock stops while the host is suspended, so a process resumed after
// more than a lease would otherwise believe its token valid while a successor holds the Lease; the
// boot clock (CLOCK_BOOTTIME) keeps counting through a suspend and is never stepped. A freeze
// that stops every clock of the machine is out of reach (the package doc's vm-freeze).
func (e *Election) fresh(now, sent time.Time, boot time.Duration) bool {
	b := e.bootAt(now)
	return now.Sub(sent) < e.validFor && b >= 0 && boot >= 0 && b-boot < e.validFor
}

// bootAt is the suspend-counting reading at now: the boot clock, unless a clock was injected
// (tests set boot to their own model of it). It is never negative; a reading that failed is -1,
// which fresh takes as "not fresh", at the write's end or the check's.
func (e *Election) bootAt(now time.Time) time.Duration {
	if e.boot != nil {
		return e.boot()
	}
	return bootClock(now)
}

// Release ends the election and hands the Lease over. It first drops the token locally (Token is
// invalid from here on), then stops the driver, then marks the Lease released (empty holder) so a
// successor acquires at once with the next epoch instead of waiting out the lease. Idempotent; on an
// election that is not running it does nothing.
//
// Called from OnEvent (on the election's own goroutine, which Release would otherwise wait for) it
// drops the token, returns nil at once, and the election hands the Lease over as it stops.
func (e *Election) Release(ctx context.Context) error {
	if e.done == nil {
		return nil
	}
	if e.inCallback.Load() && e.releasing.Load() {
		return nil // OnEvent of the release under way (its Released event): nothing more to do
	}
	e.releaseOnce.Do(func() {
		e.releasing.Store(true)
		dropped := e.drop()
		if e.inCallback.Load() {
			e.handOverOnExit.Store(true)
			e.cancel()
			return
		}
		e.cancel()
		select {
		case <-e.done:
		case <-ctx.Done():
			e.releaseErr = fmt.Errorf("election: release: the driver did not stop: %w", ctx.Err())
			return
		}
		e.releaseErr = e.handOver(ctx, dropped)
	})
	return e.releaseErr
}

// drop invalidates the token locally, first, so no write can pass the fence while the release is
// under way. It returns when that happened.
func (e *Election) drop() time.Time {
	dropped := e.clock.Now()
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	e.released = true
	old := e.state.Load()
	e.state.Store(&snapshot{epoch: old.epoch, sent: old.sent, lastSend: old.lastSend, lastBoot: old.lastBoot})
	return dropped
}

// handOver marks the Lease released once the driver has stopped: only a holding this process
// minted and still holds (see ours), never a record that merely carries its name — an outside edit
// can put our name over another holder's live record, and a process sharing our identity by
// mistake writes records we never minted. When our view may be stale (a failed write), one fresh
// read decides; a compare-and-swap on that record makes the release land only on it.
func (e *Election) handOver(ctx context.Context, dropped time.Time) error {
	d := &e.d
	if !d.holds {
		return nil
	}
	d.holds = false
	e.emit(Event{Outcome: Released, Epoch: d.epoch, Holder: e.identity, From: d.heldFrom, Until: e.dropInstant(dropped)})
	rec := d.rec
	if d.stale || !d.known {
		fresh, err := e.reread(ctx)
		if fresh == nil {
			return err
		}
		rec = fresh
	}
	if !e.ours(rec, e.clock.Now()) {
		return nil
	}
	err := e.putReleased(ctx, rec)
	if apierrors.IsConflict(err) {
		// Our last view was stale (e.g. a renewal was cut off in flight): one fresh read decides.
		fresh, gerr := e.reread(ctx)
		switch {
		case fresh == nil:
			err = gerr
		case !e.ours(fresh, e.clock.Now()):
			return nil // no longer ours to release
		default:
			err = e.putReleased(ctx, fresh)
		}
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

// reread is handOver's fresh read: nil and no error when the Lease is gone.
func (e *Election) reread(ctx context.Context) (*coordinationv1.Lease, error) {
	fresh, err := e.store.Get(ctx, e.name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		e.countError("release", err)
		return nil, fmt.Errorf("election: releasing lease %s: %w", e.name, err)
	}
	return fresh, nil
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
	if lapse := e.d.lastSend.Add(e.validFor); e.d.sent && lapse.Before(now) {
		return lapse
	}
	return now
}
