package charttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/repo"
)

// TestTheWebhookRotatesItsTLSWithTheChartsRBAC runs the real webhook binary (cmd/webhook) on the
// host with exactly the arguments the chart renders (addresses and the certificate folder aside),
// authenticated as the chart's webhook ServiceAccount. Its rotator must be able to fill the chart's
// empty Secret and inject the CA into both entries of the chart's webhook configuration with
// nothing but the chart's least-privilege RBAC; the test plays the kubelet that mounts the Secret.
// Then `helm upgrade` must keep what the rotator wrote.
func TestTheWebhookRotatesItsTLSWithTheChartsRBAC(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil))
	ctx := context.Background()
	bin := buildWebhook(t)

	kubeconfig := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := r.c.ServiceAccountKubeconfig(ctx, r.ns, r.name+"-webhook", kubeconfig); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	var ports [3]int
	for i := range ports {
		p, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	var args []string
	for _, a := range typed[appsv1.Deployment](t, r.rendered.Find("Deployment", r.name+"-webhook")).Spec.Template.Spec.Containers[0].Args {
		switch flag := strings.SplitN(a, "=", 2)[0]; flag {
		case "--webhook-port", "--cert-dir", "--metrics-bind-address", "--health-probe-bind-address":
			// replaced below: loopback ports and a folder of the test's own
		default:
			args = append(args, a)
		}
	}
	args = append(args, "--kubeconfig="+kubeconfig, "--webhook-host=127.0.0.1", "--cert-dir="+certDir,
		fmt.Sprintf("--webhook-port=%d", ports[0]),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]))
	logPath := filepath.Join(t.TempDir(), "webhook.log")
	stop := startProcess(t, bin, args, logPath)
	defer stop()
	fail := func(format string, a ...any) {
		t.Helper()
		log, _ := os.ReadFile(logPath)
		t.Fatalf(format+"\n--- webhook log ---\n%s", append(a, log)...)
	}

	// The rotator fills the Secret; the "kubelet" mounts it.
	secrets := r.cs.CoreV1().Secrets(r.ns)
	var data map[string][]byte
	err := pollErr(60*time.Second, func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		data = s.Data
		return len(data["tls.crt"]) > 0 && len(data["tls.key"]) > 0 && len(data["ca.crt"]) > 0, nil
	})
	if err != nil {
		fail("the rotator did not fill the Secret: %v", err)
	}
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, f), data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host := r.name + "-webhook." + r.ns + ".svc"
	if err := verifyServing(data["tls.crt"], data["ca.crt"], host); err != nil {
		t.Errorf("the rotator's certificate does not serve %s: %v", host, err)
	}

	vwcs := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err = pollErr(60*time.Second, func(ctx context.Context) (bool, error) {
		v, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range v.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, data["ca.crt"]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		fail("the rotator did not inject its CA into every webhook entry: %v", err)
	}
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])
	if err := pollErr(60*time.Second, func(context.Context) (bool, error) { return harness.Probe(readyz) == nil, nil }); err != nil {
		fail("the webhook never became ready: %v", err)
	}

	// An upgrade keeps the rotator's work.
	if _, err := r.helm.Upgrade(ctx, r.name, r.values(nil, map[string]any{"webhook": map[string]any{"podAnnotations": map[string]any{"rollout": "2"}}})); err != nil {
		t.Fatal(err)
	}
	s, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Data, data) {
		t.Errorf("helm upgrade changed the rotator's Secret")
	}
	v, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, data["ca.crt"]) {
			t.Errorf("helm upgrade removed the caBundle of %s", w.Name)
		}
	}
	if err := harness.Probe(readyz); err != nil {
		t.Errorf("the webhook is not ready after the upgrade: %v", err)
	}

	stop()
	log, _ := os.ReadFile(logPath)
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the webhook was refused something by the chart's RBAC: %s", line)
		}
	}
}

// buildWebhook compiles cmd/webhook into the test's folder (the build cache makes repeats fast).
func buildWebhook(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ehdb-webhook")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/webhook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/webhook: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts bin with its output in logPath; the returned stop (idempotent) sends SIGTERM
// and waits, then SIGKILL after 10 s. The process dies with the test binary in any case.
func startProcess(t *testing.T, bin string, args []string, logPath string) (stop func()) {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	return func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func pollErr(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
