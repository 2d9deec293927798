package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamRound6 replays, on the real API server with the controllers running, what the sixth
// red team (issue 17) broke: Pods and owners that a change or an exemption was judged through
// without their owner's judgement covering them.
func TestRedTeamRound6(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)

	t.Run("a ConfigMap edit under the Pod of a StatefulSet in deletion", func(t *testing.T) {
		cms, sets := cs.CoreV1().ConfigMaps(rt.ns), cs.AppsV1().StatefulSets(rt.ns)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elect6"}, Data: map[string]string{"on": "true"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w := rt.writer("held6", func(s *appsv1.StatefulSet) {
			s.Finalizers = []string{"example.com/hold"}
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_ELECTION" {
					c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "elect6"}, Key: "on"}}}
				}
			}
		})
		if _, err := sets.Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the StatefulSet controller's Pod held6-0", func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(rt.ns).Get(ctx, "held6-0", metav1.GetOptions{})
			return err == nil, nil
		})
		// In the background: the garbage collector deletes the Pod only once the set is gone, so it
		// keeps running (and naming the set) while the set is held in deletion.
		if err := sets.Delete(ctx, "held6", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		var err error
		waitFor(t, 30*time.Second, "the set in deletion in the webhook's watch", func(ctx context.Context) (bool, error) {
			cm, gerr := cms.Get(ctx, "elect6", metav1.GetOptions{})
			if gerr != nil {
				return false, gerr
			}
			cm.Data["on"] = "false"
			_, err = cms.Update(ctx, cm, dryUpdate)
			return err != nil, nil
		})
		if !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "Pod "+rt.ns+"/held6-0") {
			t.Errorf("election turned off under the Pod of a set in deletion: %v; want the guard to refuse it, naming the Pod", err)
		}
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := sets.Get(ctx, "held6", metav1.GetOptions{})
			if err != nil {
				return nil
			}
			s.Finalizers = nil
			_, err = sets.Update(ctx, s, metav1.UpdateOptions{})
			return err
		})
	})

	t.Run("a Pod made in the name of a finished Job", func(t *testing.T) {
		jobs := cs.BatchV1().Jobs(rt.ns)
		tpl := rt.writer("done6", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "62")).Spec.Template // no Lease for 62
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		rt.briefLease(t, 62)
		var j *batchv1.Job
		waitFor(t, 30*time.Second, "the armed Job admitted while shard 62 is live", func(ctx context.Context) (bool, error) {
			var err error
			j, err = jobs.Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "done6"}, Spec: batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](1), Template: tpl}}, metav1.CreateOptions{})
			return err == nil, nil
		})
		waitFor(t, 60*time.Second, "the Job failed (its deadline)", func(ctx context.Context) (bool, error) {
			got, err := jobs.Get(ctx, "done6", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done6-forged", Labels: j.Spec.Template.Labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}}, Spec: j.Spec.Template.Spec}
		var err error
		waitFor(t, 30*time.Second, "the finished Job in the webhook's watch", func(ctx context.Context) (bool, error) {
			_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, p, dryRunCreate)
			return err != nil, nil
		})
		refused(t, "a Pod in the name of the finished Job", err, "shard 62")
	})

	t.Run("a ReplicaSet made in the name of a paused Deployment", func(t *testing.T) {
		s := rt.writer("paused6", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "63"))
		died := rt.briefLease(t, 63)
		d, err := cs.AppsV1().Deployments(rt.ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "paused6"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Paused: true, Selector: s.Spec.Selector, Template: s.Spec.Template}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(died))
		tpl := d.Spec.Template.DeepCopy()
		tpl.Labels["pod-template-hash"] = "h"
		_, err = cs.AppsV1().ReplicaSets(rt.ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "paused6-h", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: tpl.Labels}, Template: *tpl}}, dryRunCreate)
		refused(t, "a ReplicaSet made by hand under the paused Deployment", err, "shard 63")
	})
}
