package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

const shard0, shard1 = "noetl-cmdbus-writer-0", "noetl-cmdbus-writer-1"

func env(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// wantDenied asserts that err is an admission denial whose message mentions every fragment.
func wantDenied(t *testing.T, step string, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: admitted, want refused", step)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("%s: the denial does not mention %q:\n%v", step, f, err)
		}
	}
	t.Logf("%s: refused as expected:\n  %v", step, err)
}

// setEnv sets one variable of the writer container, as an operator's `kubectl set env` would,
// retrying only on a write conflict (the controller updates the object's status meanwhile).
func setEnv(ctx context.Context, s *system, key, value string, dryRun bool) (*appsv1.StatefulSet, error) {
	sts := s.c.Clientset().AppsV1().StatefulSets(s.ns)
	var out *appsv1.StatefulSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := sts.Get(ctx, "noetl-cmdbus-writer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		webhooktest.SetEnv(key, value)(cur)
		opts := metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		out, err = sts.Update(ctx, cur, opts)
		return err
	})
	return out, err
}

// Scenario 1: the non-negotiable order, as an operator lives it.
func TestScenario1OperatorOrder(t *testing.T) {
	s := newSystem(t, nil)
	s.startWebhook()
	ctx := context.Background()
	sts := s.c.Clientset().AppsV1().StatefulSets(s.ns)

	_, err := sts.Create(ctx, referenceWriter(s.ns, "", 1, env("NOETL_EHDB_FENCING", "enforce")), metav1.CreateOptions{})
	wantDenied(t, "default ServiceAccount + enforce", err, "NOETL_EHDB_FENCING", "NOETL_EHDB_ELECTION", "serviceAccountName")

	_, err = sts.Create(ctx, referenceWriter(s.ns, writerSA, 1, env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "false")), metav1.CreateOptions{})
	wantDenied(t, "chart ServiceAccount, election off + enforce", err, "NOETL_EHDB_ELECTION")

	if _, err := sts.Create(ctx, referenceWriter(s.ns, writerSA, 1, env("NOETL_EHDB_FENCING", "off", "NOETL_EHDB_ELECTION", "true")), metav1.CreateOptions{}); err != nil {
		t.Fatalf("election on, enforce off: refused: %v", err)
	}

	_, err = setEnv(ctx, s, "NOETL_EHDB_FENCING", "enforce", false)
	wantDenied(t, "enforce before the Lease is live", err, "ehdb-shard-00000000")
	_, err = setEnv(ctx, s, "NOETL_EHDB_FENCING", "enforce", true)
	wantDenied(t, "the same, as a server-side dry run", err, "ehdb-shard-00000000")

	w := s.writer(shard0)
	_, epoch := waitValid(t, 20*time.Second, w)
	if epoch < 1 {
		t.Fatalf("epoch %d, want ≥ 1", epoch)
	}
	t.Logf("the scrape shows token_valid=1, epoch=%d", epoch)
	if _, err := setEnv(ctx, s, "NOETL_EHDB_FENCING", "enforce", false); err != nil {
		t.Fatalf("enforce once minting is live: refused: %v", err)
	}
	s.checkSafety(shard0)
}

// Scenario 2: failover on a crash, on a graceful stop, and a restart under the same name.
func TestScenario2Failover(t *testing.T) {
	s := newSystem(t, nil)
	a, b := s.writer(shard0), s.writer(shard0)
	holder, e1 := waitValid(t, 20*time.Second, a, b)
	standby := map[*writer]*writer{a: b, b: a}[holder]

	killed := time.Now()
	holder.Kill()
	next, e2 := waitValid(t, lease+renew+5*time.Second, standby)
	took := time.Since(killed)
	if e2 != e1+1 {
		t.Fatalf("after SIGKILL: epoch %d, want %d", e2, e1+1)
	}
	if took > lease+renew {
		t.Errorf("crash failover took %s, want within lease + renew = %s", took, lease+renew)
	}
	t.Logf("SIGKILL: standby acquired epoch %d after %s", e2, took.Round(time.Millisecond))

	c := s.writer(shard0)
	stopped := time.Now()
	next.stop()
	_, e3 := waitValid(t, renew+5*time.Second, c)
	took = time.Since(stopped)
	if e3 != e2+1 {
		t.Fatalf("after SIGTERM: epoch %d, want %d", e3, e2+1)
	}
	if took > renew+time.Second {
		t.Errorf("graceful failover took %s, want within renew + 1s = %s", took, renew+time.Second)
	}
	t.Logf("SIGTERM: successor acquired epoch %d after %s", e3, took.Round(time.Millisecond))

	// A restarted writer under the same pod name must not inherit the epoch.
	c.Kill()
	d := s.writer(shard0)
	_, e4 := waitValid(t, lease+renew+5*time.Second, d)
	if e4 != e3+1 {
		t.Fatalf("restarted writer with the same hostname: epoch %d, want a new epoch %d", e4, e3+1)
	}
	s.checkSafety(shard0)
}

// Scenario 3: a paused holder (GC pause, VM freeze) is taken over, and on waking its very first
// scrape already says token_valid=0, before it has made any API call.
func TestScenario3Pause(t *testing.T) {
	s := newSystem(t, nil)
	a, b := s.writer(shard0), s.writer(shard0)
	holder, e1 := waitValid(t, 20*time.Second, a, b)
	standby := map[*writer]*writer{a: b, b: a}[holder]

	holder.Signal(syscall.SIGSTOP)
	time.Sleep(2 * lease)
	_, e2 := waitValid(t, 5*time.Second, standby)
	if e2 != e1+1 {
		t.Fatalf("standby epoch %d, want %d", e2, e1+1)
	}
	holder.Signal(syscall.SIGCONT)
	tok, err := holder.Token()
	if err != nil {
		t.Fatal(err)
	}
	if tok.Valid {
		t.Fatalf("the paused writer's first scrape after SIGCONT says token_valid=1 (epoch %d)", tok.Epoch)
	}
	eventually(t, lease+5*time.Second, "the woken writer reports lost", func() error {
		m, err := holder.Scrape()
		if err != nil {
			return err
		}
		if m.Get(`ehdb_election_outcomes_total{outcome="lost"}`) < 1 || m.Get("ehdb_election_holds_lease") != 0 {
			return fmt.Errorf("lost=%v holds_lease=%v", m.Get(`ehdb_election_outcomes_total{outcome="lost"}`), m.Get("ehdb_election_holds_lease"))
		}
		return nil
	})
	if _, e := waitValid(t, 2*time.Second, standby); e != e2 {
		t.Fatalf("the standby's epoch moved from %d to %d", e2, e)
	}
	s.checkSafety(shard0)
}

// Scenario 4: the API server goes away for longer than the lease, then comes back.
func TestScenario4APIServerGone(t *testing.T) {
	s := newSystem(t, nil)
	if !s.c.Local() {
		t.Skip("stopping the API server needs the local control plane")
	}
	w0, w1 := s.writer(shard0), s.writer(shard1)
	_, e0 := waitValid(t, 20*time.Second, w0)
	_, e1 := waitValid(t, 20*time.Second, w1)

	if err := s.c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = s.c.StartAPIServer(context.Background())
		}
	})
	for _, w := range []*writer{w0, w1} {
		eventually(t, lease+2*time.Second, w.Name+" drops token_valid", func() error {
			m, err := w.Scrape()
			if err != nil {
				return err
			}
			if m.Get("ehdb_election_token_valid") != 0 {
				return fmt.Errorf("token_valid still 1, last contact %vs ago", m.Get("ehdb_election_last_contact_age_seconds"))
			}
			if m.Get("ehdb_election_last_contact_age_seconds") < leaseSecs {
				return fmt.Errorf("token_valid 0 but last contact only %vs ago", m.Get("ehdb_election_last_contact_age_seconds"))
			}
			if m.Get(`ehdb_election_errors_total{reason="unreachable"}`) < 1 {
				return fmt.Errorf("no unreachable errors counted yet")
			}
			return nil
		})
	}
	time.Sleep(lease) // longer than the lease, in all
	for _, w := range []*writer{w0, w1} {
		if w.Exited() {
			t.Fatalf("writer %s exited while the API server was down", w.Name)
		}
	}
	if err := s.c.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if _, e := waitValid(t, 30*time.Second, w0); e <= e0 {
		t.Fatalf("shard 0 re-acquired with epoch %d, want above %d", e, e0)
	}
	if _, e := waitValid(t, 30*time.Second, w1); e <= e1 {
		t.Fatalf("shard 1 re-acquired with epoch %d, want above %d", e, e1)
	}
	s.checkSafety(shard0)
	s.checkSafety(shard1)
}

// Scenario 5: the RoleBinding is pulled at runtime, then restored.
func TestScenario5RBACPulled(t *testing.T) {
	s := newSystem(t, nil)
	// The webhook serves: its RBAC entry fails closed, and judges the pull admissible (no armed
	// writer runs as the account: these writers are host processes in shadow).
	s.startWebhook()
	ctx := context.Background()
	w := s.writer(shard0)
	_, e1 := waitValid(t, 20*time.Second, w)

	rbs := s.c.Clientset().RbacV1().RoleBindings(s.ns)
	binding := s.writerBinding()
	if err := rbs.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, lease+5*time.Second, "forbidden errors climb and the token drops", func() error {
		m, err := w.Scrape()
		if err != nil {
			return err
		}
		if m.Get(`ehdb_election_errors_total{reason="forbidden"}`) < 2 || m.Get("ehdb_election_token_valid") != 0 {
			return fmt.Errorf("forbidden=%v token_valid=%v", m.Get(`ehdb_election_errors_total{reason="forbidden"}`), m.Get("ehdb_election_token_valid"))
		}
		return nil
	})
	if w.Exited() {
		t.Fatal("the writer exited on 403 (it must degrade, not crash-loop)")
	}
	binding.ResourceVersion, binding.UID = "", ""
	if _, err := rbs.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, e := waitValid(t, 20*time.Second, w); e <= e1 {
		t.Fatalf("after the binding is restored: epoch %d, want above %d", e, e1)
	}
	s.checkSafety(shard0)
}

func (s *system) writerBinding() *rbacv1.RoleBinding {
	list, err := s.c.Clientset().RbacV1().RoleBindings(s.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for i, rb := range list.Items {
		if rb.RoleRef.Kind == "Role" && rb.RoleRef.Name == "ehdb-shard-election" {
			return &list.Items[i]
		}
	}
	s.t.Fatal("the chart's writer RoleBinding is missing")
	return nil
}

// Scenario 6: one writer alone loses its network path to the API server.
func TestScenario6PartitionOfOneWriter(t *testing.T) {
	s := newSystem(t, nil)
	p := newProxy(t, strings.TrimPrefix(s.c.Config.Host, "https://"))
	kube := filepath.Join(s.dir, "partitioned.kubeconfig")
	cfg, err := clientcmd.LoadFromFile(s.writerKube)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + p.addr()
	}
	if err := clientcmd.WriteToFile(*cfg, kube); err != nil {
		t.Fatal(err)
	}
	partitioned := startWriter(t, s.writerSpec(shard0, kube))
	_, e1 := waitValid(t, 20*time.Second, partitioned)
	standby, other := s.writer(shard0), s.writer(shard1)
	_, o1 := waitValid(t, 20*time.Second, other)

	// A slow path is not a partition: the holder keeps its token.
	p.setDelay(100 * time.Millisecond)
	time.Sleep(2 * lease)
	if tok, err := partitioned.Token(); err != nil || !tok.Valid || tok.Epoch != e1 {
		t.Fatalf("with 100ms of delay the holder lost its token: %+v %v", tok, err)
	}

	p.blackhole()
	cut := time.Now()
	eventually(t, lease+2*time.Second, "the partitioned writer's token expires", func() error {
		tok, err := partitioned.Token()
		if err != nil {
			return err
		}
		if tok.Valid {
			return fmt.Errorf("still valid %s after the cut", time.Since(cut))
		}
		return nil
	})
	_, e2 := waitValid(t, lease+renew+5*time.Second, standby)
	if e2 != e1+1 {
		t.Fatalf("the standby took over with epoch %d, want %d", e2, e1+1)
	}
	if tok, err := other.Token(); err != nil || !tok.Valid || tok.Epoch != o1 {
		t.Fatalf("the writer of shard 1 was disturbed by shard 0's partition: %+v %v", tok, err)
	}
	p.heal()
	eventually(t, lease+10*time.Second, "the healed writer learns it lost", func() error {
		m, err := partitioned.Scrape()
		if err != nil {
			return err
		}
		if m.Get("ehdb_election_holds_lease") != 0 || m.Get("ehdb_election_token_valid") != 0 {
			return fmt.Errorf("holds_lease=%v", m.Get("ehdb_election_holds_lease"))
		}
		return nil
	})
	s.checkSafety(shard0)
	s.checkSafety(shard1)
}

// Scenario 7: the webhook is down. Workloads fail closed, unrelated objects never reach it, and
// Pods fail open so a writer's Pod is still recreated.
func TestScenario7WebhookDown(t *testing.T) {
	s := newSystem(t, nil)
	s.startWebhook()
	ctx := context.Background()
	cs := s.c.Clientset()
	if _, err := cs.AppsV1().StatefulSets(s.ns).Create(ctx, referenceWriter(s.ns, writerSA, 1, env("NOETL_EHDB_FENCING", "off", "NOETL_EHDB_ELECTION", "true")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := s.writer(shard0)
	waitValid(t, 20*time.Second, w)
	if _, err := setEnv(ctx, s, "NOETL_EHDB_FENCING", "enforce", false); err != nil {
		t.Fatalf("arming a correct writer: %v", err)
	}
	// Arming changed the pod template: the controller replaces the unarmed Pod. Wait for the Pod
	// of the armed revision, so the deletion below races no rollout.
	eventually(t, 60*time.Second, "the StatefulSet controller creates the armed writer's Pod", func() error {
		sts, err := cs.AppsV1().StatefulSets(s.ns).Get(ctx, "noetl-cmdbus-writer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod, err := cs.CoreV1().Pods(s.ns).Get(ctx, shard0, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Until the controller has observed the arming update, its status still names the old
		// revision as the update revision and the unarmed Pod would pass.
		if sts.Status.ObservedGeneration < sts.Generation {
			return fmt.Errorf("the controller has observed generation %d of %d", sts.Status.ObservedGeneration, sts.Generation)
		}
		if rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; rev == "" || rev != sts.Status.UpdateRevision || pod.DeletionTimestamp != nil {
			return fmt.Errorf("pod at revision %q, the armed revision is %q", rev, sts.Status.UpdateRevision)
		}
		return nil
	})

	s.webhook.Stop()
	_, err := setEnv(ctx, s, "NOETL_EHDB_ELECTION_LEASE_SECS", "20", false)
	wantDenied(t, "armed StatefulSet update with the webhook down", err, "failed calling webhook")
	if _, err := cs.AppsV1().Deployments(s.ns).Create(ctx, unrelatedDeployment(s.ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("an unrelated Deployment was refused while the webhook is down: %v", err)
	}
	pod, err := cs.CoreV1().Pods(s.ns).Get(ctx, shard0, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podUID := string(pod.UID)
	if err := cs.CoreV1().Pods(s.ns).Delete(ctx, shard0, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the writer's Pod is recreated with the webhook down", func() error {
		pod, err := cs.CoreV1().Pods(s.ns).Get(ctx, shard0, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(pod.UID) == podUID {
			return fmt.Errorf("still the old Pod")
		}
		return nil
	})
	s.checkSafety(shard0)
}
