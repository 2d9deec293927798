package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

const (
	release  = "ehdb-election"
	writerSA = "noetl-cmdbus-writer"
	// The shortest timings the parser allows keep the suite quick; the rules do not depend on them.
	leaseSecs = 3
	renewSecs = 1
	lease     = leaseSecs * time.Second
	renew     = renewSecs * time.Second
)

// system is one installation of the whole product: the chart in a fresh namespace (where the
// writers run too, as with `helm install ... -n noetl`), the webhook as a host process the
// chart's webhook configuration points at, and writers as host processes using the chart's SA.
type system struct {
	t          *testing.T
	c          *testcluster.Cluster
	ns         string
	dir        string
	chart      *chartinstall.Client
	writerKube string // kubeconfig authenticating as the chart's writer ServiceAccount
	webhook    *exec.Cmd
	webhookLog string
	webhookCfg string // the chart's ValidatingWebhookConfiguration
}

func newSystem(t *testing.T, values map[string]any) *system {
	t.Helper()
	c := testcluster.ForTest(t)
	ctx := context.Background()
	s := &system{t: t, c: c, ns: c.NewNamespace(t), dir: t.TempDir()}
	chartDir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if s.chart, err = chartinstall.New(c.Kubeconfig, s.ns, chartDir, log); err != nil {
		t.Fatal(err)
	}
	rel, err := s.chart.Install(ctx, release, values)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.chart.Uninstall(release); err != nil {
			t.Errorf("uninstall: %v", err)
		}
	})
	s.writerKube = filepath.Join(s.dir, "writer.kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, s.ns, writerSA, s.writerKube); err != nil {
		t.Fatal(err)
	}
	if s.webhookCfg = findWebhookConfiguration(t, c, rel.Name); s.webhookCfg == "" {
		t.Fatal("the chart installed no ValidatingWebhookConfiguration")
	}
	return s
}

func findWebhookConfiguration(t *testing.T, c *testcluster.Cluster, rel string) string {
	list, err := c.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("want one ValidatingWebhookConfiguration of release %s, found %d", rel, len(list.Items))
	}
	return list.Items[0].Name
}

// startWebhook runs the webhook binary on loopback with the chart's webhook ServiceAccount (so
// its RBAC is the chart's), and points the chart's webhook configuration at it. In a cluster the
// same configuration points at the chart's Service; there is no kubelet here to run the Pods.
func (s *system) startWebhook() {
	t := s.t
	t.Helper()
	ctx := context.Background()
	certDir := filepath.Join(s.dir, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sa := s.webhookServiceAccount()
	kubeconfig := filepath.Join(s.dir, "webhook.kubeconfig")
	if err := s.c.ServiceAccountKubeconfig(ctx, s.ns, sa, kubeconfig); err != nil {
		t.Fatal(err)
	}
	port, health := freePort(t), freePort(t)
	logFile, err := os.CreateTemp(s.dir, "webhook-*.log")
	if err != nil {
		t.Fatal(err)
	}
	s.webhookLog = logFile.Name()
	cmd := exec.Command(filepath.Join(binaries(t), "webhook"),
		"--kubeconfig="+kubeconfig,
		"--namespace="+s.ns,
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", port),
		"--cert-dir="+certDir,
		"--cert-rotation=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.webhook = cmd
	go func() { _ = cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		s.stopWebhook()
		if t.Failed() {
			data, _ := os.ReadFile(s.webhookLog)
			t.Logf("--- webhook log ---\n%s", tail(string(data), 40))
		}
	})
	eventually(t, 30*time.Second, "the webhook is ready", func() error {
		resp, err := scrapeClient.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})

	vwcs := s.c.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := vwcs.Get(ctx, s.webhookCfg, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/validate", port)
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM}
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (s *system) stopWebhook() {
	if s.webhook == nil || s.webhook.Process == nil {
		return
	}
	_ = s.webhook.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.webhook.Process.Signal(syscall.Signal(0)) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = s.webhook.Process.Kill()
}

func (s *system) webhookServiceAccount() string {
	list, err := s.c.Clientset().CoreV1().ServiceAccounts(s.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, sa := range list.Items {
		if sa.Name != writerSA && strings.Contains(sa.Name, "webhook") {
			return sa.Name
		}
	}
	s.t.Fatalf("the chart created no webhook ServiceAccount in %s", s.ns)
	return ""
}

// writer starts an ehdb-writer for the given pod name (its ordinal is the shard) as the
// chart's writer ServiceAccount.
func (s *system) writer(hostname string, extraEnv ...string) *writer {
	return startWriter(s.t, writerSpec{
		hostname: hostname, namespace: s.ns, kubeconfig: s.writerKube,
		leaseSecs: leaseSecs, renewSecs: renewSecs, dir: s.dir, extraEnv: extraEnv,
	})
}

// checkSafety runs the safety checker over every writer of the given shard's pod name.
func (s *system) checkSafety(hostname string) []interval {
	s.t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.dir, "intervals-"+hostname+".jsonl"))
	return checkSafety(s.t, files...)
}
