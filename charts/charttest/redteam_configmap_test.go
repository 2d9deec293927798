package charttest

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamConfigMapChanges attacks issue 17's class 1 through the real API server: ConfigMap
// edits that arm a reader unseen (a value assembled from two keys, which a matchCondition on
// "enforce" never sent to the webhook) or turn an armed reader's election off (an edit, a removed
// key, a delete), and a GitOps order (class 5: the workload before its ConfigMap).
func TestRedTeamConfigMapChanges(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	cms, sts := cs.CoreV1().ConfigMaps(rt.ns), cs.AppsV1().StatefulSets(rt.ns)
	rt.liveLease(t, 0)
	dryUpdate := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	readsFlags := func(name string) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
		}
	}

	t.Run("a fencing value assembled from two keys", func(t *testing.T) {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parts"}, Data: map[string]string{"P1": "shadow"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Shard 9 has no Lease: unarmed now (shadow), so admitted.
		if _, err := sts.Create(ctx, rt.writer("assembled", readsFlags("parts"), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "9"), wt.SetEnv("NOETL_EHDB_FENCING", "$(P1)$(P2)")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var err error
		waitFor(t, 30*time.Second, "the edit judged", func(ctx context.Context) (bool, error) {
			_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parts"}, Data: map[string]string{"P1": "enf", "P2": "orce"}}, dryUpdate)
			return err != nil, nil
		})
		refused(t, "P1=shadow -> P1=enf, P2=orce", err, "through ConfigMap "+rt.ns+"/parts", "ehdb-shard-00000009 (shard 9) does not exist")
	})

	t.Run("turning an armed reader's election off", func(t *testing.T) {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "election"}, Data: map[string]string{"NOETL_EHDB_ELECTION": "true"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Armed literally, the election from the ConfigMap, shard 0 live: admitted.
		s := rt.writer("armed-reader", readsFlags("election"), func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_ELECTION" {
					c.Env = append(c.Env[:i], c.Env[i+1:]...)
					break
				}
			}
		})
		var err error
		waitFor(t, 30*time.Second, "the armed reader admitted", func(ctx context.Context) (bool, error) {
			_, err = sts.Create(ctx, s, metav1.CreateOptions{})
			return err == nil, nil
		})
		waitFor(t, 30*time.Second, "the edit judged", func(ctx context.Context) (bool, error) {
			_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "election"}, Data: map[string]string{"NOETL_EHDB_ELECTION": "false"}}, dryUpdate)
			return err != nil, nil
		})
		refused(t, "NOETL_EHDB_ELECTION true -> false under an armed reader", err, "election is not enabled", "enforce → shadow")
		_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "election"}, Data: map[string]string{}}, dryUpdate)
		refused(t, "the election key removed", err, "election is not enabled", "enforce → shadow")
		err = cms.Delete(ctx, "election", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, "the ConfigMap deleted", err, "election is not enabled", "enforce → shadow")
		_, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "election"}, Data: map[string]string{"NOETL_EHDB_ELECTION": "true", "LOG_LEVEL": "debug"}}, dryUpdate)
		admitted(t, "an unrelated edit", err)
	})

	t.Run("a workload applied before its ConfigMap", func(t *testing.T) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gitops"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gitops"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "gitops"}}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "gitops-config"}}}}}}}}}}
		_, err := cs.AppsV1().Deployments(rt.ns).Create(ctx, d, metav1.CreateOptions{})
		admitted(t, "an unrelated Deployment envFrom a ConfigMap that does not exist yet", err)
		// The ConfigMap it waits for, arming it: reviewed as the arming it is.
		waitFor(t, 30*time.Second, "the ConfigMap create judged", func(ctx context.Context) (bool, error) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gitops-config"}, Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}, dryRunCreate)
			return err != nil, nil
		})
		refused(t, "the missing ConfigMap created with enforce", err, "Deployment "+rt.ns+"/gitops", "election is not enabled")
	})
}
