package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

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
		w, err := e.startWatch(ctx)
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

// startWatch calls the store's Watch, surviving a panic or a nil stream: a broken store must cost
// the watch (the driver polls), never the process.
func (e *Election) startWatch(ctx context.Context) (w watch.Interface, err error) {
	defer func() {
		if r := recover(); r != nil {
			w, err = nil, fmt.Errorf("watch panicked: %v", r)
		}
	}()
	w, err = e.watcher.Watch(ctx, e.name)
	if err == nil && w == nil {
		err = errors.New("watch returned no stream")
	}
	return w, err
}

// handle applies a watch message. A change that frees the Lease makes nextDelay zero; a change
// that names someone else drops our holding at once.
func (e *Election) handle(m watchMsg) {
	d := &e.d
	switch {
	case m.started:
		// What happened while no watch ran is unknown until a read: the stream's first events
		// may still be in flight, so the next round reads rather than deciding on the old record.
		// An absence already known is timed again from its first sighting under this stream
		// (seeAbsent): the stream may still carry, undelivered, writes since it was last seen.
		d.watching, d.watchFrom, d.stale, d.absentUnheard, d.recUnderStream = true, e.clock.Now(), true, false, false
		// A stream begun now brings nothing from before it: an incarnation deleted before it is
		// the package doc's create-delete-unseen, and waiting for its events would be for ever.
		d.incUnheard, d.streamLags = false, false
		return
	case m.ended:
		d.watching = false
		if d.known && d.rec == nil && d.everSeen && !d.streamWarned && e.clock.Since(d.absenceTimedFrom()) <= d.absentWait {
			// Streams that end before an absence is watched for its wait hold the create back
			// for as long as they keep doing so: say why, once per absence, rather than stall
			// in silence.
			d.streamWarned = true
			e.log.Warn("a watch stream ended before the Lease's absence was watched for its wait: the Lease is created only under a stream that outlasts it (a proxy's idle timeout, or an API server --min-request-timeout below the lease, ends streams early)",
				"wait", d.absentWait, "streamLasted", e.clock.Since(d.watchFrom).Round(time.Millisecond))
		}
		return
	}
	l, ok := m.ev.Object.(*coordinationv1.Lease)
	if !ok || l.Name != e.name {
		return
	}
	defer e.watchEvents.Add(1)
	switch m.ev.Type {
	case watch.Added, watch.Modified:
		if d.seenRV != "" && !newer(l.ResourceVersion, d.seenRV) {
			if d.rec != nil && d.rec.UID == l.UID {
				// Known already (a stream's opening ADDED of the record we read, say): the stream
				// is at or before our record, so its deletion will come down it (mayCreate); and
				// past any incarnation before it.
				d.recUnderStream, d.incUnheard = d.watching, false
			}
			if d.rec == nil || l.ResourceVersion != d.seenRV {
				e.streamBehind(l) // older than our newest, or our newest after a read found it gone
			}
			e.recall(l) // replayed, or known already: what it says of the past still counts
			return
		}
		e.see(l)
		d.recRead, d.incUnheard, d.streamLags = false, false, false
	case watch.Deleted:
		if d.rec != nil && d.rec.UID != l.UID {
			// An older incarnation's deletion; if it is the one a read showed replaced, the stream
			// has brought every write of it (in order, before this). What it says of the past
			// still counts.
			e.recall(l)
			if l.UID == d.recreatedFrom {
				d.incUnheard = false
			}
			return
		}
		if d.seenRV != "" && !newer(l.ResourceVersion, d.seenRV) {
			e.recall(l) // a replay: what it says of the past still counts
			return
		}
		d.seenRV = l.ResourceVersion
		e.seeAbsent(l)
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

// streamBehind notes an event (l) at or before the newest record we saw. While a read has shown
// the Lease gone, or recreated, such an event of an older record says the stream is behind that
// deletion: every write before it (a takeover with a longer duration than we believe in) is still
// on its way down the stream, so the absence waits for the stream's DELETED event (mayCreate), and
// the recreated Lease is not taken over until the stream has caught up, as for a record seen under
// it.
func (e *Election) streamBehind(l *coordinationv1.Lease) {
	d := &e.d
	// Until it brings something at least as new, what a read shows later is ahead of it too.
	d.streamLags = d.watching
	switch {
	case !d.watching:
	case d.rec == nil && d.known && d.absentRead:
		d.absentUnheard = true
	case d.rec != nil && d.recRead && l.UID != d.rec.UID:
		d.incUnheard = true
	}
}
