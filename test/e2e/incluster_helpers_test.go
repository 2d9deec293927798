package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

// The in-cluster scenarios run the product as an operator runs it: the chart's webhook Deployment
// serving admission through its Service with the certificate its rotator made, and the writers as
// a StatefulSet whose Pods the kubelet starts, stops with SIGTERM and restarts. They need a cluster
// whose nodes run Pods and already hold the project's images (nothing is pulled):
// `make e2e-node` (a real node on this machine) or `make e2e-kind`.
const (
	// InClusterEnv switches the suite to the in-cluster scenarios (and the host-process ones off).
	inClusterEnv = "E2E_IN_CLUSTER"

	// In-cluster timings. The lease is longer than a Pod's restart gap on purpose: a successor that
	// acquires within renew+1 s of starting can only have done so because its predecessor released
	// the Lease; without the release it would wait out the lease and then watch the record for
	// more than a lease duration on its own clock.
	icLeaseSecs = 12
	icRenewSecs = 2
	icRenew     = icRenewSecs * time.Second

	writerName = "noetl-cmdbus-writer"
	writerPod0 = writerName + "-0"
	shardLease = "ehdb-shard-00000000"
)

// inClusterImages names the images the cluster's nodes already hold: <repo>-webhook:<tag> and
// <repo>-writer:<tag>, from E2E_IMAGE_REPO and E2E_IMAGE_TAG (the Makefile's IMAGE_REPO/IMAGE_TAG).
type inClusterImages struct{ webhook, writer string }

func imagesFromEnv() inClusterImages {
	repo, tag := os.Getenv("E2E_IMAGE_REPO"), os.Getenv("E2E_IMAGE_TAG")
	if repo == "" {
		repo = "ghcr.io/noetl/ehdb-election"
	}
	if tag == "" {
		tag = "dev"
	}
	return inClusterImages{webhook: repo + "-webhook:" + tag, writer: repo + "-writer:" + tag}
}

// icSystem is one installation of the chart in a fresh namespace of a cluster that runs Pods.
type icSystem struct {
	t      *testing.T
	c      *testcluster.Cluster
	cs     kubernetes.Interface
	ns     string
	chart  *chartinstall.Client
	images inClusterImages
	// uninstalled is set once the test has uninstalled the release itself.
	uninstalled bool
	// samples are the scrapes in which a writer Pod claimed a valid token, for the cross-check.
	samples []scrapeSample
	// evidence keeps every writer container's record (start and validity intervals) for the
	// safety checker.
	evidence evidence
}

// requireInCluster skips unless E2E_IN_CLUSTER=1, and then insists on E2E_KUBECONFIG: the local
// control plane alone has no kubelet, so these scenarios would only time out there.
func requireInCluster(t *testing.T) {
	t.Helper()
	if os.Getenv(inClusterEnv) != "1" {
		t.Skipf("in-cluster scenario: set %s=1 with E2E_KUBECONFIG naming a cluster whose nodes run Pods and hold the project's images (make e2e-node, make e2e-kind)", inClusterEnv)
	}
	if os.Getenv("E2E_KUBECONFIG") == "" {
		t.Fatalf("%s=1 needs E2E_KUBECONFIG: the local control plane has no kubelet to run Pods", inClusterEnv)
	}
}

func newICSystem(t *testing.T) *icSystem {
	t.Helper()
	requireInCluster(t)
	c := testcluster.ForTest(t)
	s := &icSystem{t: t, c: c, cs: c.Clientset(), ns: c.NewNamespace(t), images: imagesFromEnv()}
	chartDir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	if s.chart, err = chartinstall.New(c.Kubeconfig, s.ns, chartDir, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if s.evidence, err = s.newEvidence(); err != nil {
		t.Fatalf("HARNESS: %v", err)
	}
	t.Logf("namespace %s, images %s and %s; the writers' records are kept in %s", s.ns, s.images.webhook, s.images.writer, s.evidence)
	return s
}

// values are the chart values of this installation: the local webhook image, never pulled.
func (s *icSystem) values(logLevel string) map[string]any {
	repo, tag, _ := strings.Cut(s.images.webhook, ":")
	return map[string]any{"webhook": map[string]any{
		"image":    map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"logLevel": logLevel,
	}}
}

func (s *icSystem) install() {
	s.t.Helper()
	if _, err := s.chart.Install(context.Background(), release, s.values("info")); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		if s.uninstalled {
			return
		}
		if s.t.Failed() {
			s.dumpPods()
		}
		if err := s.chart.Uninstall(release); err != nil {
			s.t.Errorf("uninstall: %v", err)
		}
	})
}

// webhookDeployment is the chart's webhook Deployment (the only Deployment of the release).
func (s *icSystem) webhookDeployment(ctx context.Context) (*appsv1.Deployment, error) {
	list, err := s.cs.AppsV1().Deployments(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=webhook"})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("want one webhook Deployment of release %s, found %d", release, len(list.Items))
	}
	return &list.Items[0], nil
}

// tlsSecretName is the Secret the webhook's Pods mount at /certs (the rotator fills it).
// webhookTLS returns the chart's webhook Deployment and the name of the TLS Secret it mounts.
func (s *icSystem) webhookTLS(ctx context.Context) (*appsv1.Deployment, string) {
	s.t.Helper()
	d, err := s.webhookDeployment(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	name, err := tlsSecretName(d)
	if err != nil {
		s.t.Fatal(err)
	}
	return d, name
}

func tlsSecretName(d *appsv1.Deployment) (string, error) {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "certs" && v.Secret != nil {
			return v.Secret.SecretName, nil
		}
	}
	return "", fmt.Errorf("deployment %s mounts no certs Secret", d.Name)
}

func (s *icSystem) webhookPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=webhook"})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitRolledOut waits until the webhook Deployment has exactly want ready, updated replicas and
// no old ones left.
func (s *icSystem) waitRolledOut(timeout time.Duration, want int32) {
	s.t.Helper()
	ctx := context.Background()
	eventually(s.t, timeout, fmt.Sprintf("the webhook Deployment has %d ready, updated replicas", want), func() error {
		d, err := s.webhookDeployment(ctx)
		if err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.Replicas != want || st.AvailableReplicas != want {
			return fmt.Errorf("generation %d observed %d: replicas %d updated %d ready %d available %d",
				d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
		}
		pods, err := s.webhookPods(ctx)
		if err != nil {
			return err
		}
		if int32(len(pods)) != want {
			return fmt.Errorf("%d webhook Pods exist, want %d", len(pods), want)
		}
		return nil
	})
}

func (s *icSystem) scaleWebhook(n int32) {
	s.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := s.webhookDeployment(ctx)
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(n)
		_, err = s.cs.AppsV1().Deployments(s.ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		s.t.Fatalf("scaling the webhook to %d: %v", n, err)
	}
}

// icWriter is the reference writer (SPEC.md) as it runs in a cluster: the chart's ServiceAccount,
// the project's writer image (never pulled), /ehdb-writer with the election on, the shard from the
// ordinal in HOSTNAME, restricted pod security (but for the folder of its record, below).
func (s *icSystem) icWriter(replicas int32, fencing string) *appsv1.StatefulSet {
	sts := referenceWriter(s.ns, writerSA, replicas, env(
		"NOETL_EHDB_FENCING", fencing,
		"NOETL_EHDB_ELECTION", "true",
		"NOETL_EHDB_ELECTION_LEASE_SECS", fmt.Sprint(icLeaseSecs),
		"NOETL_EHDB_ELECTION_RENEW_SECS", fmt.Sprint(icRenewSecs),
	))
	spec := &sts.Spec.Template.Spec
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	c := &spec.Containers[0]
	c.Image = s.images.writer
	c.ImagePullPolicy = corev1.PullNever
	c.Command = []string{"/ehdb-writer"}
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	// The record for the safety checker: start and validity intervals (a hostPath folder where the
	// harness reads the node's files, which restricted pod security would refuse; else the log).
	s.evidence.writerSpec(spec)
	return sts
}

// updateWriter applies mutate to the live writer StatefulSet, retrying only on write conflicts.
func (s *icSystem) updateWriter(mutate func(*appsv1.StatefulSet)) (*appsv1.StatefulSet, error) {
	ctx := context.Background()
	var out *appsv1.StatefulSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := s.cs.AppsV1().StatefulSets(s.ns).Get(ctx, writerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(cur)
		out, err = s.cs.AppsV1().StatefulSets(s.ns).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

func setContainerEnv(sts *appsv1.StatefulSet, key, value string) {
	c := &sts.Spec.Template.Spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == key {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: key, Value: value})
}

// podScrape fetches a Pod's /metrics through the API server's pod proxy, as an operator's
// `kubectl get --raw` would: no port-forward, no route from the test to the Pod network needed.
func (s *icSystem) podScrape(ctx context.Context, pod string, port int) (harness.Metrics, error) {
	body, err := s.cs.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/namespaces", s.ns, "pods", fmt.Sprintf("%s:%d", pod, port), "proxy", "metrics").
		Timeout(5 * time.Second).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping %s:%d through the pod proxy: %w", pod, port, err)
	}
	return parseExposition(body)
}

// parseExposition parses a Prometheus text exposition into harness.Metrics.
func parseExposition(body []byte) (harness.Metrics, error) {
	m, err := harness.ParseMetrics(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing an exposition: %w", err)
	}
	return m, nil
}

// holder is what a writer Pod's process says about itself and what the Lease says about it.
type holder struct {
	pod      string
	podUID   string
	identity string // the Lease's holderIdentity: <pod name>#<uuid of the process>
	epoch    uint64
	acquired time.Time // the Lease's acquireTime
	started  time.Time // when the Pod's container started (the kubelet's record, whole seconds)
	metrics  harness.Metrics
}

// waitHolder waits until the Pod of ordinal 0 runs a process that holds the shard's Lease with a
// valid token, by both accounts: the Pod's own /metrics (through the pod proxy) and the Lease.
// notUID, when set, excludes a Pod that must have been replaced.
func (s *icSystem) waitHolder(timeout time.Duration, notUID string) holder {
	s.t.Helper()
	ctx := context.Background()
	var h holder
	eventually(s.t, timeout, "the writer Pod "+writerPod0+" holds "+shardLease+" with a valid token", func() error {
		pod, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, writerPod0, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(pod.UID) == notUID {
			return fmt.Errorf("still the old Pod %s", pod.UID)
		}
		if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("Pod %s is %s: %s", pod.Name, pod.Status.Phase, podWhy(pod))
		}
		t0 := time.Now()
		m, err := s.podScrape(ctx, pod.Name, 9090)
		t1 := time.Now()
		if err != nil {
			return err
		}
		if m.Get("ehdb_election_active") != 1 || m.Get("ehdb_election_token_valid") != 1 || m.Get("ehdb_election_holds_lease") != 1 {
			return fmt.Errorf("active=%v token_valid=%v holds_lease=%v errors=%v/%v/%v", m.Get("ehdb_election_active"), m.Get("ehdb_election_token_valid"),
				m.Get("ehdb_election_holds_lease"), m.Get(`ehdb_election_errors_total{reason="forbidden"}`),
				m.Get(`ehdb_election_errors_total{reason="unauthorized"}`), m.Get(`ehdb_election_errors_total{reason="unreachable"}`))
		}
		l, err := s.cs.CoordinationV1().Leases(s.ns).Get(ctx, shardLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		id := ptr.Deref(l.Spec.HolderIdentity, "")
		if !strings.HasPrefix(id, pod.Name+"#") {
			return fmt.Errorf("the Lease is held by %q, not by a process of %s", id, pod.Name)
		}
		epoch := uint64(ptr.Deref(l.Spec.LeaseTransitions, 0))
		if got := uint64(m.Get("ehdb_election_epoch")); got != epoch {
			return fmt.Errorf("the Pod reports epoch %d, the Lease %d", got, epoch)
		}
		// The Lease names this Pod's process at the epoch the scrape showed valid: that scrape
		// must fall in the process's recorded validity of that epoch.
		s.samples = append(s.samples, scrapeSample{Identity: id, Start: t0, End: t1, Valid: true, Epoch: epoch})
		h = holder{pod: pod.Name, podUID: string(pod.UID), identity: id, epoch: epoch, metrics: m,
			started: pod.Status.ContainerStatuses[0].State.Running.StartedAt.Time}
		if l.Spec.AcquireTime != nil {
			h.acquired = l.Spec.AcquireTime.Time
		}
		return nil
	})
	return h
}

// lease reads the shard's Lease.
func (s *icSystem) lease(ctx context.Context) (*coordinationv1.Lease, error) {
	return s.cs.CoordinationV1().Leases(s.ns).Get(ctx, shardLease, metav1.GetOptions{})
}

func podWhy(pod *corev1.Pod) string {
	var parts []string
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, w.Reason, w.Message))
		}
		if x := cs.State.Terminated; x != nil {
			parts = append(parts, fmt.Sprintf("%s terminated: %s exit %d", cs.Name, x.Reason, x.ExitCode))
		}
	}
	return strings.Join(parts, "; ")
}

// podReady reports the Ready condition and when it last changed.
func podReady(pod *corev1.Pod) (bool, time.Time) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// dumpPods logs every Pod of the namespace with its state and the last lines of its log, so a
// failure on a cluster nobody can log into afterwards still says what happened.
func (s *icSystem) dumpPods() {
	ctx := context.Background()
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Logf("listing pods: %v", err)
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		s.t.Logf("--- pod %s (%s on %s): %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName, podWhy(pod))
		for _, cst := range pod.Status.ContainerStatuses {
			// A crash-looping container's own log is the previous one.
			previous := cst.State.Running == nil && cst.RestartCount > 0
			data, err := s.cs.CoreV1().Pods(s.ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: cst.Name, TailLines: ptr.To[int64](20), Previous: previous}).DoRaw(ctx)
			if err != nil {
				s.t.Logf("    (log of %s: %v)", cst.Name, err)
				continue
			}
			s.t.Logf("    log of %s (restarts %d, previous %v):\n%s", cst.Name, cst.RestartCount, previous, data)
		}
	}
	events, err := s.cs.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				s.t.Logf("event %s/%s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}

// gone waits until get reports NotFound.
func gone(t *testing.T, timeout time.Duration, what string, get func(context.Context) error) {
	t.Helper()
	eventually(t, timeout, what+" is gone", func() error {
		err := get(context.Background())
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there")
	})
}

// checkHelmTest runs `helm test` on the release: the chart's test Pod, on the node, in the
// webhook's image, must pass every check (it exits non-zero on any FAIL line), and its hooks must
// be gone afterwards (the uninstall check below counts what is left).
func (s *icSystem) checkHelmTest() {
	s.t.Helper()
	var logs strings.Builder
	if err := s.chart.Test(release, &logs); err != nil {
		s.t.Fatalf("helm test: %v\n%s", err, logs.String())
	}
}
