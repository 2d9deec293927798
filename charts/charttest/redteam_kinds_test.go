package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamKindsAndGroundTruth attacks issue 17's classes 4 and 3 through the real API server
// with the chart installed and the webhook binary serving: paths to a running armed container
// the guard did not review, and template values the kubelet or a controller overrides.
func TestRedTeamKindsAndGroundTruth(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)

	t.Run("an armed ReplicationController is reviewed", func(t *testing.T) {
		s := rt.writer("rc", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7")) // no Lease for shard 7
		tpl := s.Spec.Template
		rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "rc"},
			Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To[int32](2), Selector: tpl.Labels, Template: &tpl}}
		_, err := cs.CoreV1().ReplicationControllers(rt.ns).Create(ctx, rc, metav1.CreateOptions{})
		refused(t, "armed ReplicationController, no Lease", err, "ReplicationController "+rt.ns+"/rc", "ehdb-shard-00000007 (shard 7) does not exist")
	})

	t.Run("armed ephemeral containers are reviewed", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug-me-0"}, Spec: corev1.PodSpec{
			ServiceAccountName: wt.WriterSA,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}}}}
		p, err := cs.CoreV1().Pods(rt.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}}}}
		_, err = cs.CoreV1().Pods(rt.ns).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
		refused(t, "an armed ephemeral container without the election", err, "ephemeral container \"debug\"", "election is not enabled")
	})

	t.Run("arming that adds shards faces the order check", func(t *testing.T) {
		sts := cs.AppsV1().StatefulSets(rt.ns)
		if _, err := sts.Create(ctx, rt.writer("grow", wt.Replicas(0)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("an armed StatefulSet of 0 replicas arms no shard: %v", err)
		}
		var err error
		waitFor(t, 30*time.Second, "replicas 0 -> 2 judged", func(ctx context.Context) (bool, error) {
			s, err2 := sts.Get(ctx, "grow", metav1.GetOptions{})
			if err2 != nil {
				return false, err2
			}
			s.Spec.Replicas = ptr.To[int32](2)
			_, err = sts.Update(ctx, s, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			// The StatefulSet controller writes its status meanwhile: a conflict is tried again.
			return err != nil && !apierrors.IsConflict(err), nil
		})
		refused(t, "replicas 0 -> 2 with shard 1 not live", err, "ehdb-shard-00000001 (shard 1) does not exist")

		if _, err := sts.Create(ctx, rt.writer("scaled"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the armed writer of shard 0: %v", err)
		}
		waitFor(t, 30*time.Second, "the scale-up judged", func(ctx context.Context) (bool, error) {
			_, err = sts.UpdateScale(ctx, "scaled", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: rt.ns},
				Spec: autoscalingv1.ScaleSpec{Replicas: 3}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && !strings.Contains(err.Error(), "could not verify"), nil
		})
		refused(t, "scale subresource 1 -> 3 with shards 1 and 2 not live", err, "ehdb-shard-00000001 (shard 1) does not exist", "ehdb-shard-00000002 (shard 2) does not exist")
		_, err = sts.UpdateScale(ctx, "scaled", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: rt.ns},
			Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		admitted(t, "scaling down", err)
	})

	t.Run("an armed bare Pod whose own name gives no shard is refused", func(t *testing.T) {
		s := rt.writer("bare")
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "writer-debug"}, Spec: s.Spec.Template.Spec}
		_, err := cs.CoreV1().Pods(rt.ns).Create(ctx, p, dryRunCreate)
		refused(t, "armed bare Pod writer-debug", err, "the pod hostname \"writer-debug\" gives the election no shard")
		p.Name = "writer-0"
		_, err = cs.CoreV1().Pods(rt.ns).Create(ctx, p, dryRunCreate)
		admitted(t, "armed bare Pod writer-0, shard 0 live", err)
	})

	t.Run("a host-network StatefulSet is not judged on its pod names", func(t *testing.T) {
		_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("w", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.HostNetwork = true }), dryRunCreate)
		refused(t, "host-network writer, shard from w-0", err, "host network")
	})

	t.Run("an Indexed Job's completion index is the controller's", func(t *testing.T) {
		s := rt.writer("idx")
		tpl := s.Spec.Template
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		tpl.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": "0"}
		c := &tpl.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}})
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "idx"}, Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion), Completions: ptr.To[int32](1), Template: tpl}}
		_, err := cs.BatchV1().Jobs(rt.ns).Create(ctx, j, dryRunCreate)
		refused(t, "Indexed Job with a template completion index", err, "set by the Job controller")
	})
}
