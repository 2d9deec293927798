package election

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election/fake"
)

// rawStore is a store without the election's guard rails (its Update sends whatever it is given),
// so the same assertions can pin down what the API server does and that MemoryStore does the same.
type rawStore interface {
	LeaseStore
	LeaseWatcher
	Delete(ctx context.Context, name string) error
}

// storeConformance is run against MemoryStore (unit) and the real API server (integration).
func storeConformance(t *testing.T, s rawStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "ehdb-shard-0000c0fe"
	mk := func(transitions int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseTransitions: ptr.To(transitions)}}
	}
	if _, err := s.Get(ctx, name); !apierrors.IsNotFound(err) {
		t.Fatalf("get absent: %v, want NotFound", err)
	}
	created, err := s.Create(ctx, mk(1))
	if err != nil || created.UID == "" || created.ResourceVersion == "" {
		t.Fatalf("create: %+v %v", created, err)
	}
	if _, err := s.Create(ctx, mk(1)); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists (409)", err)
	}

	w, err := s.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func(want watch.EventType) *coordinationv1.Lease {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type != want {
				t.Fatalf("watch event %v (open %v), want %v", ev.Type, ok, want)
			}
			return ev.Object.(*coordinationv1.Lease)
		case <-ctx.Done():
			t.Fatalf("no %v event", want)
		}
		return nil
	}
	if got := next(watch.Added); got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("initial event at rv %s, want %s", got.ResourceVersion, created.ResourceVersion)
	}

	upd := created.DeepCopy()
	upd.Spec.HolderIdentity = ptr.To("b")
	updated, err := s.Update(ctx, upd)
	if err != nil || updated.UID != created.UID || updated.ResourceVersion == created.ResourceVersion {
		t.Fatalf("compare-and-swap update: %+v %v", updated, err)
	}
	if got := next(watch.Modified); got.ResourceVersion != updated.ResourceVersion {
		t.Fatalf("modified event at rv %s, want %s", got.ResourceVersion, updated.ResourceVersion)
	}
	if _, err := s.Update(ctx, upd); !apierrors.IsConflict(err) {
		t.Fatalf("update with a stale resourceVersion: %v, want Conflict (409)", err)
	}
	wrongUID := updated.DeepCopy()
	wrongUID.UID = "00000000-0000-0000-0000-000000000000"
	if _, err := s.Update(ctx, wrongUID); !apierrors.IsConflict(err) {
		t.Fatalf("update with another uid: %v, want Conflict (409)", err)
	}

	if err := s.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	next(watch.Deleted)
	if _, err := s.Update(ctx, updated); !apierrors.IsConflict(err) {
		t.Fatalf("update with uid of a deleted lease: %v, want Conflict (409)", err)
	}
	if _, err := s.Get(ctx, name); !apierrors.IsNotFound(err) {
		t.Fatalf("after the refused update: %v, want NotFound", err)
	}
	// The gap the uid closes: without it, a PUT with a resourceVersion recreates the Lease (201),
	// here with its epoch reset to 0.
	noUID := updated.DeepCopy()
	noUID.UID = ""
	noUID.Spec.LeaseTransitions = ptr.To[int32](0)
	recreated, err := s.Update(ctx, noUID)
	if err != nil {
		t.Fatalf("update without uid of a deleted lease: %v, want it recreated", err)
	}
	if recreated.UID == "" || recreated.UID == created.UID || epochOf(recreated) != 0 {
		t.Fatalf("recreated %+v", recreated)
	}
	next(watch.Added)
	if err := s.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryStoreConformance(t *testing.T) { storeConformance(t, fake.NewLeaseStore()) }
