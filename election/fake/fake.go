// Package fake holds an in-memory LeaseStore for tests of code that runs an election: it answers
// like the API server (resourceVersions, uids, 409s, the PUT-on-absent recreate) and streams
// changes like a watch, so tests need no cluster. It is kept out of package election's API
// (client-go's convention for fakes); a conformance suite in package election runs the same
// checks against it and against a real API server.
package fake

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

var leaseResource = coordinationv1.Resource("leases")

// LeaseStore is an in-memory election.LeaseStore (and LeaseWatcher) that answers like the API server: every write bumps a
// store-wide resourceVersion, a create assigns a uid, stale preconditions are 409s, and an Update of
// an absent Lease without a uid recreates it (201 on the real server) while one with a uid is a
// 409. It exists for tests, including those showing why the uid precondition matters.
type LeaseStore struct {
	mu       sync.Mutex
	rv       uint64
	leases   map[string]*coordinationv1.Lease
	watchers map[*memWatch]struct{}
}

// NewLeaseStore returns an empty store.
func NewLeaseStore() *LeaseStore {
	return &LeaseStore{leases: map[string]*coordinationv1.Lease{}, watchers: map[*memWatch]struct{}{}}
}

// Get returns a copy of the named Lease, or NotFound.
func (m *LeaseStore) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[name]
	if !ok {
		return nil, apierrors.NewNotFound(leaseResource, name)
	}
	return l.DeepCopy(), nil
}

// Create stores a new Lease, or fails with AlreadyExists.
func (m *LeaseStore) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if lease.ResourceVersion != "" {
		return nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leases[lease.Name]; ok {
		return nil, apierrors.NewAlreadyExists(leaseResource, lease.Name)
	}
	return m.createLocked(lease), nil
}

// Update is a PUT with the API server's preconditions: a set uid or resourceVersion that does not
// match is a Conflict; on an absent Lease a set uid is a Conflict and no uid recreates the Lease.
func (m *LeaseStore) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.leases[lease.Name]
	if !ok {
		if lease.UID != "" {
			return nil, apierrors.NewConflict(leaseResource, lease.Name,
				fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: ", lease.UID))
		}
		return m.createLocked(lease), nil
	}
	if lease.UID != "" && lease.UID != cur.UID {
		return nil, apierrors.NewConflict(leaseResource, lease.Name,
			fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", lease.UID, cur.UID))
	}
	if lease.ResourceVersion != "" && lease.ResourceVersion != cur.ResourceVersion {
		return nil, apierrors.NewConflict(leaseResource, lease.Name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	next := lease.DeepCopy()
	next.UID = cur.UID
	next.CreationTimestamp = cur.CreationTimestamp
	m.rv++
	next.ResourceVersion = strconv.FormatUint(m.rv, 10)
	m.leases[next.Name] = next
	m.notifyLocked(watch.Modified, next)
	return next.DeepCopy(), nil
}

// Delete removes the named Lease (what an operator's kubectl delete would do).
func (m *LeaseStore) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[name]
	if !ok {
		return apierrors.NewNotFound(leaseResource, name)
	}
	delete(m.leases, name)
	m.rv++
	gone := l.DeepCopy()
	gone.ResourceVersion = strconv.FormatUint(m.rv, 10)
	m.notifyLocked(watch.Deleted, gone)
	return nil
}

func (m *LeaseStore) createLocked(lease *coordinationv1.Lease) *coordinationv1.Lease {
	next := lease.DeepCopy()
	next.UID = types.UID(uuid.NewString())
	next.CreationTimestamp = metav1.Now()
	m.rv++
	next.ResourceVersion = strconv.FormatUint(m.rv, 10)
	m.leases[next.Name] = next
	m.notifyLocked(watch.Added, next)
	return next.DeepCopy()
}

// memWatchBuffer is how many events a watcher may fall behind before the store ends its watch, as
// the API server ends the watch of a client too slow to keep up.
const memWatchBuffer = 64

// Watch streams the named Lease's changes, starting with its current state.
func (m *LeaseStore) Watch(ctx context.Context, name string) (watch.Interface, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &memWatch{store: m, name: name, ch: make(chan watch.Event, memWatchBuffer)}
	m.mu.Lock()
	m.watchers[w] = struct{}{}
	if l, ok := m.leases[name]; ok {
		w.ch <- watch.Event{Type: watch.Added, Object: l.DeepCopy()}
	}
	m.mu.Unlock()
	context.AfterFunc(ctx, w.Stop)
	return w, nil
}

func (m *LeaseStore) notifyLocked(t watch.EventType, l *coordinationv1.Lease) {
	for w := range m.watchers {
		if w.name != l.Name {
			continue
		}
		select {
		case w.ch <- watch.Event{Type: t, Object: l.DeepCopy()}:
		default:
			w.closeLocked()
		}
	}
}

type memWatch struct {
	store *LeaseStore
	name  string
	ch    chan watch.Event
}

func (w *memWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *memWatch) Stop() {
	w.store.mu.Lock()
	defer w.store.mu.Unlock()
	w.closeLocked()
}

// Watchers is how many watches are open (tests wait on it).
func (m *LeaseStore) Watchers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.watchers)
}

// ResourceVersion is the store-wide resourceVersion of the last change.
func (m *LeaseStore) ResourceVersion() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rv
}

func (w *memWatch) closeLocked() {
	if _, ok := w.store.watchers[w]; ok {
		delete(w.store.watchers, w)
		close(w.ch)
	}
}
