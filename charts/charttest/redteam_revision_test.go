package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The twelfth red team, with the StatefulSet controller running: an armed writer's canary
// rollout held at partition 1 (the new revision only on ordinal 1). The writer of ordinal 0
// crashes and its Pod is deleted; the controller makes its replacement from the current
// revision, as it makes every pod below the partition. That Pod must be admitted: its shard's
// Lease has lapsed and only it can renew it (the guard refused it 25 times as lease_not_live).
func TestRedTeamCanaryPartitionReplacement(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	sets, pods := rt.cs.AppsV1().StatefulSets(rt.ns), rt.cs.CoreV1().Pods(rt.ns)
	lapsed := rt.briefLease(t, 0)
	rt.briefLease(t, 1)
	set := rt.writer("canary", func(s *appsv1.StatefulSet) {
		s.Spec.Replicas = ptr.To[int32](2)
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement // no kubelet here: no pod becomes ready
	})
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the armed StatefulSet, both shards live: %v", err)
	}
	t.Cleanup(func() {
		_ = sets.Delete(context.Background(), set.Name, metav1.DeleteOptions{})
		for _, p := range []string{"canary-0", "canary-1"} {
			_ = pods.Delete(context.Background(), p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	})
	waitFor(t, 60*time.Second, "the controller to make canary-0", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "canary-0", metav1.GetOptions{})
		return err == nil, nil
	})
	// The canary: a new env for ordinals from 1 up (armed → armed, no shard added).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := &got.Spec.Template.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "CANARY", Value: "1"})
		got.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}
		_, err = sets.Update(ctx, got, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("the canary update: %v", err)
	}
	var current string
	waitFor(t, 60*time.Second, "the controller to see the rollout", func(ctx context.Context) (bool, error) {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		current = got.Status.CurrentRevision
		return current != "" && got.Status.UpdateRevision != "" && current != got.Status.UpdateRevision, nil
	})
	time.Sleep(time.Until(lapsed)) // the writer of ordinal 0 has crashed: its Lease lapses
	if err := pods.Delete(ctx, "canary-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		evs, _ := rt.cs.CoreV1().Events(rt.ns).List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
		ps, _ := pods.List(context.Background(), metav1.ListOptions{})
		for _, p := range ps.Items {
			t.Logf("pod %s %v deleting=%v", p.Name, p.Labels, p.DeletionTimestamp != nil)
		}
	})
	waitFor(t, 60*time.Second, "the controller's replacement of canary-0, from revision "+current, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "canary-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && p.DeletionTimestamp == nil && p.Labels[appsv1.StatefulSetRevisionLabel] == current, err
	})

	// Only a replacement: the template set to shadow with the partition above the replicas, and a
	// scale-up in the same update, make the controller create ordinal 2 from the armed current
	// revision, on a shard never elected. Refused at the update now, which judges what the set runs
	// from its current revision below its partition (the twenty-sixth red team); before, the
	// update passed on its shadow template and the guard refused the controller's Pod.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, e := range got.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "NOETL_EHDB_FENCING" {
				got.Spec.Template.Spec.Containers[0].Env[i].Value = "shadow"
			}
		}
		got.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](5)
		got.Spec.Replicas = ptr.To[int32](3)
		_, err = sets.Update(ctx, got, metav1.UpdateOptions{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "current revision "+current) || !strings.Contains(err.Error(), "(shard 2) does not exist") {
		t.Fatalf("the shadow template with the partition above the replicas, scaled to 3: %v; want it refused for ordinal 2 of revision %s", err, current)
	}
	if _, err := pods.Get(ctx, "canary-2", metav1.GetOptions{}); err == nil {
		t.Fatal("canary-2 exists: an armed Pod on a shard whose election never ran")
	}
}
