package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamRound5 replays, on the real API server with the controllers running, what the fifth
// red team (issue 17) broke: objects in deletion. A finalizer holds each of them there.
func TestRedTeamRound5(t *testing.T) {
	rt := newRedTeamAdmitting(t, "late-sa")
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	const hold = "example.com/hold"
	// release removes the finalizers of the object get returns, with update.
	release := func(get func() (metav1.Object, error), update func(metav1.Object) error) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			o, err := get()
			if err != nil {
				return err
			}
			o.SetFinalizers(nil)
			return update(o)
		})
	}

	t.Run("a RoleBinding in deletion that an armed writer came to use", func(t *testing.T) {
		bindLeases(t, rt, "late", "late-sa")
		rbs := cs.RbacV1().RoleBindings(rt.ns)
		rb, err := rbs.Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rb.Finalizers = []string{hold}
		if _, err := rbs.Update(ctx, rb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		admitted(t, "deleting the RoleBinding nothing armed uses (held by a finalizer)", rbs.Delete(ctx, "late", metav1.DeleteOptions{}))
		// The binding still grants while in deletion: the writer is admitted on it.
		waitFor(t, 30*time.Second, "the writer armed as late-sa", func(ctx context.Context) (bool, error) {
			_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("late", wt.ServiceAccount("late-sa")), metav1.CreateOptions{})
			return err == nil, nil
		})
		var err2 error
		waitFor(t, 30*time.Second, "the armed writer in the guard's watch", func(ctx context.Context) (bool, error) {
			err2 = release(func() (metav1.Object, error) { return rbs.Get(ctx, "late", metav1.GetOptions{}) },
				func(o metav1.Object) error { _, err := rbs.Update(ctx, o.(*rbacv1.RoleBinding), dryUpdate); return err })
			return err2 != nil, nil
		})
		disarmRefused(t, "the RoleBinding's last finalizer removed", err2, "StatefulSet "+rt.ns+"/late")
	})

	t.Run("a ConfigMap in deletion that an armed writer's election reads", func(t *testing.T) {
		cms := cs.CoreV1().ConfigMaps(rt.ns)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elect", Finalizers: []string{hold}}, Data: map[string]string{"on": "true"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		admitted(t, "deleting the ConfigMap nothing reads (held by a finalizer)", cms.Delete(ctx, "elect", metav1.DeleteOptions{}))
		w := rt.writer("elect", func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_ELECTION" {
					c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "elect"}, Key: "on", Optional: ptr.To(true)}}}
				}
			}
		})
		waitFor(t, 30*time.Second, "the writer whose election reads elect", func(ctx context.Context) (bool, error) {
			_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, w, metav1.CreateOptions{})
			return err == nil, nil
		})
		var err error
		waitFor(t, 30*time.Second, "the reader in the guard's watch", func(ctx context.Context) (bool, error) {
			err = release(func() (metav1.Object, error) { return cms.Get(ctx, "elect", metav1.GetOptions{}) },
				func(o metav1.Object) error { _, err := cms.Update(ctx, o.(*corev1.ConfigMap), dryUpdate); return err })
			return err != nil, nil
		})
		if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "election is not enabled") {
			t.Errorf("the ConfigMap's last finalizer removed: %v; want the guard's refusal (it turns the armed writer's election off)", err)
		}
	})

	t.Run("an owner armed while in deletion exempts nothing", func(t *testing.T) {
		deps := cs.AppsV1().Deployments(rt.ns)
		s := rt.writer("held", wt.SetEnv("NOETL_EHDB_FENCING", "shadow"), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "61")) // no Lease for 61
		d, err := deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{hold}}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Selector: s.Spec.Selector, Template: s.Spec.Template}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := deps.Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := deps.Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := &got.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_FENCING" {
					c.Env[i].Value = "enforce"
				}
			}
			got.Spec.Replicas = ptr.To[int32](1)
			_, err = deps.Update(ctx, got, metav1.UpdateOptions{})
			return err
		})
		admitted(t, "arming the Deployment in deletion (edits of an object in deletion are not judged)", err)
		got, err := deps.Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tpl := got.Spec.Template.DeepCopy()
		tpl.Labels["pod-template-hash"] = "x"
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "held-x", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: got.Name, UID: got.UID, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: tpl.Labels}, Template: *tpl}}
		_, err = cs.AppsV1().ReplicaSets(rt.ns).Create(ctx, rs, dryRunCreate)
		refused(t, "a ReplicaSet made by hand under the armed Deployment in deletion", err, "ehdb-shard-0000003d (shard 61) does not exist")
		_ = release(func() (metav1.Object, error) { return deps.Get(ctx, d.Name, metav1.GetOptions{}) },
			func(o metav1.Object) error {
				_, err := deps.Update(ctx, o.(*appsv1.Deployment), metav1.UpdateOptions{})
				return err
			})
	})

	t.Run("a Deployment resumed after its Lease died", func(t *testing.T) {
		deps := cs.AppsV1().Deployments(rt.ns)
		// Shards 7 and 9 live for 3 s each: one Deployment created paused, one rolled out and
		// then paused; both resumed after the Leases died.
		rt.briefLease(t, 7)
		died := rt.briefLease(t, 9)
		mk := func(name, shard string, paused bool) *appsv1.Deployment {
			s := rt.writer(name, wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", shard))
			d, err := deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1), Paused: paused, Selector: s.Spec.Selector, Template: s.Spec.Template}}, metav1.CreateOptions{})
			admitted(t, "Deployment "+name+" while its Lease is live", err)
			return d
		}
		created, rolled := mk("paused", "7", true), mk("rolled", "9", false)
		if created == nil || rolled == nil {
			return
		}
		waitFor(t, 60*time.Second, "rolled's ReplicaSet with a replica", func(ctx context.Context) (bool, error) {
			d, err := deps.Get(ctx, "rolled", metav1.GetOptions{})
			return err == nil && d.Status.Replicas == 1, nil
		})
		setPaused := func(name string, paused bool, opts metav1.UpdateOptions) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				d, err := deps.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				d.Spec.Paused = paused
				_, err = deps.Update(ctx, d, opts)
				return err
			})
		}
		admitted(t, "rolled paused", setPaused("rolled", true, metav1.UpdateOptions{}))
		time.Sleep(time.Until(died))
		refused(t, "the Deployment created paused, resumed after its Lease died", setPaused("paused", false, dryUpdate), "ehdb-shard-00000007 (shard 7)")
		// Its pods already run armed on that shard: resuming it is no arming.
		waitFor(t, 30*time.Second, "the resume of rolled admitted (its ReplicaSet in the webhook's watch)", func(ctx context.Context) (bool, error) {
			return setPaused("rolled", false, dryUpdate) == nil, nil
		})
	})
}
