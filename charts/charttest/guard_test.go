package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func newLease(name, holder string, epoch int32) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     ptr.To(epoch),
		},
	}
}

// TestLeaseGuard drives one shard Lease through an election's life against the real API server, as
// the writer's own account: what a correct writer does is allowed, what would break the epoch's
// monotonicity is refused.
func TestLeaseGuard(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, nil)
	ctx := context.Background()
	leases := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
	admin := r.cs.CoordinationV1().Leases(r.ns)

	// The API server type-checks the policy's CEL against the Lease schema; a warning there is a typo.
	waitFor(t, 30*time.Second, "the policy's type check", func(ctx context.Context) (bool, error) {
		vap, err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, r.name+"-lease-guard."+r.ns, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if vap.Status.ObservedGeneration < vap.Generation {
			return false, nil
		}
		if tc := vap.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			t.Errorf("policy type-check warnings: %+v", tc.ExpressionWarnings)
		}
		return true, nil
	})

	steps := []struct {
		name   string
		mutate func(l *coordinationv1.Lease)
		denied string // "" = allowed
	}{
		{"renewal", func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now())) }, ""},
		{"lowering leaseTransitions", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) }, "may never decrease (1 -> 0)"},
		{"takeover that increments", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#2"), ptr.To[int32](2)
		}, ""},
		{"takeover without increment", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("writer-0#3") }, "must increment spec.leaseTransitions"},
		{"takeover that lowers", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#3"), ptr.To[int32](1)
		}, "may never decrease"},
		{"release to an empty holder", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, ""},
		{"acquiring a released Lease without increment", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("writer-0#3") }, "must increment"},
		{"acquiring a released Lease", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#3"), ptr.To[int32](3)
		}, ""},
		{"re-acquiring after the lease lapsed (same identity, next epoch)", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](4) }, ""},
		{"release that lowers the epoch", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To(""), ptr.To[int32](3)
		}, "may never decrease (4 -> 3)"},
		{"release by dropping the holder field", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, ""},
		{"dropping leaseTransitions (reads as 0)", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = nil }, "may never decrease (4 -> 0)"},
		{"metadata-only update", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"shard": "0"} }, ""},
	}
	for _, s := range steps {
		current, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		next := current.DeepCopy()
		s.mutate(next)
		_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		checkGuard(t, s.name, err, s.denied)
	}

	// The writer has no delete verb; an admin (who has) is refused by the guard.
	checkGuard(t, "delete", admin.Delete(ctx, lease.Name, metav1.DeleteOptions{}), "never deleted")
	checkGuard(t, "delete collection", admin.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}), "never deleted")

	t.Run("absent fields", func(t *testing.T) {
		// A Lease created with an empty spec, as `kubectl create` would: no holder, no transitions.
		bare, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-00000001"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held := bare.DeepCopy()
		held.Spec.HolderIdentity = ptr.To("writer-1#1")
		_, err = leases.Update(ctx, held, metav1.UpdateOptions{})
		checkGuard(t, "first holder without an epoch", err, `must increment spec.leaseTransitions by exactly 1 (holder "" -> "writer-1#1", epoch 0 -> 0)`)
		held.Spec.LeaseTransitions = ptr.To[int32](1)
		_, err = leases.Update(ctx, held, metav1.UpdateOptions{})
		checkGuard(t, "first holder with epoch 1", err, "")
	})

	t.Run("outside the guard", func(t *testing.T) {
		other := r.c.NewNamespace(t)
		for _, l := range []struct{ ns, name string }{{r.ns, "not-a-shard"}, {other, "ehdb-shard-00000000"}} {
			created, err := r.cs.CoordinationV1().Leases(l.ns).Create(ctx, newLease(l.name, "a", 5), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			created.Spec.LeaseTransitions = ptr.To[int32](0)
			if _, err := r.cs.CoordinationV1().Leases(l.ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Errorf("%s/%s: lowering an unguarded Lease: %v", l.ns, l.name, err)
			}
			if err := r.cs.CoordinationV1().Leases(l.ns).Delete(ctx, l.name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("%s/%s: deleting an unguarded Lease: %v", l.ns, l.name, err)
			}
		}
	})

	t.Run("the writer's own account", func(t *testing.T) {
		// The writer's real requests pass RBAC and the guard for a takeover, and are refused a rollback.
		w := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
		cur, err := w.Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.HolderIdentity, cur.Spec.LeaseTransitions = ptr.To("writer-0#9"), ptr.To(*cur.Spec.LeaseTransitions+1)
		if cur, err = w.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("writer takeover: %v", err)
		}
		cur.Spec.LeaseTransitions = ptr.To[int32](1)
		_, err = w.Update(ctx, cur, metav1.UpdateOptions{})
		checkGuard(t, "writer rollback", err, "may never decrease")
	})
}

func checkGuard(t *testing.T, step string, err error, denied string) {
	t.Helper()
	switch {
	case denied == "" && err != nil:
		t.Errorf("%s: refused: %v", step, err)
	case denied != "" && err == nil:
		t.Errorf("%s: allowed, want refused with %q", step, denied)
	case denied != "" && !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)):
		t.Errorf("%s: err = %v, want a policy denial", step, err)
	case denied != "" && !strings.Contains(err.Error(), denied):
		t.Errorf("%s: denial %q does not say %q", step, err, denied)
	}
}

// TestLeaseGuardDoesNotBlockNamespaceDeletion: deleting the namespace deletes its Leases, guarded or
// not; a guard that refused that would leave the namespace Terminating for ever.
func TestLeaseGuardDoesNotBlockNamespaceDeletion(t *testing.T) {
	t.Parallel()
	r, _ := installGuardWithLease(t, nil)
	ctx := context.Background()
	removePolicyWithTheNamespace(t, r)
	if err := r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "namespace "+r.ns+" to be deleted", func(ctx context.Context) (bool, error) {
		_, err := r.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// removePolicyWithTheNamespace: for tests that delete the release namespace, Helm's record goes
// with it, so the lease guard's cluster-scoped policy and binding are removed by hand at cleanup.
func removePolicyWithTheNamespace(t *testing.T, r *testRelease) {
	name := r.name + "-lease-guard." + r.ns
	t.Cleanup(func() {
		ctx := context.Background()
		_ = r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
}
