package charttest

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestAWorkloadThatRunsNoPodsIsJudgedWhenItStarts replays the third red team's open gap on the
// real API server with the controllers running: an armed Deployment at `replicas: 0` (or a
// suspended Job) was judged when it was created, and never again, so scaled up or resumed after
// its shard's Lease died it ran armed with no election. Shard 1 has no Lease here; shard 0 is live.
func TestAWorkloadThatRunsNoPodsIsJudgedWhenItStarts(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	deps, rss, jobs := rt.cs.AppsV1().Deployments(rt.ns), rt.cs.AppsV1().ReplicaSets(rt.ns), rt.cs.BatchV1().Jobs(rt.ns)
	rt.liveShard0(t)
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	deployment := func(name string, shard string) *appsv1.Deployment {
		s := rt.writer(name, wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", shard))
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Selector: s.Spec.Selector, Template: s.Spec.Template}}
	}
	scaleTo := func(name string, n int32, opts metav1.UpdateOptions) error {
		_, err := deps.UpdateScale(ctx, name, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rt.ns}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}, opts)
		return err
	}

	t.Run("a Deployment at replicas 0 on a dead shard, scaled up", func(t *testing.T) {
		// Nothing runs, so nothing is armed yet: created without a Lease (the old guard refused
		// this, and then admitted the scale-up).
		d, err := deps.Create(ctx, deployment("idle", "1"), metav1.CreateOptions{})
		admitted(t, "an armed Deployment at replicas 0, shard 1 dead", err)
		if err != nil {
			return
		}
		refused(t, "its scale subresource 0 → 1", scaleTo(d.Name, 1, dryRun), "ehdb-shard-00000001 (shard 1) does not exist")
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := deps.Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.Replicas = ptr.To[int32](1)
			_, err = deps.Update(ctx, got, dryRun)
			return err
		})
		refused(t, "its spec.replicas 0 → 1", err, "ehdb-shard-00000001 (shard 1) does not exist")

		// The Deployment controller made its ReplicaSet at 0; scaled up by hand under the
		// Deployment at 0, no owner accounts for it.
		var rs *appsv1.ReplicaSet
		waitFor(t, 60*time.Second, "the Deployment controller's ReplicaSet", func(ctx context.Context) (bool, error) {
			l, err := rss.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
			if err != nil || len(l.Items) == 0 {
				return false, nil
			}
			rs = &l.Items[0]
			return true, nil
		})
		_, err = rss.UpdateScale(ctx, rs.Name, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: rt.ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, dryRun)
		refused(t, "its ReplicaSet scaled 0 → 1 through replicasets/scale", err, "ehdb-shard-00000001 (shard 1) does not exist")
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := rss.Get(ctx, rs.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.Replicas = ptr.To[int32](1)
			_, err = rss.Update(ctx, got, dryRun)
			return err
		})
		refused(t, "its ReplicaSet's spec.replicas 0 → 1", err, "ehdb-shard-00000001 (shard 1) does not exist")
	})

	t.Run("a Deployment created at 0 while its Lease was live, scaled up after it died", func(t *testing.T) {
		// The red team's sequence: shard 2's Lease lives for 3 s; the Deployment is created
		// within them (the old guard admitted it on the live Lease), and scaled up after.
		died := rt.briefLease(t, 2)
		d, err := deps.Create(ctx, deployment("lapsed", "2"), metav1.CreateOptions{})
		admitted(t, "an armed Deployment at replicas 0, shard 2 live for 3 s", err)
		if err != nil {
			return
		}
		time.Sleep(time.Until(died))
		refused(t, "its scale subresource 0 → 1 after the Lease died", scaleTo(d.Name, 1, dryRun), "shard 2")
	})

	t.Run("a Deployment at replicas 0 on a live shard, scaled up for real", func(t *testing.T) {
		// The controllers' own path stays open: the Deployment is judged, then its controller
		// scales the ReplicaSet (whose owner the webhook's watch may still hold at 0: read again)
		// and the ReplicaSet controller makes the Pod.
		d, err := deps.Create(ctx, deployment("live", "0"), metav1.CreateOptions{})
		admitted(t, "an armed Deployment at replicas 0, shard 0 live", err)
		if err != nil {
			return
		}
		admitted(t, "its scale subresource 0 → 1", scaleTo(d.Name, 1, metav1.UpdateOptions{}))
		waitFor(t, 60*time.Second, "the Deployment's Pod", func(ctx context.Context) (bool, error) {
			l, err := rt.cs.CoreV1().Pods(rt.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
			return err == nil && len(l.Items) == 1, nil
		})
	})

	t.Run("a suspended Job on a dead shard, resumed", func(t *testing.T) {
		s := rt.writer("batch", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "1"))
		tpl := s.Spec.Template
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j, err := jobs.Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: tpl}}, metav1.CreateOptions{})
		admitted(t, "an armed suspended Job, shard 1 dead", err)
		if err != nil {
			return
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := jobs.Get(ctx, j.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.Suspend = ptr.To(false)
			_, err = jobs.Update(ctx, got, dryRun)
			return err
		})
		refused(t, "the Job resumed", err, "ehdb-shard-00000001 (shard 1) does not exist")
	})
}
