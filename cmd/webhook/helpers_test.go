package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) {
	// The global logger (cert-controller logs through it) outlives any one test; keep it quiet.
	ctrl.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	os.Exit(testcluster.Main(m))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// servingCert writes tls.crt and tls.key for 127.0.0.1 and localhost into dir, signed by a fresh
// CA, and returns the CA in PEM (the caBundle).
func servingCert(t testing.TB, dir string) []byte {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ehdb-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// write replaces path atomically, as the kubelet's atomic writer does for a Secret volume.
func write(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startWebhook runs the command in-process with args and stops it (gracefully) when the test
// ends. It returns the probe and metrics base URLs. Their ports were free when picked and are
// bound a moment later: other processes' connections draw from the same range, and fresh-clone CI
// runs lost that race ("bind: address already in use"), so such a start is retried on new ones.
func startWebhook(t *testing.T, args []string, tweak func(*options)) (probes, metrics string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		probePort, metricsPort := freePort(t), freePort(t)
		o, err := parseFlags(append(slices.Clone(args),
			"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probePort),
			"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort)), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if tweak != nil {
			tweak(&o)
		}
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, o, cfg, testr.New(t)) }()
		// Until its probe port listens, the process may still fail to bind.
		probe := "127.0.0.1:" + strconv.Itoa(probePort)
		deadline := time.Now().Add(60 * time.Second)
		for listening := false; !listening; {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("the webhook's probe port %s did not listen within 60s", probe)
			}
			select {
			case err := <-done:
				cancel()
				if err != nil && strings.Contains(err.Error(), "address already in use") && attempt < 2 {
					listening = true // leave the loop; start again below
					continue
				}
				t.Fatalf("webhook stopped before it listened: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
			if c, err := net.DialTimeout("tcp", probe, time.Second); err == nil {
				c.Close()
				t.Cleanup(func() {
					cancel()
					select {
					case err := <-done:
						if err != nil {
							t.Errorf("webhook stopped with: %v", err)
						}
					case <-time.After(45 * time.Second):
						t.Errorf("webhook did not stop within 45s")
					}
				})
				return "http://" + probe, fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
			}
		}
	}
}

// waitReady waits until the webhook's /readyz at probes answers 200.
func waitReady(t *testing.T, timeout time.Duration, probes string) {
	t.Helper()
	eventually(t, timeout, probes+"/readyz", func() error {
		if code, body := get(probes + "/readyz"); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// get returns the status code and body of url, or -1 when it cannot be reached.
func get(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// registerGuard registers the webhook as the chart does (workloads fail closed, Pods fail open,
// path /validate, sideEffects None, v1 reviews, 5 s), but scoped to the test's namespace.
func registerGuard(t *testing.T, cs kubernetes.Interface, name, url string, caBundle []byte, ns string) {
	t.Helper()
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{ns}}}}
	none := admissionregistrationv1.SideEffectClassNone
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: caBundle}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "workloads.ehdb-election.noetl.io", ClientConfig: cc, NamespaceSelector: sel,
			Rules: []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}}},
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs", "cronjobs"}}},
			},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5),
		}, {
			Name: "pods.ehdb-election.noetl.io", ClientConfig: cc, NamespaceSelector: sel,
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore), SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5),
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// denial returns the message of an admission denial, or fails the test.
func denial(t *testing.T, err error, what string) string {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: admitted, want refused", what)
	}
	msg := err.Error()
	if !strings.Contains(msg, "denied the request") || !strings.Contains(msg, "refusing to arm") {
		t.Fatalf("%s: refused, but not by the guard: %v", what, err)
	}
	return msg
}

func mustContain(t *testing.T, msg string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}
}

func mustNotContain(t *testing.T, msg string, nots ...string) {
	t.Helper()
	for _, w := range nots {
		if strings.Contains(msg, w) {
			t.Errorf("message mentions %q, which holds:\n%s", w, msg)
		}
	}
}

var errNotYet = errors.New("not yet")
