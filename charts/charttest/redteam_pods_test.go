package charttest

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

const saTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// TestRedTeamWhatRuns attacks "judge what will actually run" through the real API server, with
// the real ServiceAccount admission plugin in front of the webhook and the controllers running:
// an armed Pod no judged owner accounts for, a container without its ServiceAccount's token at
// the path client-go reads, and a container whose election dials another API server.
func TestRedTeamWhatRuns(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	podOf := func(name string, opts ...func(*appsv1.StatefulSet)) *corev1.Pod {
		s := rt.writer(name, opts...)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bare-" + name}}, Spec: s.Spec.Template.Spec}
	}
	withVolume := func(v corev1.Volume, mountPath string) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Volumes = append(s.Spec.Template.Spec.Volumes, v)
			c := &s.Spec.Template.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: mountPath})
		}
	}
	scratch := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}

	t.Run("bare armed Pods face the order check", func(t *testing.T) {
		_, err := cs.CoreV1().Pods(rt.ns).Create(ctx, podOf("writer-7"), dryRunCreate)
		refused(t, "armed bare Pod writer-7, no Lease for shard 7", err, "Pod "+rt.ns+"/writer-7", "ehdb-shard-00000007 (shard 7) does not exist")

		sts, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("unarmed", wt.SetEnv("NOETL_EHDB_FENCING", "shadow")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		forged := podOf("unarmed-7")
		forged.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "unarmed", UID: sts.UID, Controller: ptr.To(true)}}
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, forged, dryRunCreate)
		refused(t, "an armed Pod claiming a real, unarmed StatefulSet", err, "ehdb-shard-00000007 (shard 7) does not exist")
		forged.OwnerReferences[0].UID = types.UID("00000000-0000-0000-0000-00000000dead")
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, forged, dryRunCreate)
		refused(t, "an armed Pod claiming a StatefulSet uid that does not exist", err, "ehdb-shard-00000007 (shard 7) does not exist")
	})

	t.Run("the Pods an armed StatefulSet's controller makes are admitted as they run", func(t *testing.T) {
		// Shard 1 is live too: pod real-1 is created by the controller, through the
		// ServiceAccount plugin, and judged with the mounts the plugin gave it.
		rt.liveLease(t, 1)
		if _, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("real", wt.Replicas(2)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the armed writer of shards 0 and 1: %v", err)
		}
		waitFor(t, 60*time.Second, "the StatefulSet controller's Pods real-0 and real-1", func(ctx context.Context) (bool, error) {
			ps, err := cs.CoreV1().Pods(rt.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=real"})
			return err == nil && len(ps.Items) == 2, nil
		})
		// An Indexed Job's Pod carries the JOB_COMPLETION_INDEX its controller adds: still its Job's,
		// so exempt from the order check. Shard 5's Lease is live (3 s) when the Job is armed and
		// its controller makes the Pod; once the Lease has lapsed the Pod is deleted, and only the
		// exemption admits the replacement the controller makes (a crashed writer's).
		rt.briefLease(t, 5)
		tpl := rt.writer("idx", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "5")).Spec.Template
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "idx"}, Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion), Completions: ptr.To[int32](1), Template: tpl}}
		waitFor(t, 30*time.Second, "the armed Indexed Job of shard 5 admitted while its Lease is live", func(ctx context.Context) (bool, error) {
			_, err := cs.BatchV1().Jobs(rt.ns).Create(ctx, j, metav1.CreateOptions{})
			return err == nil, nil
		})
		var first *corev1.Pod
		waitFor(t, 60*time.Second, "the Job controller's Pod of index 0", func(ctx context.Context) (bool, error) {
			ps, err := cs.CoreV1().Pods(rt.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=idx"})
			if err != nil || len(ps.Items) != 1 {
				return false, nil
			}
			first = &ps.Items[0]
			return true, nil
		})
		waitFor(t, 30*time.Second, "shard 5's Lease lapsed", func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(rt.ns).Create(ctx, podOf("lapsed-5"), dryRunCreate)
			return err != nil, nil
		})
		if err := cs.CoreV1().Pods(rt.ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the Job controller's replacement Pod of index 0", func(ctx context.Context) (bool, error) {
			ps, err := cs.CoreV1().Pods(rt.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=idx"})
			return err == nil && slices.ContainsFunc(ps.Items, func(p corev1.Pod) bool { return p.UID != first.UID && p.DeletionTimestamp == nil }), nil
		})
	})

	t.Run("the token where client-go reads it", func(t *testing.T) {
		_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("tok", withVolume(scratch, saTokenDir)), dryRunCreate)
		refused(t, "an emptyDir over the token directory", err, "cannot authenticate to the API server", `emptyDir volume "scratch"`)
		_, err = cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("tok", withVolume(scratch, saTokenDir+"/")), dryRunCreate)
		refused(t, "the same with a trailing slash", err, "two mounts")
		vault := corev1.Volume{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}}}}}
		_, err = cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("tok", withVolume(vault, saTokenDir), func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(false)
		}), dryRunCreate)
		refused(t, "a token for the audience vault at the token path", err, `audience "vault"`)

		// A Pod: the plugin sees the mount at the path and adds none, so the Pod has no token.
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, podOf("writer-0", withVolume(scratch, saTokenDir)), dryRunCreate)
		refused(t, "a Pod with an emptyDir over the token directory", err, `emptyDir volume "scratch"`)
		unarmed := podOf("plain-0", wt.SetEnv("NOETL_EHDB_FENCING", "off"), withVolume(scratch, saTokenDir))
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, unarmed, dryRunCreate)
		admitted(t, "an unarmed Pod with an emptyDir over the token directory", err)
	})

	t.Run("the API server the election dials", func(t *testing.T) {
		_, err := cs.CoreV1().Pods(rt.ns).Create(ctx, podOf("writer-0", wt.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.99")), dryRunCreate)
		refused(t, "an armed Pod dialling 10.0.0.99", err, `KUBERNETES_SERVICE_HOST="10.0.0.99"`)
		_, err = cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("far", wt.SetEnv("KUBERNETES_SERVICE_PORT", "6443")), dryRunCreate)
		refused(t, "an armed StatefulSet dialling port 6443", err, "KUBERNETES_SERVICE_PORT")
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, podOf("writer-0"), dryRunCreate)
		admitted(t, "the armed writer Pod of shard 0 as the plugin leaves it", err)
	})
}
