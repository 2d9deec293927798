package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// minRoundGap bounds how often rounds may run back to back, so that no sequence of events can
// spin the driver.
const minRoundGap = time.Millisecond

// run is the driver goroutine. It never returns before ctx is done.
func (e *Election) run(ctx context.Context) {
	var watching sync.WaitGroup
	defer close(e.done)
	defer e.active.Store(false)
	// The watch goroutine is joined before done closes: Release returning means nothing of the
	// election runs any more.
	defer watching.Wait()
	defer func() {
		if e.handOverOnExit.Load() {
			hctx, cancel := context.WithTimeout(context.Background(), 2*e.callTimeout)
			defer cancel()
			if err := e.handOver(hctx, e.clock.Now()); err != nil {
				e.log.Error("handing the lease over", "error", err)
			}
		}
	}()
	events := make(chan watchMsg, 16)
	if e.watcher != nil {
		watching.Add(1)
		go func() {
			defer watching.Done()
			e.watchLoop(ctx, events)
		}()
	}
	// A round first takes every watch event already delivered: deciding on an older record than
	// the one waiting in the buffer would widen the create-delete-unseen window (package doc) from
	// the watch's latency to the driver's.
	round := func() {
		for drained := false; !drained; {
			select {
			case m := <-events:
				e.safely(ctx, &m)
			default:
				drained = true
			}
		}
		e.safely(ctx, nil)
	}
	round()
	for {
		delay := e.nextDelay()
		if delay <= 0 {
			if ctx.Err() != nil {
				return
			}
			round()
			continue
		}
		timer := e.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
			round()
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
			// A read that shows the Lease recreated while the stream is at or before the old
			// incarnation's record: that incarnation's writes before its deletion (a takeover
			// with a longer duration) are still on their way down the stream.
			var before types.UID
			if d.rec != nil && lease.UID != d.rec.UID {
				before = d.rec.UID
			}
			recreated := before != "" && d.watching && (d.recUnderStream || d.streamLags)
			e.see(lease)
			if d.rec == lease {
				d.recRead = true
				if before != "" {
					d.recreatedFrom = before
				}
				d.incUnheard = d.incUnheard || recreated
			}
		case apierrors.IsNotFound(err):
			e.seeAbsent(nil)
		default:
			d.stale = true
			e.countError("get", err)
			return
		}
	}
	now := e.clock.Now()
	e.checkLoss(now)
	if d.raceLost {
		// The winner is known only now: a 409 carries no record, and logging the holder we saw
		// before the race would name the loser's predecessor.
		d.raceLost = false
		e.log.Info("lost the race for the lease", "holder", holderOf(d.rec))
	}
	switch holder := holderOf(d.rec); {
	case d.rec == nil:
		if !e.mayCreate() {
			e.report(HeldByOther, "") // no holder: the absence is being timed
			return
		}
		e.create(ctx)
	case d.holds:
		// checkLoss has just confirmed the record is our holding.
		e.write(ctx, e.lapsed(now), Renewed)
	case d.reclaimable():
		// Our record, edited under us while our token was valid, and unchanged since: no one else
		// can have acquired in between, so we re-acquire at once, above every epoch seen. Only at
		// that resourceVersion: any later record may be someone's acquisition (see reclaimRV).
		d.reclaimedAt = now
		e.write(ctx, true, Acquired)
	case holder == "" && !d.incUnheard:
		e.write(ctx, true, Acquired) // released: free at once
	case e.takeoverAllowed(now):
		// Also a record that names us but is not our holding (an outside edit, an acquisition
		// whose answer we never saw, a process sharing our identity): it is timed like anyone
		// else's, because an edit may have put our name over a live holder's.
		e.write(ctx, true, Acquired)
	default:
		e.warnSkew(now)
		e.report(HeldByOther, holder)
	}
}

// warnSkew logs, once per record, a takeover that only the record's renewTime holds back: we have
// watched it unchanged for longer than its duration, so its writer's wall clock runs ahead of
// ours. That cannot overlap two tokens but delays the takeover by the offset (a day ahead, a day),
// which an operator must hear of rather than see as a shard that silently never fails over.
func (e *Election) warnSkew(now time.Time) {
	d := &e.d
	rec := d.rec
	dur := e.believed(rec)
	if d.skewRV == rec.ResourceVersion || d.obs.rv != rec.ResourceVersion || e.clock.Since(d.obs.since) <= dur || expired(rec, now, dur) {
		return
	}
	d.skewRV = rec.ResourceVersion
	e.log.Warn("the holder's renewTime is ahead of this node's clock: the takeover waits for it (clock skew between nodes; keep them in sync)",
		"holder", holderOf(rec), "renewTime", rec.Spec.RenewTime.Time, "aheadBy", rec.Spec.RenewTime.Add(dur).Sub(now).Round(time.Millisecond))
}

// reclaimable says whether the known record is the one edited under our valid token (reclaimRV),
// which we may re-acquire at once.
func (d *driver) reclaimable() bool {
	return d.reclaimRV != "" && d.rec != nil && d.rec.ResourceVersion == d.reclaimRV
}

// current says whether the known record can be decided on without a read.
func (d *driver) current() bool {
	return d.known && !d.stale && (d.ownWrite || d.watching)
}

// checkLoss drops the holding when the record we know is no longer our holding (see ours). The
// drop happens here, when we learn it, not at the next renewal.
func (e *Election) checkLoss(now time.Time) {
	d := &e.d
	if !d.holds || e.ours(d.rec, now) {
		return
	}
	d.holds = false
	d.reclaimRV = ""
	// At most once a lease: two processes that share one identity by mistake would otherwise
	// re-acquire over each other for ever, each reading the other's record as an edit of its own.
	reclaimedLately := !d.reclaimedAt.IsZero() && e.clock.Since(d.reclaimedAt) < e.cfg.LeaseDuration
	// Only our own incarnation: a Lease recreated with our name (a process sharing our identity
	// that never saw it) is not our record edited, and may be a live holding.
	if d.rec != nil && holderOf(d.rec) == e.identity && d.rec.UID == d.ownUID && e.fresh(now, d.lastSend, d.lastBoot) && !reclaimedLately {
		d.reclaimRV = d.rec.ResourceVersion
	}
	e.publish()
	holder := holderOf(d.rec)
	e.log.Warn("lost the lease", "epoch", d.epoch, "holder", holder, "deleted", d.rec == nil)
	e.report(Lost, holder)
	e.emit(Event{Outcome: Lost, Epoch: d.epoch, Holder: holder, From: d.heldFrom, Until: e.dropInstant(now)})
}

// ours says whether rec is still the holding this process minted: the very record our last
// successful write produced (its resourceVersion), or — seen while our token is still fresh — a
// record of the same incarnation (UID) that names us with our epoch and a duration no shorter
// than ours. The second covers a renewal whose answer was lost and harmless edits (a label): while
// our token is fresh no one else can have acquired our incarnation, so the record's lineage since
// our write holds only our writes and edits. Another incarnation is never ours: a process sharing
// our identity that never saw the Lease recreates it after a deletion with our name and our epoch
// (1), and each of us would renew the other's record as its own, both valid for ever. A
// record seen once our token has lapsed may be anyone's (an edit naming us over another holder's),
// one with another epoch would hand the fence a token already issued, and one with a shorter
// duration lets candidates take over before our token lapses: each is a loss. Accepting a record
// makes its resourceVersion ours, so the next check of the same record agrees.
func (e *Election) ours(rec *coordinationv1.Lease, now time.Time) bool {
	d := &e.d
	switch {
	case rec == nil || holderOf(rec) != e.identity || epochOf(rec) != d.epoch:
		return false
	case d.ownRV != "" && rec.ResourceVersion == d.ownRV:
		return true
	case rec.UID == d.ownUID && e.fresh(now, d.lastSend, d.lastBoot) && leaseDuration(rec, 0) >= e.cfg.LeaseDuration:
		d.ownRV = rec.ResourceVersion
		return true
	}
	return false
}

// mayCreate says whether an absent Lease may be created now. Absence is timed from its first
// sighting (or the arrival of the DELETED event that reported it, whichever is later), never from
// an older sighting of the record: a holder may have renewed after that, unseen, right before the
// delete. The wait is the longest duration we have reason to believe in; it is skipped only while
// the token we held as we learned of the absence is still fresh (no one else can have created the
// Lease before it lapses: they wait out at least its duration from the deletion) or when this
// process never saw the Lease exist (see the package doc: that case is the lease guard's). The
// first exemption ends with the token: a create that failed must not leave it standing for a
// later absence, which someone else's create and delete may have preceded unseen.
//
// An absence counts only under an unbroken watch, from the later of its first sighting and the
// watch's start: two reads that both find no Lease say nothing of a create and delete between
// them, and someone else's holding could have begun there. A create before the watch began ends
// its holder's token within one lease of it, which the wait covers. And a read that finds the
// Lease gone while the watch still shows it counts only once the watch's DELETED event arrives:
// the writes before the delete (a takeover with a longer duration) are still on their way down
// the stream, and the wait must cover them.
func (e *Election) mayCreate() bool {
	d := &e.d
	if !d.everSeen || d.absentOurs && e.fresh(e.clock.Now(), d.lastSend, d.lastBoot) {
		return true
	}
	return d.watching && !d.absentUnheard && e.clock.Since(d.absenceTimedFrom()) > d.absentWait
}

// absenceTimedFrom is where the timing of an absence starts: its first sighting, or the start of
// the watch that has seen everything since, whichever is later.
func (d *driver) absenceTimedFrom() time.Time {
	if d.watchFrom.After(d.absentSince) {
		return d.watchFrom
	}
	return d.absentSince
}

// believed is the duration a candidate must wait out for rec: the longest it has reason to believe
// in — the record's, its own configuration's, the longest seen on this incarnation since the last
// release it saw, and the longest seen on any incarnation before it. A shortened
// leaseDurationSeconds (an outside edit) must not shorten the wait: the holder's token is valid
// for the duration it wrote, not the one someone else wrote over it. And the longest is never
// forgotten with time, only at a release: a candidate that was partitioned cannot know the holder
// it last saw has gone, however long ago it saw it (processes with different durations run side
// by side in a rolling update).
func (e *Election) believed(rec *coordinationv1.Lease) time.Duration {
	d := &e.d
	dur := max(e.cfg.LeaseDuration, d.longest, d.longestGone)
	if rec != nil {
		dur = max(dur, leaseDuration(rec, dur))
	}
	return dur
}

// takeoverAllowed says whether another process's record may be taken over now: expired by its own
// renewTime (live while now <= renewTime + duration; the strict > is the boundary a failover bound
// is computed from) AND unchanged for more than the duration on our monotonic clock, so no wall
// clock skew between nodes can let two holders overlap.
func (e *Election) takeoverAllowed(now time.Time) bool {
	rec := e.d.rec
	dur := e.believed(rec)
	return !e.d.incUnheard && expired(rec, now, dur) && e.d.obs.rv == rec.ResourceVersion && e.clock.Since(e.d.obs.since) > dur
}

// lapsed says whether our own record must be re-acquired (epoch + 1) rather than renewed: its
// lease ran out by the record, or our token did. An epoch names one unbroken holding; reviving a
// lapsed one would let writes queued before the gap pass the fence as current, so a lapse always
// ends the epoch.
func (e *Election) lapsed(now time.Time) bool {
	d := &e.d
	return expired(d.rec, now, e.cfg.LeaseDuration) || (d.sent && !e.fresh(now, d.lastSend, d.lastBoot))
}

// expired applies the liveness rule to a record: live while now <= renewTime + duration, where
// duration is at least the one the record states.
func expired(rec *coordinationv1.Lease, now time.Time, atLeast time.Duration) bool {
	if rec.Spec.RenewTime == nil {
		return true
	}
	return now.After(rec.Spec.RenewTime.Add(max(atLeast, leaseDuration(rec, atLeast))))
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
	if d.seenRV != "" && l.ResourceVersion != d.seenRV && !newer(l.ResourceVersion, d.seenRV) {
		// An older record than one already seen (a replayed event, a read answered late): what it
		// says is superseded, and acting on it could forget a longer duration seen since (a
		// release it shows resets that memory). What it says of the past still counts.
		e.recall(l)
		return
	}
	d.seenRV = l.ResourceVersion
	if l.ResourceVersion != d.obs.rv {
		d.obs = observation{
			rv:     l.ResourceVersion,
			since:  e.clock.Now(),
			holder: holderOf(l),
		}
	}
	e.remember(l)
	d.rec, d.known, d.stale, d.ownWrite, d.absentUnheard = l, true, false, false, false
	d.streamWarned = false
	d.recUnderStream = d.watching
}

// remember keeps what a record tells about the past: its epoch (epochs never go backwards) and its
// duration (a candidate never waits out less than the longest it saw since the last release). A
// released record ends every holding before it on its incarnation (its holder dropped its token,
// and each earlier holder had lapsed before that one acquired), so only then may a longer duration
// be forgotten — and only that incarnation's: a release on a Lease recreated after a deletion ends
// no holding of the deleted one, whose holder may still be valid for the duration we saw.
func (e *Election) remember(l *coordinationv1.Lease) {
	d := &e.d
	if l.UID != d.longestUID {
		d.longestGone = max(d.longestGone, d.longest)
		d.longest, d.longestUID = 0, l.UID
	}
	if holderOf(l) == "" {
		d.longest = 0
	}
	e.recall(l)
}

// recall keeps what a record that is not the newest tells about the past (an older incarnation, a
// replayed event): its epoch and duration only raise what we believe, its release resets nothing.
func (e *Election) recall(l *coordinationv1.Lease) {
	d := &e.d
	d.everSeen = true
	d.maxSeen = max(d.maxSeen, epochOf(l))
	if holderOf(l) == "" {
		return
	}
	if l.UID == d.longestUID {
		d.longest = max(d.longest, leaseDuration(l, 0))
	} else {
		d.longestGone = max(d.longestGone, leaseDuration(l, 0))
	}
}

// seeAbsent records that the Lease does not exist, now. deleted carries the last state a DELETED
// watch event reported, if that is how we learned it.
func (e *Election) seeAbsent(deleted *coordinationv1.Lease) {
	d := &e.d
	now := e.clock.Now()
	// The first sighting of this absence, or the first under the current stream: a stream that
	// began after we last saw the Lease absent may still carry a holding's writes since (a
	// recreate before it began, renewals after), undelivered; a read after it began that finds
	// no Lease comes after all of them.
	first := !d.known || d.rec != nil || d.watching && !d.absentSince.After(d.watchFrom)
	if deleted != nil {
		e.remember(deleted)
	}
	switch {
	case deleted != nil:
		// The event arrived after the delete, which came after the holder's last write: timing
		// from its arrival is safe even if an earlier read already showed the absence.
		d.absentSince, d.absentWait = now, e.believed(deleted)
	case first:
		d.absentSince, d.absentWait = now, e.believed(nil)
	}
	if first {
		d.absentOurs = d.holds && e.fresh(now, d.lastSend, d.lastBoot)
	}
	if deleted != nil {
		d.absentRead = false
	} else if first {
		d.absentRead = true
	}
	// A read's absence of a Lease the watch still shows waits for the watch to say so (mayCreate).
	// Only for a record seen after the current stream began: the stream is then at or before
	// that record, so the deletion after it comes down the stream. A stream that began after we
	// last saw the Lease may have begun after the deletion (that absence is timed from its start).
	d.absentUnheard = deleted == nil && (d.absentUnheard || first && d.rec != nil && d.watching && (d.recUnderStream || d.streamLags))
	d.rec, d.known, d.stale, d.ownWrite = nil, true, false, false
}

func (e *Election) create(ctx context.Context) {
	d := &e.d
	epoch := d.maxSeen + 1
	if err := fits(epoch); err != nil {
		e.countError("create", err)
		d.stale = true // wait for the next poll or event, never spin
		return
	}
	secs, transitions := int32(e.cfg.LeaseDuration/time.Second), int32(epoch)
	sent := e.clock.Now()
	boot := e.bootAt(sent)
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
	e.settle(got, err, sent, boot, epoch, Acquired, "create")
}

// write PUTs the record with us as holder: an acquisition (next epoch) or a renewal (the record's
// epoch), counted as outcome.
func (e *Election) write(ctx context.Context, acquire bool, outcome Outcome) {
	d := &e.d
	next := d.rec.DeepCopy()
	epoch := epochOf(d.rec)
	if acquire {
		epoch, outcome = max(epochOf(d.rec), d.maxSeen)+1, Acquired
		if err := fits(epoch); err != nil {
			e.countError("update", err)
			d.stale = true // wait for the next poll or event, never spin
			return
		}
	}
	d.reclaimRV = ""
	secs, transitions := e.writtenDuration(d.rec), int32(epoch)
	sent := e.clock.Now()
	boot := e.bootAt(sent)
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
	e.settle(got, err, sent, boot, epoch, outcome, "update")
}

// writtenDuration is the leaseDurationSeconds a write over rec carries: our own, or the record's
// when that is longer and rec is not released. Someone else's holding may still be valid for the
// record's duration (a rolling update runs longer and shorter leases side by side), and a third
// process that sees only our record must not wait out less; once released, every earlier holding
// has ended. The chart's lease guard refuses a shorter duration over a record that is not released.
func (e *Election) writtenDuration(rec *coordinationv1.Lease) int32 {
	dur := e.cfg.LeaseDuration
	if holderOf(rec) != "" {
		dur = max(dur, leaseDuration(rec, dur))
	}
	return int32(min(dur/time.Second, 1<<31-1))
}

// fits says whether epoch can be written to spec.leaseTransitions (an int32). Past it the shard
// cannot elect at all: an outside edit to the limit, which the lease guard refuses (it admits only
// +1 per write). Reported on every attempt, never a silent stall.
func fits(epoch uint64) error {
	if epoch > 1<<31-1 {
		return fmt.Errorf("epoch %d does not fit spec.leaseTransitions (int32): the Lease's epoch is at its limit, "+
			"so no acquisition can mint a higher one; the shard cannot elect until the Lease is recreated", epoch)
	}
	return nil
}

// settle applies a write's answer. sent is when the write left: the token is valid for a lease
// duration from then, never from the answer, because the server may have committed it at any
// point in between.
func (e *Election) settle(got *coordinationv1.Lease, err error, sent time.Time, boot time.Duration, epoch uint64, outcome Outcome, op string) {
	d := &e.d
	if err != nil && op == "create" {
		// A create that lost ("already exists") shows the Lease existed after we saw it absent;
		// one whose answer never came may have committed and started holdings we never saw.
		// Either way an absence seen later is a new one, timed from its own first sighting.
		d.known = false
	}
	switch {
	case err == nil:
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		// Someone else wrote first: a lost round, not an error, and never retried here. A 409 is
		// an answer: our write did not commit.
		d.stale = true
		if d.holds {
			e.log.Info("the lease changed under us; the next round reads it again", "op", op, "epoch", d.epoch)
		} else {
			e.count(HeldByOther)
			d.raceLost = true
		}
		return
	default:
		// No answer: the write may or may not have committed. The next read decides, and an
		// acquisition that did commit is never adopted (see ours): the record is timed like any.
		d.stale = true
		e.countError(op, err)
		return
	}
	answered := e.clock.Now()
	e.see(got)
	d.recRead = false
	d.ownWrite, d.ownRV, d.ownUID = true, got.ResourceVersion, got.UID
	if outcome == Acquired || !d.holds {
		d.heldFrom = answered
	}
	d.holds, d.epoch, d.sent, d.lastSend, d.lastBoot = true, epoch, true, sent, boot
	e.publish()
	e.report(outcome, e.identity)
	e.emit(Event{Outcome: outcome, Epoch: epoch, Holder: e.identity, From: d.heldFrom, Until: sent.Add(e.validFor)})
}

func (e *Election) publish() {
	d := &e.d
	s := &snapshot{epoch: d.epoch, holds: d.holds, sent: d.sent, lastSend: d.lastSend, lastBoot: d.lastBoot}
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	if !e.released {
		e.state.Store(s)
	}
}

// count counts an outcome in ehdb_election_outcomes_total.
func (e *Election) count(o Outcome) {
	for i, name := range outcomeNames {
		if name == o {
			e.outcomes[i].Add(1)
		}
	}
}

// report counts an outcome and logs it when it differs from the previous one.
func (e *Election) report(o Outcome, holder string) {
	e.count(o)
	d := &e.d
	if o != d.lastOutcome || holder != d.lastHolder || d.epoch != d.lastEpoch {
		switch o {
		case Acquired:
			e.log.Info("acquired the lease", "epoch", d.epoch)
		case Renewed:
			e.log.Info("renewing the lease", "epoch", d.epoch)
		case HeldByOther:
			if holder == "" {
				e.log.Info("the lease is absent: it is created once its absence has been watched, unbroken, for the longest duration believed in", "wait", d.absentWait)
			} else {
				e.log.Info("the lease is held by another writer", "holder", holder)
			}
		}
	}
	d.lastOutcome, d.lastHolder, d.lastEpoch = o, holder, d.epoch
	if o == HeldByOther {
		e.emit(Event{Outcome: o, Epoch: d.epoch, Holder: holder})
	}
}

func (e *Election) emit(ev Event) {
	if e.onEvent == nil {
		return
	}
	e.inCallback.Store(true)
	defer e.inCallback.Store(false)
	e.onEvent(ev)
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
	switch holder := holderOf(d.rec); {
	case d.rec == nil:
		if e.mayCreate() {
			return 0
		}
		if !d.watching || d.absentUnheard {
			// An absence counts only under a watch, and from its DELETED event once the watch
			// still showed the Lease: wait for them (or the next poll).
			return e.cfg.RenewInterval
		}
		return d.absentWait - e.clock.Since(d.absenceTimedFrom()) + time.Microsecond
	case d.incUnheard && !d.reclaimable():
		// A recreated Lease read ahead of the stream: wait for the stream (or the next poll).
		return e.cfg.RenewInterval
	case holder == "":
		return 0
	case d.reclaimable():
		return 0
	default:
		dur := e.believed(d.rec)
		mono := dur - e.clock.Since(d.obs.since) + time.Microsecond
		wall := time.Duration(0) // never renewed: expired by the record already
		if rt := d.rec.Spec.RenewTime; rt != nil {
			wall = rt.Add(dur).Sub(e.clock.Now()) + time.Microsecond
		}
		return max(mono, wall)
	}
}
