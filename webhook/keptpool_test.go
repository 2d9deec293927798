package webhook

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Red team J's hold-and-wait on the kept-bytes pool: one requester's reviews each held part of it
// and waited for the rest until their deadlines, and their Pods failed open as "could not verify".
// A review that would wait while its own requester holds its share is refused at once (and so
// marked), one of another requester waits for its turn, and the pool stays work-conserving: a
// requester alone may take more than its share while nobody waits.
func TestAKeptBytesWaitBehindOwnLoadIsRefused(t *testing.T) {
	p := newKeptPool()
	ctx := context.Background()
	// Six of her reviews of 1 MiB each: past her share, the pool being free.
	for range 6 {
		if err := p.acquire(ctx, "user:mallory", reviewKeptBytes); err != nil {
			t.Fatalf("a free pool refused a charge: %v", err)
		}
	}
	// The admin's reviews take what is left but a byte: less than her share.
	if err := p.acquire(ctx, "user:admin", 2<<20-1); err != nil {
		t.Fatalf("another requester's charge of what is left: %v", err)
	}
	next := &reviewLoad{who: "user:mallory"}
	start := time.Now()
	err := next.charge(ctx, p, 1<<10)
	if !errors.Is(err, errOwnLoad) || !next.starvedByOwnLoad() || time.Since(start) > time.Second {
		t.Fatalf("her next review, the pool full and her share held: %v after %s (starved by own load %v); want errOwnLoad at once", err, time.Since(start), next.starvedByOwnLoad())
	}
	waiting := &reviewLoad{who: "user:admin"}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := waiting.charge(wctx, p, 1<<10); errors.Is(err, errOwnLoad) || waiting.starvedByOwnLoad() || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the admin's review, the pool full and less than her share held: %v; want it to wait its turn (here until its deadline)", err)
	}
	p.release("user:mallory", 6*reviewKeptBytes)
	if err := waiting.charge(ctx, p, 1<<10); err != nil {
		t.Fatalf("once mallory's reviews are answered: %v", err)
	}
}
