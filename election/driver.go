package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// minRoundGap bounds how often rounds may run back to back, so that no sequence of events can
// spin the driver.
const minRoundGap = time.Millisecond

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
// lease ran out by the record, or our token did (no successful write for a lease duration). An
// epoch names one unbroken holding; reviving a lapsed one would let writes queued before the gap
// pass the fence as current, so a lapse always ends the epoch.
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
		wall := time.Duration(0) // never renewed: expired by the record already
		if rt := d.rec.Spec.RenewTime; rt != nil {
			wall = rt.Add(leaseDuration(d.rec, e.cfg.LeaseDuration)).Sub(e.clock.Now()) + time.Microsecond
		}
		return max(mono, wall)
	}
}
