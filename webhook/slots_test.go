package webhook

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

func TestRequesterOf(t *testing.T) {
	for user, want := range map[string]string{
		"mallory": "user:mallory", "system:serviceaccount:noetl:made-up-7": "serviceaccounts:noetl",
		"system:serviceaccount:kube-system:statefulset-controller": "serviceaccounts:kube-system", "system:serviceaccount:odd": "user:system:serviceaccount:odd",
	} {
		if got := requesterOf(authenticationv1.UserInfo{Username: user}); got != want {
			t.Errorf("%s: %s, want %s", user, got, want)
		}
	}
}

// The rules of slots.go on a process of 8 slots (a share of 1, 6 for reviews that fail closed).
func TestSlotsGoToTheRequesterHoldingFewest(t *testing.T) {
	s := newSlots(8)
	ctx := context.Background()
	var flood []func()
	for range 8 {
		release, ok, _ := s.acquire(ctx, "a", true, nil)
		if !ok {
			t.Fatal("a requester alone may take every slot")
		}
		flood = append(flood, release)
	}
	got := make(chan string, 2)
	for _, who := range []string{"a", "b"} {
		go func() {
			release, ok, _ := s.acquire(ctx, who, true, nil)
			if ok {
				got <- who
				release()
			}
		}()
		time.Sleep(20 * time.Millisecond) // a's waits first
	}
	flood[0]()
	if who := <-got; who != "b" {
		t.Fatalf("the freed slot went to %s, want b (holding none) before a (holding 7)", who)
	}
	<-got
	if release, ok, _ := s.acquire(ctx, "a", true, nil); ok {
		flood[0] = release // every slot a's again
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, ok, busy := s.acquire(short, "a", true, nil); ok || !busy {
		t.Fatalf("a's review behind a's own 8: ok=%v busy=%v, want refused for a's own load", ok, busy)
	}
	for _, r := range flood {
		r()
	}
	var closed []func()
	for range 6 {
		release, ok, _ := s.acquire(ctx, "c", false, nil)
		if !ok {
			t.Fatal("six slots for reviews that fail closed")
		}
		closed = append(closed, release)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	queued := false
	if _, ok, _ := s.acquire(short2, "d", false, func() { queued = true }); ok || queued {
		t.Fatalf("a seventh review that fails closed: ok=%v queued=%v; want it waiting, its connection kept (d holds nothing)", ok, queued)
	}
	if release, ok, _ := s.acquire(ctx, "d", true, nil); !ok {
		t.Fatal("a Pod review beside six that fail closed: no slot")
	} else {
		release()
	}
	for _, r := range closed {
		r()
	}
	if s.held != 0 || len(s.by) != 0 || len(s.waiting) != 0 {
		t.Fatalf("all released: held %d, by %v, waiting %d", s.held, s.by, len(s.waiting))
	}
}
