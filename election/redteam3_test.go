package election

// Red-team attacks (rt3) on the rule "a read that finds the Lease gone while the watch still shows
// it counts only from the watch's DELETED event" (absentUnheard, recUnderStream). Fake store,
// fake clock, processes driven by hand (newSync; lagWatch from redteam_test.go). Written by a fresh
// red team from the doc and the code: the first three broke it (two valid tokens, epoch 2 twice) —
// a stream's opening ADDED of a record the driver already knew was ignored as not newer, so the
// driver did not count the stream as carrying that record's deletion — and pass since that event
// marks it (watch.go).

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

const rt3Short, rt3Long, rt3Renew = 10 * time.Second, 30 * time.Second, 3 * time.Second

// rt3Covered logs (instead of failing) an overlap that a named non-guarantee covers.
func rt3Covered(t *testing.T, what, name string, a, b *Election) {
	t.Helper()
	ta, tb := a.Token(), b.Token()
	t.Logf("%s: %s %+v, %s %+v", what, a.Identity(), ta, b.Identity(), tb)
	if ta.Valid && tb.Valid {
		t.Logf("overlap (covered by %s): epochs %d and %d", name, ta.Epoch, tb.Epoch)
	} else {
		t.Logf("no overlap")
	}
}

// ATTACK 1: the record is shown on the stream (the stream's opening ADDED), but as an event the
// driver already knew (same resourceVersion as a read before the watch began), so it goes to
// recall() and recUnderStream stays false. The stream then lags; w releases, h (30 s) takes the
// release, the Lease is deleted. b's poll (stale after the start: up to a renew interval later)
// finds no Lease: absentUnheard is not set, and b times the absence for its own 10 s from the read.
// b has seen U1 on this stream, so "a write after its stream began when it had seen nothing on
// that stream yet" does not apply; the watch still shows U1 when the read finds it gone.
func TestRT3StreamOpeningAddedOfKnownRecordFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	w := newSync(t, mem, clk, NewIdentity("w"), rt3Short, rt3Renew)
	h := newSync(t, mem, clk, NewIdentity("h"), rt3Long, rt3Renew)
	b := newSync(t, mem, clk, NewIdentity("b"), rt3Short, rt3Renew)

	mustRound(w) // U1, epoch 1, 10 s
	mustRound(b) // b (no watch yet) reads U1
	hw := openLag(t, mem)
	h.handle(watchMsg{started: true})
	hw.take(1)
	hw.deliver(h)
	mustRound(h)

	bw := openLag(t, mem) // b's watch starts; its opening ADDED U1 is delivered and handled
	b.handle(watchMsg{started: true})
	bw.take(1)
	t.Logf("b's stream opens with: %v", bw.describe())
	bw.deliver(b)
	t.Logf("b: recUnderStream=%v after the stream showed U1", b.d.recUnderStream)

	clk.Step(time.Second)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hw.take(1)
	hw.deliver(h)
	mustRound(h) // h takes the release at once: epoch 2, 30 s
	if tok := h.Token(); !tok.Valid || tok.Epoch != 2 {
		t.Fatalf("h: %+v", tok)
	}
	clk.Step(100 * time.Millisecond)
	if err := mem.Delete(ctx, testLease); err != nil { // h partitioned from here on
		t.Fatal(err)
	}
	bw.take(3)                        // release, h's acquisition, deletion: still on their way down b's stream
	clk.Step(1900 * time.Millisecond) // the poll after the watch start, a renew interval after b's last round
	mustRound(b)                      // NotFound
	t.Logf("b after its read: absentUnheard=%v absentWait=%v", b.d.absentUnheard, b.d.absentWait)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	t.Logf("b's stream still holds: %v", bw.describe())
	bothValid(t, "b after 10 s of a read absence, stream showing U1", b, h)
}

// ATTACK 2: the same through a watch restart at an odd moment: b saw U1 under stream S1
// (recUnderStream true); S1 ends and S2 begins while U1 still exists, S2's opening ADDED U1 is
// handled (known already: recall), started has cleared recUnderStream, and S2 then lags behind
// h's takeover-by-release and the deletion. Both happened after S2 began.
func TestRT3RestartReplaysKnownRecordFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	w := newSync(t, mem, clk, NewIdentity("w"), rt3Short, rt3Renew)
	h := newSync(t, mem, clk, NewIdentity("h"), rt3Long, rt3Renew)
	b := newSync(t, mem, clk, NewIdentity("b"), rt3Short, rt3Renew)

	mustRound(w)
	s1 := openLag(t, mem)
	b.handle(watchMsg{started: true})
	s1.take(1)
	s1.deliver(b)
	mustRound(b) // reads U1 under S1
	hw := openLag(t, mem)
	h.handle(watchMsg{started: true})
	hw.take(1)
	hw.deliver(h)
	mustRound(h)

	s1.w.Stop()
	b.handle(watchMsg{ended: true})
	s2 := openLag(t, mem)
	b.handle(watchMsg{started: true})
	s2.take(1)
	s2.deliver(b) // ADDED U1, same rv: recall only
	t.Logf("b: recUnderStream=%v after S2 showed U1", b.d.recUnderStream)

	clk.Step(time.Second)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hw.take(1)
	hw.deliver(h)
	mustRound(h)
	clk.Step(100 * time.Millisecond)
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	s2.take(3)
	clk.Step(1900 * time.Millisecond)
	mustRound(b)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	bothValid(t, "b after a restart whose stream showed U1", b, h)
}

// CONTROL 3 (expected to hold): the read happens after the stream start, so the rule applies;
// the stream then delivers an older incarnation's (U0's) DELETED first and h's writes late. b must not create before h's 30 s after the DELETED.
// Also liveness: after the DELETED and h's 30 s, b creates.
func TestRT3OlderIncarnationDeletedDoesNotClearFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	w0 := newSync(t, mem, clk, NewIdentity("w0"), rt3Short, rt3Renew)
	w := newSync(t, mem, clk, NewIdentity("w"), rt3Short, rt3Renew)
	h := newSync(t, mem, clk, NewIdentity("h"), rt3Long, rt3Renew)
	b := newSync(t, mem, clk, NewIdentity("b"), rt3Short, rt3Renew)

	mustRound(w0) // U0
	bw := openLag(t, mem)
	b.handle(watchMsg{started: true})
	bw.take(1) // ADDED U0, kept back: b's stream lags from its start
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	mustRound(w) // never-seen w creates U1 at once (w's own case)
	mustRound(b) // b reads U1 under the stream
	hw := openLag(t, mem)
	h.handle(watchMsg{started: true})
	hw.take(1)
	hw.deliver(h)
	mustRound(h)
	clk.Step(time.Second)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hw.take(1)
	hw.deliver(h)
	mustRound(h) // epoch 2, 30 s
	clk.Step(100 * time.Millisecond)
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	b.d.stale = true // as after b's takeover of w's record 409'd
	mustRound(b)     // NotFound: absentUnheard
	t.Logf("b: absentUnheard=%v", b.d.absentUnheard)
	bw.take(6)
	all := bw.backlog
	bw.backlog = all[:2] // ADDED U0, DELETED U0 only
	bw.deliver(b)
	t.Logf("after U0's DELETED: absentUnheard=%v", b.d.absentUnheard)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	bothValid(t, "b after an older incarnation's DELETED", b, h)
	bw.backlog = all[2:]
	bw.deliver(b)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	bothValid(t, "b after U1's DELETED + 10 s", b, h)
	clk.Step(rt3Long)
	mustRound(b)
	if tok := b.Token(); !tok.Valid {
		t.Errorf("liveness: b never created after the DELETED and 30 s: %+v (absentUnheard=%v watching=%v)",
			tok, b.d.absentUnheard, b.d.watching)
	}
}

// CONTROL 4 (covered): S1 lags, h's takeover-by-release and the deletion are lost with S1's drop;
// S2 starts after both: b times only its own 10 s. create-delete-unseen: "someone else's holding
// and the Lease's deletion after it, both while this process could not see them (before its watch
// began ...)".
func TestRT3LostWithDroppedStreamFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	w := newSync(t, mem, clk, NewIdentity("w"), rt3Short, rt3Renew)
	h := newSync(t, mem, clk, NewIdentity("h"), rt3Long, rt3Renew)
	b := newSync(t, mem, clk, NewIdentity("b"), rt3Short, rt3Renew)
	mustRound(w)
	s1 := openLag(t, mem)
	b.handle(watchMsg{started: true})
	s1.take(1)
	s1.deliver(b)
	mustRound(b)
	hw := openLag(t, mem)
	h.handle(watchMsg{started: true})
	hw.take(1)
	hw.deliver(h)
	mustRound(h)
	clk.Step(time.Second)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hw.take(1)
	hw.deliver(h)
	mustRound(h)
	clk.Step(100 * time.Millisecond)
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	mustRound(b) // absentUnheard
	s1.w.Stop()
	b.handle(watchMsg{ended: true})
	openLag(t, mem)
	b.handle(watchMsg{started: true})
	mustRound(b)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	rt3Covered(t, "b after S2's 10 s", "create-delete-unseen", b, h)
}

// CONTROL 5 (liveness): a read finds the Lease gone under the stream; the DELETED event's rv is
// the only change; nothing else. b must create within its wait after the event.
func TestRT3LivenessAfterDeletedFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	w := newSync(t, mem, clk, NewIdentity("w"), rt3Short, rt3Renew)
	b := newSync(t, mem, clk, NewIdentity("b"), rt3Short, rt3Renew)
	mustRound(w)
	bw := openLag(t, mem)
	b.handle(watchMsg{started: true})
	bw.take(1)
	bw.deliver(b)
	mustRound(b)
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	bw.take(1)
	mustRound(b) // forced read (stale): gone, absentUnheard
	b.d.stale = true
	mustRound(b)
	t.Logf("absentUnheard=%v", b.d.absentUnheard)
	clk.Step(rt3Short + time.Second)
	bw.deliver(b)
	for i := 0; i < 5 && !b.Token().Valid; i++ {
		clk.Step(rt3Short)
		mustRound(b)
	}
	if !b.Token().Valid {
		t.Errorf("liveness: b stalls: %+v absentUnheard=%v", b.Token(), b.d.absentUnheard)
	}
}

// ATTACK 3: attack 1 with b's own record. b holds U1 (acquired before its watch began); the
// stream opens with ADDED U1 at b's own rv (recall only: recUnderStream false). Then every call
// of b fails (a partition of requests; the stream stays up but lags) past b's lease; h (30 s)
// times b's record, takes it over, and the Lease is deleted. b's calls come back: a read finds no
// Lease while the stream still shows U1, and b times only its own 10 s.
func TestRT3OwnRecordShownOnStreamFake(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mem := fake.NewLeaseStore()
	ctx := context.Background()
	down := false
	hs := &hookStore{inner: mem, clk: clk}
	hs.setFail(func(op string) error {
		if down {
			return context.DeadlineExceeded
		}
		return nil
	})
	h := newSync(t, mem, clk, NewIdentity("h"), rt3Long, rt3Renew)
	b := newSync(t, hs, clk, NewIdentity("b"), rt3Short, rt3Renew)
	mustRound(b) // U1, epoch 1, b holds
	hw := openLag(t, mem)
	h.handle(watchMsg{started: true})
	hw.take(1)
	hw.deliver(h)
	mustRound(h)
	bw := openLag(t, mem)
	b.handle(watchMsg{started: true})
	bw.take(1)
	bw.deliver(b) // ADDED U1 at b's own rv
	down = true
	for i := 0; i < 11; i++ {
		clk.Step(rt3Renew)
		mustRound(b) // fails
	}
	mustRound(h) // 33 s of U1 unchanged: h takes over, epoch 2, 30 s
	if tok := h.Token(); !tok.Valid {
		t.Fatalf("h: %+v", tok)
	}
	clk.Step(100 * time.Millisecond)
	if err := mem.Delete(ctx, testLease); err != nil {
		t.Fatal(err)
	}
	bw.take(2)
	down = false
	clk.Step(time.Second)
	mustRound(b) // NotFound
	t.Logf("b after its read: absentUnheard=%v recUnderStream=%v", b.d.absentUnheard, b.d.recUnderStream)
	clk.Step(rt3Short + 100*time.Millisecond)
	mustRound(b)
	bothValid(t, "b over its own record's absence", b, h)
}
