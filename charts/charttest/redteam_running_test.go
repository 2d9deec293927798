package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamDisarmUnderARunningProcess is the disarm class through the real API server: a writer
// armed by its ConfigMap runs; the ConfigMap is set to shadow (admitted: nothing restarts, and the
// next start reads shadow); then the writer's RoleBinding is deleted. The running process read
// enforce at its start and keeps it, so that delete fails its shard: refused, with the restart as
// the way out. The kubelet's report of the container's start is written as the kubelet writes it
// (there is no kubelet here); the ConfigMap's change time is the API server's own. Before the rule,
// the delete was admitted.
func TestRedTeamDisarmUnderARunningProcess(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	role := rt.name + "-shard-election"

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-flags"}, Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}
	if _, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := rt.writer("w", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")).Spec.Template.Spec
	c := &spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == "NOETL_EHDB_FENCING" {
			c.Env = append(c.Env[:i], c.Env[i+1:]...)
			break
		}
	}
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}
	spec.OS = &corev1.PodOS{Name: corev1.Linux}
	spec.NodeName = "node-1" // bound, as the scheduler leaves it
	p, err := cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the writer armed by its ConfigMap, shard 0 live: %v", err)
	}
	reportStart := func(at time.Time) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := cs.CoreV1().Pods(rt.ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Status.Phase = corev1.PodRunning
			got.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
			_, err = cs.CoreV1().Pods(rt.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	reportStart(time.Now().Add(-time.Hour))

	// The eighteenth red team's undated changes under the running process: a removed key stamps
	// no managedFields time. Refused (before the rule: admitted, and the delete below with it).
	cms := cs.CoreV1().ConfigMaps(rt.ns)
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cms.Patch(ctx, cm.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/NOETL_EHDB_FENCING"}]`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "refusing to remove keys") {
		t.Errorf("removing the key the running writer's fencing came from: %v; want it refused", err)
	}

	// Disarmed for its next start: admitted (the order is kept, nothing restarts).
	cm.Data["NOETL_EHDB_FENCING"] = "shadow"
	shadowed, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the writer's ConfigMap set to shadow: %v", err)
	}
	changed := shadowed.CreationTimestamp.Time
	for _, m := range shadowed.ManagedFields {
		if m.Time != nil && m.Time.After(changed) {
			changed = m.Time.Time
		}
	}
	deleteRB := func(ctx context.Context) error { return cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, role, dryDelete) }
	// The guard's watch sees the Pod's status within moments: the answer once it has.
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, deleteRB)
	disarmRefused(t, "DELETE RoleBinding "+role+" under the process that read enforce", err,
		"Pod "+rt.ns+"/w-0", `ConfigMap "writer-flags" changed at`, "restart it")

	// The container restarted more than the guard's margin (a minute) after the change: what it
	// read is what the guard reads, shadow, and the RoleBinding is its to lose. (The start is
	// reported a little ahead of this clock, as a kubelet would report it a minute from now; a
	// start further ahead than the margin dates nothing.)
	reportStart(changed.Add(62 * time.Second))
	err = answerOnce(10*time.Second, func(err error) bool { return err == nil }, deleteRB)
	admitted(t, "DELETE RoleBinding "+role+" once the writer restarted onto shadow", err)
}

// answerOnce asks until the answer is settled (or within has passed) and returns the last answer:
// for a request whose answer follows from what the guard's watch has seen a moment later.
func answerOnce(within time.Duration, settled func(error) bool, ask func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := ask(ctx)
		cancel()
		if settled(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
