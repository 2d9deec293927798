package charttest

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamOwnerExemptions attacks issue 17's class 2 on the real API server with the
// controllers running: an owner exempts a child from the order check only when the owner's pod
// template, which the guard judged, is the child's.
func TestRedTeamOwnerExemptions(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	deployments, replicaSets := cs.AppsV1().Deployments(rt.ns), cs.AppsV1().ReplicaSets(rt.ns)
	lease := rt.liveLease(t, 0)

	asDeployment := func(name string, s *appsv1.StatefulSet) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: s.Spec.Selector, Template: s.Spec.Template}}
	}

	t.Run("an armed ReplicaSet under a real, unarmed Deployment is judged itself", func(t *testing.T) {
		plain, err := deployments.Create(ctx, asDeployment("plain", rt.writer("plain", wt.SetEnv("NOETL_EHDB_FENCING", "off"))), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		armed := rt.writer("plain", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7")) // no Lease for shard 7
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "plain-armed", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: plain.Name, UID: plain.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Selector: armed.Spec.Selector, Template: armed.Spec.Template}}
		var err2 error
		waitFor(t, 30*time.Second, "the Deployment in the webhook's watch", func(ctx context.Context) (bool, error) {
			_, err2 = replicaSets.Create(ctx, rs, dryRunCreate)
			return err2 != nil, nil
		})
		refused(t, "armed ReplicaSet, unarmed owner with its true uid", err2, "ehdb-shard-00000007 (shard 7) does not exist")
	})

	t.Run("the ReplicaSet the Deployment controller makes from a judged template stays exempt", func(t *testing.T) {
		d := asDeployment("armed", rt.writer("armed", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")))
		var err error
		waitFor(t, 30*time.Second, "the armed Deployment admitted with shard 0 live", func(ctx context.Context) (bool, error) {
			_, err = deployments.Create(ctx, d, metav1.CreateOptions{})
			return err == nil, nil
		})
		got, err := deployments.Get(ctx, "armed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owned := func(ctx context.Context) (*appsv1.ReplicaSet, error) {
			list, err := replicaSets.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			for i := range list.Items {
				if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == got.UID && list.Items[i].DeletionTimestamp == nil {
					return &list.Items[i], nil
				}
			}
			return nil, nil
		}
		var first *appsv1.ReplicaSet
		waitFor(t, 60*time.Second, "the Deployment controller's ReplicaSet", func(ctx context.Context) (bool, error) {
			first, err = owned(ctx)
			return first != nil, err
		})
		// The shard's election stops (its writer releases the Lease): judged itself, a ReplicaSet
		// would now fail the order check. The ReplicaSet is deleted, and the Deployment
		// controller makes it again, as after any loss of it: only the exemption admits it.
		lease.Spec.HolderIdentity = ptr.To("")
		writer := saClient(t, rt.testRelease, rt.ns, "noetl-cmdbus-writer")
		if _, err := writer.CoordinationV1().Leases(rt.ns).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := replicaSets.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the Deployment controller's new ReplicaSet admitted", func(ctx context.Context) (bool, error) {
			rs, err := owned(ctx)
			return rs != nil && rs.UID != first.UID, err
		})
	})
}
