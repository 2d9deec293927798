package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election"
)

// rolloutReplicas is the writer StatefulSet's size in the rollout scenario: one shard per ordinal.
const rolloutReplicas = 3

// rolloutHaltWindow is how long the halted rollout is watched. Unhalted, the StatefulSet controller
// deletes the next Pod within a sync of the updated one turning Ready (one probe period, 1 s
// here): the window is many of those, and more than two lease durations, in which any other shard
// losing its token would show.
const rolloutHaltWindow = 30 * time.Second

// TestInClusterReadinessHaltsARolloutTheGuardCannotSee is issue 17's "a wrong admission costs one
// shard", on real Pods: a writer StatefulSet of three shards, each minting, is rolled to an image
// whose ENV arms the fence (NOETL_EHDB_FENCING=enforce, which no admission review can see) with
// the election left off. The writer's /readyz keeps the first rolled Pod unready, so the rolling
// update stops there: exactly one Pod unready, every other shard's token valid throughout. Then
// the fix (the election on again) rolls through every Pod, each armed and minting.
func TestInClusterReadinessHaltsARolloutTheGuardCannotSee(t *testing.T) {
	s := newICSystem(t)
	ctx := context.Background()
	armedImage := s.images.writer + "-armed"
	s.requireNodeImage(armedImage)
	step := func(name string) { t.Logf("=== %s", name) }

	step("install; the writer StatefulSet: 3 shards, election on, fence unset, /readyz as its readinessProbe")
	s.install()
	s.waitRolledOut(4*time.Minute, 2)
	sts := s.icWriter(rolloutReplicas, "")
	c := &sts.Spec.Template.Spec.Containers[0]
	// Unset in the Pod spec, so the image's ENV decides it; and the guard's matchConditions never
	// send this StatefulSet to the webhook.
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_FENCING" })
	c.ReadinessProbe = writerReadinessProbe()
	if _, err := s.cs.AppsV1().StatefulSets(s.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the writer: %v", err)
	}
	start := time.Now()
	before := s.waitShardsHeld(3*time.Minute, nil)
	t.Logf("3 shards held and Ready %.1fs after create: %v", time.Since(start).Seconds(), before)

	step("roll out the image whose ENV arms the fence, the election left off: admitted (the guard cannot see it)")
	others := []int{0, 1} // the shards the halted rollout must not touch
	watch := s.watchShards(others, before)
	t.Cleanup(func() { watch.stop() })
	rolledAt := time.Now()
	if _, err := s.updateWriter(func(x *appsv1.StatefulSet) {
		c := &x.Spec.Template.Spec.Containers[0]
		c.Image = armedImage
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == election.EnvElection })
	}); err != nil {
		t.Fatalf("the armed image with the election off was refused: %v", err)
	}

	step("the rollout stops at its first Pod: exactly one unready, its /readyz says why, the other shards valid throughout")
	broken := s.waitRolledPod(2*time.Minute, writerName+"-2")
	t.Logf("%s recreated at the update revision %.1fs after the update; /readyz: %s", broken.Name, time.Since(rolledAt).Seconds(), s.readyz(ctx, broken.Name))
	if body := s.readyz(ctx, broken.Name); !strings.HasPrefix(body, "503 "+string(election.ElectionOff)) {
		t.Fatalf("%s /readyz: %q, want 503 %s", broken.Name, body, election.ElectionOff)
	}
	haltFrom := time.Now()
	for time.Since(haltFrom) < rolloutHaltWindow {
		if err := s.checkHalted(ctx, broken, before); err != nil {
			t.Fatalf("%.1fs into the halt: %v", time.Since(haltFrom).Seconds(), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	scrapes := watch.stop()
	t.Logf("halted for %v: 1 Pod unready, %d scrapes of shards %v all valid, their Leases unchanged", rolloutHaltWindow, scrapes, others)

	step("the fix (the election on, the image still arming the fence) rolls through every Pod")
	fixedAt := time.Now()
	if _, err := s.updateWriter(func(x *appsv1.StatefulSet) {
		setContainerEnv(x, election.EnvElection, "true")
	}); err != nil {
		t.Fatalf("the fix was refused: %v", err)
	}
	after := s.waitShardsHeld(4*time.Minute, before)
	t.Logf("the fix rolled through in %.1fs: %v", time.Since(fixedAt).Seconds(), after)
	for shard := range rolloutReplicas {
		pod := fmt.Sprintf("%s-%d", writerName, shard)
		if body := s.readyz(ctx, pod); body != "200 ok" {
			t.Errorf("%s /readyz after the fix: %q", pod, body)
		}
	}
}

// writerReadinessProbe is the probe the chart's README shows for the writer, with a short period
// so the test runs quickly.
func writerReadinessProbe() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(9090)}},
		PeriodSeconds:    1,
		FailureThreshold: 2,
		TimeoutSeconds:   1,
	}
}

// requireNodeImage skips unless a node holds the image: hack/localnode packs the armed writer
// image; a cluster made otherwise (make e2e-kind) may not have it.
func (s *icSystem) requireNodeImage(ref string) {
	s.t.Helper()
	nodes, err := s.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, img := range n.Status.Images {
			if slices.Contains(img.Names, ref) {
				return
			}
		}
	}
	s.t.Skipf("no node holds %s (a writer image whose ENV sets NOETL_EHDB_FENCING=enforce; make e2e-node packs it)", ref)
}

// shardHolding is one shard's Lease as its Pod's process holds it.
type shardHolding struct {
	pod, uid, identity string
	epoch              uint64
}

func (h shardHolding) String() string { return fmt.Sprintf("%s epoch %d", h.pod, h.epoch) }

// waitShardsHeld waits until the StatefulSet is fully rolled out (every Pod at the update revision
// and Ready) and every shard's Lease is held by the process of its ordinal's Pod, which scrapes a
// valid token of that epoch. With prev set, each holding must be new (a different process) and
// above prev's epoch.
func (s *icSystem) waitShardsHeld(timeout time.Duration, prev []shardHolding) []shardHolding {
	s.t.Helper()
	ctx := context.Background()
	var got []shardHolding
	eventually(s.t, timeout, fmt.Sprintf("%d writer Pods rolled out, Ready, each holding its shard", rolloutReplicas), func() error {
		st, err := s.cs.AppsV1().StatefulSets(s.ns).Get(ctx, writerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if x := st.Status; x.ObservedGeneration < st.Generation || x.UpdatedReplicas != rolloutReplicas || x.ReadyReplicas != rolloutReplicas || x.CurrentRevision != x.UpdateRevision {
			return fmt.Errorf("generation %d observed %d: updated %d ready %d, revision %s → %s",
				st.Generation, x.ObservedGeneration, x.UpdatedReplicas, x.ReadyReplicas, x.CurrentRevision, x.UpdateRevision)
		}
		got = got[:0]
		for shard := range rolloutReplicas {
			h, err := s.shardHeld(ctx, shard)
			if err != nil {
				return err
			}
			if prev != nil && (h.identity == prev[shard].identity || h.epoch <= prev[shard].epoch) {
				return fmt.Errorf("shard %d: still %v (was %v)", shard, h, prev[shard])
			}
			got = append(got, h)
		}
		return nil
	})
	return got
}

// shardHeld reads a shard's Lease and its Pod's scrape: held by that Pod's process, valid, at the
// Lease's epoch.
func (s *icSystem) shardHeld(ctx context.Context, shard int) (shardHolding, error) {
	pod := fmt.Sprintf("%s-%d", writerName, shard)
	p, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return shardHolding{}, err
	}
	if ok, _ := podReady(p); !ok {
		return shardHolding{}, fmt.Errorf("%s is not Ready: %s", pod, podWhy(p))
	}
	l, err := s.cs.CoordinationV1().Leases(s.ns).Get(ctx, election.LeaseName(uint32(shard)), metav1.GetOptions{})
	if err != nil {
		return shardHolding{}, err
	}
	id := ptr.Deref(l.Spec.HolderIdentity, "")
	if !strings.HasPrefix(id, pod+"#") {
		return shardHolding{}, fmt.Errorf("%s is held by %q, not by a process of %s", l.Name, id, pod)
	}
	m, err := s.podScrape(ctx, pod, 9090)
	if err != nil {
		return shardHolding{}, err
	}
	epoch := uint64(ptr.Deref(l.Spec.LeaseTransitions, 0))
	if m.Get("ehdb_election_token_valid") != 1 || uint64(m.Get("ehdb_election_epoch")) != epoch {
		return shardHolding{}, fmt.Errorf("%s: token_valid %v epoch %v, the Lease %d", pod, m.Get("ehdb_election_token_valid"), m.Get("ehdb_election_epoch"), epoch)
	}
	return shardHolding{pod: pod, uid: string(p.UID), identity: id, epoch: epoch}, nil
}

// waitRolledPod waits until the named Pod exists at the StatefulSet's update revision, its
// container running: the rollout has replaced it.
func (s *icSystem) waitRolledPod(timeout time.Duration, name string) *corev1.Pod {
	s.t.Helper()
	ctx := context.Background()
	var pod *corev1.Pod
	eventually(s.t, timeout, name+" replaced at the update revision, running", func() error {
		st, err := s.cs.AppsV1().StatefulSets(s.ns).Get(ctx, writerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st.Status.ObservedGeneration < st.Generation {
			return fmt.Errorf("the controller has observed generation %d of %d", st.Status.ObservedGeneration, st.Generation)
		}
		if rev := p.Labels[appsv1.ControllerRevisionHashLabelKey]; rev != st.Status.UpdateRevision || st.Status.UpdateRevision == st.Status.CurrentRevision {
			return fmt.Errorf("%s at revision %s, update revision %s", name, rev, st.Status.UpdateRevision)
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil || p.DeletionTimestamp != nil {
			return fmt.Errorf("%s is %s: %s", name, p.Status.Phase, podWhy(p))
		}
		pod = p
		return nil
	})
	return pod
}

// checkHalted says whether the rollout is still stopped at broken: it is the only Pod not Ready
// and the only one at the update revision, the StatefulSet counts one updated replica, and every
// other Pod is the one from before, Ready.
func (s *icSystem) checkHalted(ctx context.Context, broken *corev1.Pod, before []shardHolding) error {
	st, err := s.cs.AppsV1().StatefulSets(s.ns).Get(ctx, writerName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if st.Status.UpdatedReplicas != 1 || st.Status.ReadyReplicas != rolloutReplicas-1 {
		return fmt.Errorf("the StatefulSet has %d updated, %d ready replicas: want 1 and %d", st.Status.UpdatedReplicas, st.Status.ReadyReplicas, rolloutReplicas-1)
	}
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + writerName})
	if err != nil {
		return err
	}
	if len(pods.Items) != rolloutReplicas {
		return fmt.Errorf("%d writer Pods, want %d", len(pods.Items), rolloutReplicas)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		ready, _ := podReady(p)
		if p.UID == broken.UID {
			if ready {
				return fmt.Errorf("%s, armed with no election, is Ready", p.Name)
			}
			continue
		}
		var was *shardHolding
		for j := range before {
			if before[j].uid == string(p.UID) {
				was = &before[j]
			}
		}
		switch {
		case was == nil:
			return fmt.Errorf("%s (uid %s) is not a Pod from before the rollout: the rollout moved on", p.Name, p.UID)
		case !ready || p.DeletionTimestamp != nil:
			return fmt.Errorf("%s: Ready %v, deleting %v: %s", p.Name, ready, p.DeletionTimestamp != nil, podWhy(p))
		}
	}
	return nil
}

// readyz returns a Pod's /readyz answer through the pod proxy as "<status> <body>". client-go turns
// a non-2xx plain-text answer into an APIStatus error that carries the code and, as its cause, the
// body.
func (s *icSystem) readyz(ctx context.Context, pod string) string {
	body, err := s.cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/namespaces", s.ns, "pods", pod+":9090", "proxy", "readyz").
		Timeout(5 * time.Second).DoRaw(ctx)
	if err == nil {
		return "200 " + strings.TrimSpace(string(body))
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "error " + err.Error()
	}
	st := status.Status()
	var causes []string
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			causes = append(causes, c.Message)
		}
	}
	return fmt.Sprintf("%d %s", st.Code, strings.Join(causes, "; "))
}

// shardWatch scrapes some shards' Pods and reads their Leases in the background until stopped,
// failing the test at the first sign that a shard lost its token or its holder.
type shardWatch struct {
	stopOnce sync.Once
	done     chan struct{}
	finished chan struct{}
	scrapes  int
}

func (s *icSystem) watchShards(shards []int, before []shardHolding) *shardWatch {
	w := &shardWatch{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		ctx := context.Background()
		for {
			select {
			case <-w.done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			for _, shard := range shards {
				h, err := s.shardHeld(ctx, shard)
				if err == nil && (h.identity != before[shard].identity || h.epoch != before[shard].epoch) {
					err = fmt.Errorf("now %v (%s), was %v (%s)", h, h.identity, before[shard], before[shard].identity)
				}
				if err != nil {
					s.t.Errorf("shard %d during the halted rollout: %v", shard, err)
					return
				}
				w.scrapes++
			}
		}
	}()
	return w
}

// stop ends the watch and returns how many scrapes it made, all valid.
func (w *shardWatch) stop() int {
	w.stopOnce.Do(func() { close(w.done) })
	<-w.finished
	return w.scrapes
}
