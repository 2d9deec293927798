package election

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// LeaseStore is where the election's Lease lives. Calls are synchronous and honour ctx. Errors are
// the API server's (k8s.io/apimachinery/pkg/api/errors): NotFound from Get, AlreadyExists from a
// Create that lost the race, Conflict from an Update whose resourceVersion or uid no longer matches.
type LeaseStore interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	// Create is a POST: it never overwrites.
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Update is a compare-and-swap PUT on lease's resourceVersion and uid.
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// LeaseWatcher is implemented by stores that can stream changes of one Lease. A store without it
// still works: the election then polls at the renew interval.
type LeaseWatcher interface {
	// Watch starts at the Lease's current state (an ADDED event when it exists).
	Watch(ctx context.Context, name string) (watch.Interface, error)
}

// KubeStore is the LeaseStore of a real cluster: coordination.k8s.io/v1 Leases in one namespace.
type KubeStore struct {
	leases coordinationclient.LeaseInterface
}

var (
	_ LeaseStore   = (*KubeStore)(nil)
	_ LeaseWatcher = (*KubeStore)(nil)
)

// NewKubeStore returns the LeaseStore for namespace. It needs leases get, watch, create and update
// there (list too, because a watch is authorized as list+watch).
func NewKubeStore(client kubernetes.Interface, namespace string) *KubeStore {
	return &KubeStore{leases: client.CoordinationV1().Leases(namespace)}
}

// Get reads the Lease.
func (s *KubeStore) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return s.leases.Get(ctx, name, metav1.GetOptions{})
}

// Create POSTs the Lease; it fails with AlreadyExists when another candidate created it first.
func (s *KubeStore) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.leases.Create(ctx, lease, metav1.CreateOptions{})
}

// errUnconditionalUpdate is returned, without calling the API, for an Update lacking either
// precondition.
var errUnconditionalUpdate = errors.New("refusing to update a Lease without both resourceVersion and uid")

// Update PUTs the Lease. Both preconditions are required: the API server treats a PUT on an absent
// Lease as a create (201, even with a resourceVersion set), which would silently recreate a deleted
// Lease with a reset epoch; with metadata.uid set it answers 409 instead.
func (s *KubeStore) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if lease.ResourceVersion == "" || lease.UID == "" {
		return nil, fmt.Errorf("lease %s: %w", lease.Name, errUnconditionalUpdate)
	}
	return s.leases.Update(ctx, lease, metav1.UpdateOptions{})
}

// Watch streams changes of the named Lease only (a metadata.name field selector, so a Role may be
// as narrow as the chart makes it).
func (s *KubeStore) Watch(ctx context.Context, name string) (watch.Interface, error) {
	return s.leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", name).String(),
		AllowWatchBookmarks: false,
	})
}
