package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/cert"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

// Webhook is the webhook binary running on the host, serving the chart's webhook configuration.
type Webhook struct {
	Config     string // the chart's ValidatingWebhookConfiguration, now pointed at this process
	URL        string
	MetricsURL string
	LogPath    string
	cmd        *exec.Cmd
	done       chan struct{}
}

// StartWebhook runs the webhook on loopback as the chart's webhook ServiceAccount of release rel
// in ns, so its RBAC is exactly the chart's, and points every entry of the chart's webhook
// configuration at it with a fresh CA. In a cluster the same configuration points at the chart's
// Service and the webhook manages its own certificate; there is no kubelet here to run its Pods.
// extraArgs are added to the command line (e.g. --guarded-namespaces, as the chart's Deployment
// passes it).
func StartWebhook(ctx context.Context, c *testcluster.Cluster, bin, ns, rel, dir string, extraArgs ...string) (*Webhook, error) {
	cs := c.Clientset()
	vwcs, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel})
	if err != nil {
		return nil, err
	}
	if len(vwcs.Items) != 1 {
		return nil, fmt.Errorf("want one ValidatingWebhookConfiguration of release %s, found %d", rel, len(vwcs.Items))
	}
	sa, err := webhookServiceAccount(ctx, c, ns, rel)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "webhook-certs")
	certPEM, err := LoopbackCert(certDir)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "webhook.kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, ns, sa, kubeconfig); err != nil {
		return nil, err
	}
	// The ports were free when picked, and are bound a moment later by the webhook: other
	// processes' connections draw from the same ephemeral range, and a fresh-clone CI once lost
	// that race (the webhook exited, "address already in use"). Such a start is retried on fresh
	// ports; any other failure is returned with the log.
	var w *Webhook
	for attempt := 0; ; attempt++ {
		w, err = startWebhookProcess(bin, dir, kubeconfig, ns, sa, certDir, vwcs.Items[0].Name, extraArgs)
		if err == nil || w == nil || attempt == 2 || !w.exited() {
			break
		}
		if b, rerr := os.ReadFile(w.LogPath); rerr != nil || !strings.Contains(string(b), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}

	vwc := &vwcs.Items[0]
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &w.URL, CABundle: certPEM}
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		w.Stop()
		return nil, fmt.Errorf("pointing %s at the host webhook: %w", vwc.Name, err)
	}
	// The API server reads webhook configurations through an informer: until it has seen the
	// update it still calls the Service, which has no endpoints here. Hand the webhook over only
	// once an unarmed workload that reaches it (it names the fencing variable) is admitted.
	probe := unarmedProbe(ns)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
	if err != nil {
		w.Stop()
		return nil, fmt.Errorf("the API server never called the host webhook: %w (log %s)", err, w.LogPath)
	}
	return w, nil
}

// unarmedProbe is a StatefulSet the guard admits without a lookup: NOETL_EHDB_FENCING=off.
func unarmedProbe(ns string) *appsv1.StatefulSet {
	labels := map[string]string{"app": "ehdb-harness-probe"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-harness-probe", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "probe", Image: "probe",
					Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "off"}},
				}}},
			},
		},
	}
}

func webhookServiceAccount(ctx context.Context, c *testcluster.Cluster, ns, rel string) (string, error) {
	list, err := c.Clientset().CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel})
	if err != nil {
		return "", err
	}
	for _, sa := range list.Items {
		if strings.HasSuffix(sa.Name, "-webhook") {
			return sa.Name, nil
		}
	}
	return "", fmt.Errorf("release %s created no webhook ServiceAccount in %s", rel, ns)
}

// startWebhookProcess starts the webhook binary on fresh loopback ports and waits until it is
// ready; on failure it returns the stopped process too (to read its log) with the error.
func startWebhookProcess(bin, dir, kubeconfig, ns, sa, certDir, config string, extraArgs []string) (*Webhook, error) {
	var ports [3]int
	var err error
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	logFile, err := os.CreateTemp(dir, "webhook-*.log")
	if err != nil {
		return nil, err
	}
	w := &Webhook{
		Config:     config,
		URL:        fmt.Sprintf("https://127.0.0.1:%d/validate", ports[0]),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]),
		LogPath:    logFile.Name(),
		done:       make(chan struct{}),
	}
	w.cmd = exec.Command(bin, append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + ns,
		"--service-account=" + sa, // as the chart's Deployment: its own access is protected
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", ports[0]),
		"--cert-dir=" + certDir,
		"--cert-rotation=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]),
	}, extraArgs...)...)
	w.cmd.Stdout, w.cmd.Stderr = logFile, logFile
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the webhook: %w", err)
	}
	go func() { _ = w.cmd.Wait(); logFile.Close(); close(w.done) }()

	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])
	deadline := time.Now().Add(30 * time.Second)
	for err := Probe(readyz); err != nil; err = Probe(readyz) {
		if time.Now().After(deadline) || w.exited() {
			w.Stop()
			return w, fmt.Errorf("the webhook never became ready: %w (log %s, ending:\n%s)", err, w.LogPath, logTail(w.LogPath, 2048))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return w, nil
}

// logTail is the last n bytes of the file at path, for error messages (a test's folder is
// removed after it, its logs with it).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (w *Webhook) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Stop stops the webhook (SIGTERM, then SIGKILL after 10 s) and waits for it to end.
func (w *Webhook) Stop() {
	if w.exited() {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// LoopbackCert writes a fresh self-signed serving certificate for 127.0.0.1 into certDir (tls.crt,
// tls.key, as controller-runtime's webhook server reads them) and returns the certificate, which
// is also the caBundle a webhook configuration needs to trust it.
func LoopbackCert(certDir string) ([]byte, error) {
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("generating a loopback certificate: %w", err)
	}
	if err := errors.Join(
		os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600),
		os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600),
	); err != nil {
		return nil, err
	}
	return certPEM, nil
}

// PID is the webhook process's id (for reading its memory from /proc).
func (w *Webhook) PID() int { return w.cmd.Process.Pid }
