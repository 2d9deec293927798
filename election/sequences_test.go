package election

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election/fake"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

// The six sequences of issue 16: each gave two processes a valid token for one shard at the same
// instant on an earlier version, driven deterministically on the fake store. Each test names the
// rule (package doc) that now prevents it.

// seqStore is a store the sequences can also delete from: the fake, or the real API server.
type seqStore interface {
	LeaseStore
	Delete(ctx context.Context, name string) error
}

// rig is one run of a sequence: a store, the namespace its Leases live in, and one fake clock for
// every process (the API server judges no time: it stores the renewTimes the processes send).
type rig struct {
	t     *testing.T
	store seqStore
	ns    string
	clk   *clocktesting.FakeClock
}

// onStores runs a sequence on the fake store and on the real API server (each run a fresh
// namespace; skipped without a control plane unless EHDB_REQUIRE_CLUSTER is set).
func onStores(t *testing.T, seq func(r *rig)) {
	t.Run("fake", func(t *testing.T) {
		seq(&rig{t: t, store: fake.NewLeaseStore(), ns: "ns", clk: clocktesting.NewFakeClock(t0)})
	})
	t.Run("apiserver", func(t *testing.T) {
		c := testcluster.ForTest(t)
		ns := c.NewNamespace(t)
		store := rawKube{KubeStore: NewKubeStore(c.Clientset(), ns), client: c.Clientset(), ns: ns}
		seq(&rig{t: t, store: store, ns: ns, clk: clocktesting.NewFakeClock(t0)})
	})
}

// proc is a process driven by hand, one round or event at a time, over store.
func (r *rig) proc(store LeaseStore, identity string, lease, renew time.Duration) *Election {
	r.t.Helper()
	e := newSync(r.t, store, r.clk, identity, lease, renew)
	e.cfg.Namespace = r.ns
	return e
}

func (r *rig) delete() {
	r.t.Helper()
	if err := r.store.Delete(ctx, testLease); err != nil {
		r.t.Fatal(err)
	}
}

// watched feeds e what its watch would have delivered for the store's current record.
func watched(t *testing.T, e *Election, store LeaseStore) {
	t.Helper()
	e.handle(watchMsg{ev: watch.Event{Type: watch.Modified, Object: mustLease(t, store)}})
}

// Sequence 1. p's record is edited under its valid token (its watch reports the loss), then p
// pauses; c times the edited record and takes over; an edit names p again. The "re-acquire at once"
// that the first edit allowed must not survive onto a record p never saw while it was valid.
func TestAStaleReclaimNeverTakesALiveLease(t *testing.T) { onStores(t, staleReclaim) }

func staleReclaim(r *rig) {
	t, store, clk := r.t, r.store, r.clk
	p := r.proc(store, "p#1", lease, renew)
	c := r.proc(store, "c#2", lease, renew)
	p.round(ctx)
	wantToken(t, "p", p, 1, true)
	edit(t, store, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](5) })
	watched(t, p, store) // p learns of the edit while valid, then pauses before its next round
	for i := 0; !c.Token().Valid; i++ {
		if i > 100 {
			t.Fatal("c never took over the edited record")
		}
		c.round(ctx)
		clk.Step(500 * time.Millisecond)
	}
	edit(t, store, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr.To(p.Identity())
		l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 1)
	})
	p.round(ctx) // p resumes: its read shows its own name on a record it never held
	notBothValid(t, "p resumed onto a record naming it", p, c)
}

// Sequence 2. An outside edit names p on c's live record; p shuts down gracefully. Release must hand
// over only a holding this process minted and still holds, never a record that merely carries its
// name (nor one minted by another process that shares its identity by mistake).
func TestReleaseHandsOverOnlyWhatThisProcessHolds(t *testing.T) {
	t.Run("a record edited to name us", func(t *testing.T) { onStores(t, releaseOfAnEditNamingUs) })
	t.Run("two processes sharing one identity", func(t *testing.T) { onStores(t, releaseByATwin) })
}

func releaseOfAnEditNamingUs(r *rig) {
	{
		t, store := r.t, r.store
		c := r.proc(store, "c#1", lease, renew)
		p := r.proc(store, "p#2", lease, renew)
		d := r.proc(store, "d#3", lease, renew)
		c.round(ctx)
		edit(t, store, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To(p.Identity())
			l.Spec.LeaseTransitions = ptr.To[int32](2)
		})
		p.round(ctx)
		wantToken(t, "p", p, 0, false)
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		d.round(ctx)
		notBothValid(t, "after p's release", c, d)
	}
}

func releaseByATwin(r *rig) {
	{
		t, store := r.t, r.store
		p1 := r.proc(store, "p#same", lease, renew)
		p2 := r.proc(store, "p#same", lease, renew)
		d := r.proc(store, "d#3", lease, renew)
		p1.round(ctx)
		p2.round(ctx)
		if err := p2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		d.round(ctx)
		notBothValid(t, "after the twin's release", p1, d)
	}
}

// Sequence 3. Processes of one shard with different lease durations (a rolling update that changes
// NOETL_EHDB_ELECTION_LEASE_SECS). A candidate never waits out less than the longest duration it has
// seen since the last release it saw, however long ago it saw it.
func TestMixedDurationsNeverOverlap(t *testing.T) {
	t.Run("a partitioned candidate and a deleted Lease", func(t *testing.T) {
		store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
		h := newSync(t, store, clk, "h#1", 30*time.Second, 10*time.Second)
		c := newSync(t, store, clk, "c#2", 10*time.Second, 3*time.Second)
		h.round(ctx)
		c.handle(watchMsg{started: true})
		watched(t, c, store) // c sees h's 30 s record, then is partitioned for 60 s
		c.handle(watchMsg{ended: true})
		for i := 0; i < 6; i++ {
			clk.Step(10 * time.Second)
			h.round(ctx)
		}
		if err := store.Delete(ctx, testLease); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
		c.round(ctx) // c heals: the Lease is gone
		c.handle(watchMsg{started: true})
		for h.Token().Valid {
			c.round(ctx)
			notBothValid(t, "while h's last renewal is valid", h, c)
			clk.Step(time.Second)
		}
	})
	t.Run("a shortened record seen by the holder", func(t *testing.T) {
		store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
		h := newSync(t, store, clk, "h#1", 30*time.Second, 10*time.Second)
		h.round(ctx)
		edit(t, store, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](3) })
		watched(t, h, store)
		c := newSync(t, store, clk, "c#2", 10*time.Second, 3*time.Second) // a new pod: it only sees the edit
		for h.Token().Valid {
			c.round(ctx)
			notBothValid(t, "after the duration was shortened", h, c)
			clk.Step(500 * time.Millisecond)
		}
	})
	t.Run("a shorter candidate takes over and keeps the longer duration", func(t *testing.T) {
		store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
		h := newSync(t, store, clk, "h#1", 30*time.Second, 10*time.Second)
		c := newSync(t, store, clk, "c#2", 10*time.Second, 3*time.Second)
		h.round(ctx)
		for i := 0; !c.Token().Valid; i++ {
			if i > 100 {
				t.Fatal("c never took over h's lapsed record")
			}
			c.round(ctx)
			notBothValid(t, "c waiting out h", h, c)
			clk.Step(time.Second)
		}
		if got := leaseDuration(mustLease(t, store), 0); got != 30*time.Second {
			t.Fatalf("c took over h's 30 s record and wrote %v: a third process would trust it", got)
		}
	})
}

// Sequence 5. Everyone saw the Lease; it is deleted; c and d time the absence by polling; d creates
// and the Lease is deleted again between c's polls. An absence is timed only under an unbroken
// watch: two polls that both show no Lease say nothing of what happened between them.
func TestAPolledAbsenceNeverLetsACandidateCreate(t *testing.T) { onStores(t, polledAbsence) }

func polledAbsence(r *rig) {
	t, store, clk := r.t, r.store, r.clk
	h := r.proc(store, "h#1", lease, renew)
	c := r.proc(store, "c#2", lease, renew)
	d := r.proc(store, "d#3", lease, renew)
	h.round(ctx)
	c.round(ctx)
	d.round(ctx)
	r.delete()
	c.round(ctx)
	d.round(ctx)
	d.handle(watchMsg{started: true}) // d times the absence under a watch, c by polling
	for i := 0; !d.Token().Valid; i++ {
		if i > 20 {
			t.Fatal("d never created the Lease under its watch")
		}
		clk.Step(renew)
		if d.round(ctx); d.Token().Valid {
			break // d created it; the Lease is deleted again before c's next poll
		}
		c.round(ctx)
	}
	r.delete()
	for d.Token().Valid {
		c.round(ctx)
		notBothValid(t, "c after d's unseen create and the second delete", c, d)
		clk.Step(renew)
	}
}

// The same with watches: every create and delete in between reaches the candidate, and the timing
// restarts at each.
func TestAWatchedAbsenceSeesACreateAndDeleteBetween(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h := newSync(t, store, clk, "h#1", lease, renew)
	c := newSync(t, store, clk, "c#2", lease, renew)
	d := newSync(t, store, clk, "d#3", lease, renew)
	h.round(ctx)
	w, err := store.Watch(ctx, testLease)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	c.handle(watchMsg{started: true})
	pump := func() {
		for {
			select {
			case ev := <-w.ResultChan():
				c.handle(watchMsg{ev: ev})
			default:
				return
			}
		}
	}
	pump()
	d.round(ctx)
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	pump()
	d.handle(watchMsg{started: true})
	for i := 0; !d.Token().Valid; i++ {
		if i > 20 {
			t.Fatal("d never created the Lease under its watch")
		}
		d.round(ctx)
		clk.Step(renew)
	}
	pump()
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	pump()
	for d.Token().Valid {
		c.round(ctx)
		notBothValid(t, "c after d's create and the second delete", c, d)
		clk.Step(renew)
		pump()
	}
}

// Sequence 6. p1 and p2 write the same epoch in the same microsecond; p2 wins, p1's 409 never
// arrives (a timeout instead); an outside edit then puts p1's name on p2's record. An acquisition
// whose answer was lost is never adopted: the record naming us is timed like anyone else's.
func TestALostAnswerIsNeverAdopted(t *testing.T) { onStores(t, lostAnswerAdoption) }

func lostAnswerAdoption(r *rig) {
	t, store, clk := r.t, r.store, r.clk
	seed := r.proc(store, "seed#0", lease, renew)
	seed.round(ctx)
	if err := seed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost := &hookStore{inner: store, clk: clk}
	p1 := r.proc(lost, "p1#1", lease, renew)
	p2 := r.proc(store, "p2#2", lease, renew)
	lost.onUpdate = func(*coordinationv1.Lease) {
		lost.onUpdate = nil
		p2.round(ctx) // p2 read the released record too, and its PUT lands first, same microsecond
	}
	lost.loseAnswer = func(op string) error {
		if op == "update" {
			return context.DeadlineExceeded
		}
		return nil
	}
	p1.round(ctx) // its PUT lost with a 409 that never arrived
	lost.loseAnswer = nil
	wantToken(t, "p2", p2, 2, true)
	edit(t, store, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To(p1.Identity()) })
	for p2.Token().Valid {
		p1.round(ctx)
		notBothValid(t, "p1 reading p2's record under its name", p1, p2)
		clk.Step(renew / 4)
	}
}

// An epoch that cannot be incremented is a clear, counted error, never a silent stall.
func TestAnEpochAtItsLimitIsAnError(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	seed := newSync(t, store, clk, "seed#0", lease, renew)
	seed.round(ctx)
	edit(t, store, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr.To("")
		l.Spec.LeaseTransitions = ptr.To[int32](1<<31 - 1)
	})
	var logs harness.SyncBuffer
	e := newSync(t, store, clk, "e#1", lease, renew)
	e.log = slog.New(slog.NewTextHandler(&logs, nil))
	for i := 0; i < 3; i++ {
		e.round(ctx)
		clk.Step(renew)
	}
	wantToken(t, "e", e, 0, false)
	if got := errorsByReason(e)["other"]; got != 3 {
		t.Fatalf("errors by reason %v: want each round's epoch-limit error counted", errorsByReason(e))
	}
	if !strings.Contains(logs.String(), "2147483648 does not fit spec.leaseTransitions") {
		t.Fatalf("log does not say why the election stalls:\n%s", logs.String())
	}
}

// A replayed event (or a read answered late) that shows an older, released record must not make a
// candidate forget the longer duration it has seen since: records older than the newest seen are
// ignored.
func TestAReplayedReleaseNeverShortensTheWait(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h1 := newSync(t, store, clk, "h1#1", 10*time.Second, 3*time.Second)
	h2 := newSync(t, store, clk, "h2#2", 30*time.Second, 10*time.Second)
	c := newSync(t, store, clk, "c#3", 10*time.Second, 3*time.Second)
	c.handle(watchMsg{started: true})
	h1.round(ctx)
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := mustLease(t, store)
	h2.round(ctx)
	watched(t, c, store) // c sees h2's 30 s record
	last := mustLease(t, store)
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	gone := last.DeepCopy()
	gone.ResourceVersion = strconv.FormatUint(store.ResourceVersion(), 10)
	c.handle(watchMsg{ev: watch.Event{Type: watch.Deleted, Object: gone}})
	c.handle(watchMsg{ev: watch.Event{Type: watch.Added, Object: released}}) // replayed
	for h2.Token().Valid {
		c.round(ctx)
		notBothValid(t, "after the replayed release", h2, c)
		clk.Step(time.Second)
	}
}

// Found by the simulation's twin-after-delete storyline (seed 1796141689497856341): p holds epoch
// 1; the Lease is deleted; a second process with p's identity (a copied Options.Identity) that
// never saw the Lease creates it at once, epoch 1 again (the package doc's never-seen). p, its
// token still fresh, reads that record — its name, its epoch — and took it for its own holding:
// each twin then renewed the other's record as its own, both valid with one epoch for ever, which
// no fence can tell apart; or, once it was no longer taken for p's holding, p took it for its own
// record edited under its valid token and re-acquired at once over the twin's (and the twin over
// p's). A record is our holding, or ours edited, only on the incarnation our write produced.
func TestATwinsRecreatedLeaseIsNotOurHolding(t *testing.T) { onStores(t, twinRecreated) }

func twinRecreated(r *rig) {
	t, store, clk := r.t, r.store, r.clk
	p := r.proc(store, "p#same", lease, renew)
	p.round(ctx)
	wantToken(t, "p", p, 1, true)
	r.delete()
	twin := r.proc(store, "p#same", lease, renew)
	twin.round(ctx) // never saw the Lease: creates it at once, epoch 1
	wantToken(t, "twin", twin, 1, true)
	for end := clk.Now().Add(3 * lease); clk.Now().Before(end); clk.Step(renew / 2) {
		p.round(ctx)
		twin.round(ctx)
		// The overlap never-seen allows is p's holding of the deleted Lease and the twin's
		// create; neither may take the twin's record for its own, nor re-acquire at once over
		// the other as if its own record had been edited.
		if tp, tt := p.Token(), twin.Token(); tp.Valid && tt.Valid && (tp.Epoch != 1 || tt.Epoch != 1) {
			t.Fatalf("%v after the twin's create: p %+v and the twin %+v both valid", clk.Now().Sub(t0), tp, tt)
		}
	}
	notBothValid(t, "three leases after the twin's create", p, twin)
}

// Found by the simulation's lagging-watch-delete storyline (seed 1796143040522246114): c knows the
// Lease is absent (it saw a deletion); h recreates it and c's watch restarts right after, its new
// stream lagging (the opening ADDED and everything after it still on the way); h renews, after
// the stream began; the Lease is deleted; c's read finds it absent. c timed that absence from the
// stream's start, as if the stream had shown it every write since — and created while h's renewal
// was valid. An absence known from before the current stream is timed again from its first
// sighting under it: a read after the stream began that finds no Lease comes after every write
// of the holding the stream has not brought yet.
func TestAnAbsenceKnownBeforeAStreamIsTimedAgainUnderIt(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h := newSync(t, store, clk, "h#1", lease, renew)
	c := newSync(t, store, clk, "c#2", lease, renew)
	h.round(ctx)
	c.handle(watchMsg{started: true})
	watched(t, c, store)         // c sees h's record
	deletedUnder(t, store, h, c) // c knows it is absent
	clk.Step(time.Second)
	h.round(ctx) // h's renewal finds it gone
	h.round(ctx) // h, still valid when it learned of it, recreates at once
	wantToken(t, "h", h, 2, true)
	c.handle(watchMsg{ended: true})
	c.handle(watchMsg{started: true}) // a new stream, lagging: it delivers nothing from here on
	clk.Step(renew)
	h.round(ctx) // h renews, after c's stream began
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	for h.Token().Valid {
		c.round(ctx)
		notBothValid(t, "c after its read of the absence", h, c)
		clk.Step(time.Second)
	}
}

// deletedUnder deletes the Lease h last wrote, and c's watch delivers the DELETED event.
func deletedUnder(t *testing.T, store *fake.LeaseStore, h, c *Election) {
	t.Helper()
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	c.handle(watchMsg{ev: watch.Event{Type: watch.Deleted, Object: mustLeaseGone(t, store, h)}})
}

// mustLeaseGone is the last state of the Lease h wrote, as a DELETED event carries it.
func mustLeaseGone(t *testing.T, store *fake.LeaseStore, h *Election) *coordinationv1.Lease {
	t.Helper()
	gone := h.d.rec.DeepCopy()
	gone.ResourceVersion = strconv.FormatUint(store.ResourceVersion(), 10)
	return gone
}

// Found by the simulation (seed 1796153565290334398): c (10 s) knows the Lease by a record seen
// before its current stream began; o releases, h (30 s) takes the release, c's watch restarts and
// its new stream lags; h renews; the Lease is deleted; c's read finds it absent and, seeing no
// record under the stream, times the absence for the 10 s it believes in. Then the stream shows c
// an event at or before the newest record it saw: the stream is behind the deletion, and every
// write before it (h's 30 s takeover) is still on its way down. A replay like that makes the
// absence wait for the stream's DELETED event, as a record seen under the stream does.
func TestAReplayedRecordSaysTheStreamIsBehindADeletion(t *testing.T) {
	const short, long = 10 * time.Second, 30 * time.Second
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	o := newSync(t, store, clk, "o#1", short, renew)
	h := newSync(t, store, clk, "h#2", long, renew)
	c := newSync(t, store, clk, "c#3", short, renew)
	o.round(ctx) // o creates, epoch 1, 10 s
	c.handle(watchMsg{started: true})
	old := mustLease(t, store)
	watched(t, c, store) // c sees o's record under its first stream
	c.round(ctx)         // held by o
	clk.Step(time.Second)
	if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h.round(ctx) // h takes the release at once: epoch 2, 30 s, which c never sees
	wantToken(t, "h", h, 2, true)
	c.handle(watchMsg{ended: true})
	c.handle(watchMsg{started: true}) // a new stream, lagging: it delivers the past only
	clk.Step(renew)
	h.round(ctx) // h renews, after c's stream began
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	c.round(ctx) // c reads the absence
	// The lagging stream shows c what it already knew: o's record, from before the deletion.
	c.handle(watchMsg{ev: watch.Event{Type: watch.Modified, Object: old}})
	for h.Token().Valid {
		c.round(ctx)
		notBothValid(t, "c after the stream showed it a record from before the deletion", h, c)
		clk.Step(time.Second)
	}
}

// A holder whose node's wall clock runs ahead writes renewTimes in the future. No overlap can
// follow (the candidate also times the record on its own monotonic clock), but the takeover waits
// until the candidate's wall clock passes renewTime + duration: the offset is added to the
// failover. The candidate says so once, in a warning that names the offset, rather than report
// held_by_other in silence for as long as the clocks disagree.
func TestAHolderClockAheadDelaysTheTakeoverAndSaysSo(t *testing.T) {
	const ahead = 20 * time.Second
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h := newSync(t, store, clk, "h#1", lease, renew)
	var buf bytes.Buffer
	c := newSync(t, store, clk, "c#2", lease, renew)
	c.log = slog.New(slog.NewJSONHandler(&buf, nil))
	h.round(ctx) // h acquires; then its node's clock jumps ahead, and so does the renewTime it writes
	l := mustLease(t, store)
	l.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now().Add(ahead)}
	if _, err := store.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	c.handle(watchMsg{started: true})
	watched(t, c, store)
	// h crashes. c watches its record unchanged for longer than the lease, and more.
	for i := 0; i < 3; i++ { // 1.5 leases: the monotonic wait is over, renewTime + lease is not
		clk.Step(lease / 2)
		c.round(ctx)
	}
	wantToken(t, "c, its monotonic wait done, the renewTime still ahead", c, 0, false)
	warnings := 0
	for _, line := range logLines(t, &buf) {
		if strings.Contains(fmt.Sprint(line["msg"]), "clock skew") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Fatalf("%d clock-skew warnings, want 1:\n%s", warnings, buf.String())
	}
	clk.Step(ahead)
	c.round(ctx)
	wantToken(t, "c, once its wall clock passed the renewTime", c, 2, true)
}

// Watch streams that end before an absence has been watched for its wait hold the create back for
// as long as they keep ending (a proxy's idle timeout shorter than the lease, say). The candidate
// says so, once per absence, and reports the Lease absent, not held by the crashed holder.
func TestStreamsEndingBeforeTheWaitAreNotASilentStall(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h := newSync(t, store, clk, "h#1", lease, renew)
	var buf bytes.Buffer
	c := newSync(t, store, clk, "c#2", lease, renew)
	c.log = slog.New(slog.NewJSONHandler(&buf, nil))
	h.round(ctx)
	c.handle(watchMsg{started: true})
	watched(t, c, store)
	deletedUnder(t, store, h, c) // h has crashed; its Lease is deleted
	for i := 0; i < 10; i++ {    // every stream ends a second after it began
		c.round(ctx)
		clk.Step(time.Second)
		c.handle(watchMsg{ended: true})
		c.handle(watchMsg{started: true})
	}
	wantToken(t, "c under streams shorter than the lease", c, 0, false)
	var early, absent, heldBy int
	for _, line := range logLines(t, &buf) {
		msg := fmt.Sprint(line["msg"])
		switch {
		case strings.Contains(msg, "watch stream ended before"):
			early++
		case strings.Contains(msg, "the lease is absent"):
			absent++
		case strings.Contains(msg, "held by another writer") && absent > 0:
			heldBy++ // after the deletion
		}
	}
	if early != 1 || absent == 0 || heldBy != 0 {
		t.Fatalf("%d early-stream warnings (want 1), %d absent lines (want some), %d held-by lines after it (want 0):\n%s", early, absent, heldBy, buf.String())
	}
}

// Found by make sim (seed 1796156228746201197): c (6 s) has seen h's record (30 s); the Lease is
// deleted under h, which stays valid; b, which never saw it, recreates it and releases it; d
// (6 s) takes the release and crashes. c saw the release on the new incarnation and forgot h's
// 30 s with it — but a release ends only the holdings of its own incarnation, not h's on the
// deleted one — and took over d's record after 6 s, while h was valid. Durations seen on an
// incarnation stay believed after its deletion; a release resets only its own incarnation's.
func TestAReleaseOnANewIncarnationForgetsNoDurationOfTheDeletedOne(t *testing.T) {
	const short, long, renew = 6 * time.Second, 30 * time.Second, 2 * time.Second
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	h := newSync(t, store, clk, "h#1", long, renew)
	c := newSync(t, store, clk, "c#2", short, renew)
	b := newSync(t, store, clk, "b#3", short, renew)
	d := newSync(t, store, clk, "d#4", short, renew)
	h.round(ctx) // h creates the first incarnation: epoch 1, 30 s
	c.handle(watchMsg{started: true})
	watched(t, c, store)
	deletedUnder(t, store, h, c) // h is partitioned; its Lease is deleted
	b.round(ctx)                 // b never saw the Lease: it creates a new incarnation at once (never-seen)
	watched(t, c, store)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	watched(t, c, store) // c sees the release, on the new incarnation
	d.round(ctx)         // d takes the release at once, then crashes
	watched(t, c, store)
	wantToken(t, "h, partitioned", h, 1, true)
	for h.Token().Valid {
		c.round(ctx)
		notBothValid(t, "c, timing d's record", h, c)
		clk.Step(time.Second)
	}
}

// Found by a red team (its TestRTX2OneStreamNoReplayAfterRecreatedRead): u watches one unbroken
// stream that has shown it every record of x's incarnation; the stream then lags. x releases, y
// (600 s) takes the release, the Lease is deleted, and z, whose own stream lags, recreates it
// after its wait and crashes. u's read shows the recreated Lease while its stream still shows
// x's record: the deleted incarnation's writes since (y's 600 s takeover) are on their way down
// the stream, as for an absence read under it. u timed z's record for its own 30 s and took it
// over while y was valid. A recreated Lease read ahead of the stream is taken over only once the
// stream has caught up (the old incarnation's DELETED, or the new one's events).
func TestARecreatedLeaseReadAheadOfTheStreamWaitsForIt(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	x := newSync(t, store, clk, "x#1", 10*time.Second, 2*time.Second)
	y := newSync(t, store, clk, "y#2", 600*time.Second, 200*time.Second)
	z := newSync(t, store, clk, "z#3", 10*time.Second, 2*time.Second)
	u := newSync(t, store, clk, "u#4", 30*time.Second, 12*time.Second)
	u.handle(watchMsg{started: true})
	x.round(ctx)
	watched(t, u, store)
	u.round(ctx)
	z.round(ctx)
	for i := 0; i < 5; i++ {
		clk.Step(2 * time.Second)
		x.round(ctx)
		watched(t, u, store) // u's stream is current up to here
		z.round(ctx)
	}
	clk.Step(time.Second)
	z.handle(watchMsg{ended: true})
	z.handle(watchMsg{started: true}) // z's stream lags from here, and so does u's
	clk.Step(500 * time.Millisecond)
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	y.round(ctx) // y takes the release at once: epoch 2, 600 s
	wantToken(t, "y", y, 2, true)
	clk.Step(100 * time.Millisecond)
	if err := store.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	for z.Token().Epoch == 0 && clk.Since(t0) < time.Minute { // z reads the absence, waits, creates
		clk.Step(500 * time.Millisecond)
		z.round(ctx)
	}
	wantToken(t, "z, after its wait", z, 2, true)
	for i := 0; i < 240 && y.Token().Valid; i++ { // z crashes; u goes on with its rounds
		clk.Step(500 * time.Millisecond)
		u.round(ctx)
		notBothValid(t, "u, having read the recreated Lease ahead of its stream", y, u)
	}
}
