package charttest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"

	"github.com/noetl/ehdb-election/internal/prevrelease"
	"github.com/noetl/ehdb-election/internal/repo"
)

// issue makes a serving certificate for host signed by a fresh CA, as the rotator would: the
// certificate (followed by the CA), its key, and the CA alone for the caBundle.
func issue(t *testing.T, host string) (cert, key, ca []byte) {
	t.Helper()
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, rest := pem.Decode(cert)
	if ca = bytes.TrimSpace(rest); len(ca) == 0 {
		t.Fatal("no CA after the serving certificate")
	}
	return cert, key, ca
}

// TestUpgradeKeepsTheRotatorsTLS: the rotator writes the Secret's data and the caBundle after the
// install; `helm upgrade` (twice, with and without changes) must keep both, or every upgrade would
// break admission until the rotator noticed.
func TestUpgradeKeepsTheRotatorsTLS(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil))
	ctx := context.Background()
	secrets := r.cs.CoreV1().Secrets(r.ns)
	vwcs := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	host := r.name + "-webhook." + r.ns + ".svc"

	// What the rotator does after start-up.
	cert, key, caCert := issue(t, host)
	s, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Data) != 0 {
		t.Fatalf("the chart installed a non-empty TLS Secret: %v", s.Data)
	}
	s.Data = map[string][]byte{"ca.crt": caCert, "tls.crt": cert, "tls.key": key}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vwc, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = caCert
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	upgrades := []struct {
		name    string
		values  map[string]any
		timeout int32
	}{
		{"with changes", r.values(nil, map[string]any{"webhook": map[string]any{"timeoutSeconds": 7, "podAnnotations": map[string]any{"rollout": "2"}}}), 7},
		{"back to the defaults", r.values(nil), 5},
	}
	for _, up := range upgrades {
		if _, err := r.helm.Upgrade(ctx, r.name, up.values); err != nil {
			t.Fatalf("%s: %v", up.name, err)
		}
		got, err := secrets.Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Data, s.Data) {
			t.Errorf("%s: the upgrade changed the TLS Secret's data (keys now %v)", up.name, keys(got.Data))
		}
		vwc, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range vwc.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, caCert) {
				t.Errorf("%s: %s lost its caBundle", up.name, w.Name)
			}
			if *w.TimeoutSeconds != up.timeout {
				t.Errorf("%s: %s timeoutSeconds = %d, want %d (the upgrade did not apply)", up.name, w.Name, *w.TimeoutSeconds, up.timeout)
			}
			if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != r.name+"-webhook" {
				t.Errorf("%s: %s clientConfig = %+v", up.name, w.Name, w.ClientConfig)
			}
			// Admission keeps working: the certificate the webhook serves verifies against the caBundle
			// the API server uses, for the Service's name.
			if err := verifyServing(got.Data["tls.crt"], w.ClientConfig.CABundle, host); err != nil {
				t.Errorf("%s: %s: %v", up.name, w.Name, err)
			}
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func verifyServing(certPEM, caBundle []byte, host string) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errNoPEM
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		return errNoPEM
	}
	_, err = cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
	return err
}

var errNoPEM = errors.New("no PEM certificate")

// TestUninstallRemovesTheWebhookConfigurationFirst holds the webhook configuration with a finalizer
// and looks at the cluster at the moment `helm uninstall` deletes it: with the chart's pre-delete
// hook, the Service and the Deployment it points at are still there. Without hooks (the control),
// Helm's own order has already deleted the Service.
func TestUninstallRemovesTheWebhookConfigurationFirst(t *testing.T) {
	t.Parallel()
	const finalizer = "ehdb-test.noetl.io/hold"
	for _, tc := range []struct {
		name         string
		noHooks      bool
		serviceAlive bool
	}{
		{"with the pre-delete hook", false, true},
		{"control: helm uninstall --no-hooks", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRelease(t, nil)
			r.install(t, r.values(nil))
			ctx := context.Background()
			// Rendered against the cluster, the release has the pre-delete copy: the same webhooks and
			// labels, and the hook annotations.
			vwcObj := r.rendered.Find("ValidatingWebhookConfiguration", r.name)
			hook := findObject(r.rendered.Hooks, "ValidatingWebhookConfiguration", r.name)
			if vwcObj == nil || hook == nil {
				t.Fatalf("the install renders the configuration %v and its pre-delete copy %v", vwcObj != nil, hook != nil)
			}
			if hook.GetAnnotations()["helm.sh/hook"] != "pre-delete" || !reflect.DeepEqual(hook.Object["webhooks"], vwcObj.Object["webhooks"]) || !reflect.DeepEqual(hook.GetLabels(), vwcObj.GetLabels()) {
				t.Error("the pre-delete copy differs from the release's webhook configuration")
			}
			vwcs := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
			setFinalizers := func(f []string) {
				t.Helper()
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					v, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					v.Finalizers = f
					_, err = vwcs.Update(ctx, v, metav1.UpdateOptions{})
					return err
				})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			setFinalizers([]string{finalizer})
			t.Cleanup(func() { setFinalizers(nil) })

			done := make(chan error, 1)
			go func() { done <- r.helm.Uninstall(r.name, tc.noHooks) }()

			waitFor(t, 60*time.Second, "helm to delete the webhook configuration", func(ctx context.Context) (bool, error) {
				v, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
				return err == nil && v.DeletionTimestamp != nil, err
			})
			_, svcErr := r.cs.CoreV1().Services(r.ns).Get(ctx, r.name+"-webhook", metav1.GetOptions{})
			d, depErr := r.cs.AppsV1().Deployments(r.ns).Get(ctx, r.name+"-webhook", metav1.GetOptions{})
			if tc.serviceAlive {
				if svcErr != nil {
					t.Errorf("the Service was deleted before the webhook configuration: %v", svcErr)
				}
				if depErr != nil || d.DeletionTimestamp != nil {
					t.Errorf("the Deployment was being deleted before the webhook configuration: %v", depErr)
				}
			} else if !apierrors.IsNotFound(svcErr) {
				t.Errorf("control: Service still there when the webhook configuration went (err %v): the control shows nothing", svcErr)
			}

			setFinalizers(nil)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("helm uninstall did not return")
			}
			objs := newObjects(t, r.c)
			gone, _ := splitKept(append(r.rendered.Objects, r.rendered.Hooks...))
			if tc.noHooks {
				// The TLS Secret is created by a hook and removed by one (webhook-tls.yaml): without
				// hooks it stays behind, as the README says.
				secret := r.name + "-webhook-tls"
				gone = slices.DeleteFunc(gone, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Secret" && o.GetName() == secret })
				if _, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, secret, metav1.GetOptions{}); err != nil {
					t.Errorf("control: the TLS Secret after uninstall --no-hooks: %v (the README says it stays)", err)
				}
			}
			if left := leftovers(ctx, t, objs, gone); len(left) > 0 {
				t.Errorf("helm uninstall left: %v", left)
			}
		})
	}
}

// rotatorFills does what the webhook's rotator does after start-up: it writes a CA and a serving
// certificate into the chart's TLS Secret and the CA into every entry's caBundle. It returns the data.
func rotatorFills(t *testing.T, r *testRelease) (data map[string][]byte, caCert []byte) {
	t.Helper()
	ctx := context.Background()
	cert, key, caCert := issue(t, r.name+"-webhook."+r.ns+".svc")
	data = map[string][]byte{"ca.crt": caCert, "tls.crt": cert, "tls.key": key}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = data
		_, err = r.cs.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	vwcs := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vwc, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].ClientConfig.CABundle = caCert
		}
		_, err = vwcs.Update(ctx, vwc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return data, caCert
}

// checkTLSKept fails unless the TLS Secret still holds data and every entry of the webhook
// configuration still trusts caCert, with a serving certificate that verifies against it.
func checkTLSKept(t *testing.T, r *testRelease, step string, data map[string][]byte, caCert []byte, wantTimeout int32) {
	t.Helper()
	ctx := context.Background()
	got, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s: the TLS Secret: %v", step, err)
		return
	}
	if !reflect.DeepEqual(got.Data, data) {
		t.Errorf("%s: the TLS Secret's data changed (keys now %v)", step, keys(got.Data))
	}
	vwc, err := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, caCert) {
			t.Errorf("%s: %s lost its caBundle (%d bytes)", step, w.Name, len(w.ClientConfig.CABundle))
		} else if err := verifyServing(got.Data["tls.crt"], w.ClientConfig.CABundle, r.name+"-webhook."+r.ns+".svc"); err != nil {
			t.Errorf("%s: %s: %v", step, w.Name, err)
		}
		if wantTimeout != 0 && *w.TimeoutSeconds != wantTimeout {
			t.Errorf("%s: %s timeoutSeconds = %d, want %d (the change did not apply)", step, w.Name, *w.TimeoutSeconds, wantTimeout)
		}
	}
}

// TestForceAndRollbackKeepTheRotatorsTLS (issue 18): `helm upgrade --force` replaces (PUTs) every
// object of the release with its rendering (helm.sh/helm/v3 pkg/kube updateResource), and rollback
// applies an older revision's manifest. Neither may empty the TLS Secret or the caBundle: the chart
// keeps the Secret out of the release's objects and renders the live caBundle back.
func TestForceAndRollbackKeepTheRotatorsTLS(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil)) // revision 1
	ctx := context.Background()
	s, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the install created no TLS Secret for the rotator: %v", err)
	}
	if len(s.Data) != 0 {
		t.Fatalf("the chart installed a non-empty TLS Secret: %v", keys(s.Data))
	}
	data, caCert := rotatorFills(t, r)

	changed := r.values(nil, map[string]any{"webhook": map[string]any{"timeoutSeconds": 7, "podAnnotations": map[string]any{"rollout": "2"}}})
	if _, err := r.helm.UpgradeForce(ctx, r.name, changed); err != nil { // revision 2
		t.Fatal(err)
	}
	checkTLSKept(t, r, "upgrade --force with changes", data, caCert, 7)
	if _, err := r.helm.UpgradeForce(ctx, r.name, r.values(nil)); err != nil { // revision 3
		t.Fatal(err)
	}
	checkTLSKept(t, r, "upgrade --force back to the defaults", data, caCert, 5)
	if _, err := r.helm.Upgrade(ctx, r.name, changed); err != nil { // revision 4
		t.Fatal(err)
	}
	checkTLSKept(t, r, "upgrade", data, caCert, 7)
	if err := r.helm.Rollback(r.name, 3, false); err != nil { // revision 5
		t.Fatal(err)
	}
	checkTLSKept(t, r, "rollback to revision 3", data, caCert, 5)
	if err := r.helm.Rollback(r.name, 2, true); err != nil { // revision 6
		t.Fatal(err)
	}
	checkTLSKept(t, r, "rollback --force to revision 2", data, caCert, 7)

	// The install's revision was rendered before any CA existed, so its manifest has no caBundle and
	// Helm's three-way merge removes the injected one (the rotator, which watches the configuration,
	// puts it back; README "Limits"). The Secret, which is no release object, keeps its data.
	if err := r.helm.Rollback(r.name, 1, true); err != nil {
		t.Fatal(err)
	}
	got, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
	if err != nil || !reflect.DeepEqual(got.Data, data) {
		t.Errorf("rollback --force to revision 1: the TLS Secret changed (err %v)", err)
	}

	// Uninstall still removes it.
	if err := r.helm.Uninstall(r.name, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the TLS Secret to go with the release", func(ctx context.Context) (bool, error) {
		_, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// previousChart loads the previous release's chart (internal/prevrelease) from git; it skips when
// the history is not there (a shallow clone).
func previousChart(t *testing.T) *chart.Chart {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := prevrelease.Extract(context.Background(), root, dir, "charts/ehdb-election"); err != nil {
		t.Skipf("the previous release's chart is not in this clone: %v", err)
	}
	prev, err := loader.Load(filepath.Join(dir, "charts", "ehdb-election"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if prev.Metadata.Version == cur.Metadata.Version {
		t.Fatalf("the previous release's chart has the current version %s: move prevrelease.Commit", cur.Metadata.Version)
	}
	return prev
}

// installPrevious installs a release with the previous release's chart (0.1.0), the default values,
// and removes it (with its kept lease guard) at the end of the test.
func installPrevious(t *testing.T) (*testRelease, *chart.Chart) {
	t.Helper()
	prev := previousChart(t)
	r := newRelease(t, nil)
	rendered, err := r.helm.InstallChart(context.Background(), prev, r.name, r.values(nil))
	if err != nil {
		t.Fatal(err)
	}
	r.rendered = rendered
	t.Cleanup(func() { _ = r.helm.Uninstall(r.name, false); r.removeKeptLeaseGuard(t) })
	return r, prev
}

// TestUpgradeFromThePreviousChartKeepsTheTLS: a release installed by the previous chart (0.1.0) owns
// its TLS Secret as a release object. Upgrading to this chart keeps the rotator's data and every
// entry's caBundle (the entries 0.1.0 lacked get it at once); the next upgrade stops managing the
// Secret without deleting it; a later --force keeps both; uninstall still removes the Secret. (A
// --force upgrade from 0.1.0 keeps the Secret too, TestRollbackToThePreviousChartKeepsTheTLS.)
func TestUpgradeFromThePreviousChartKeepsTheTLS(t *testing.T) {
	t.Parallel()
	r, prev := installPrevious(t)
	ctx := context.Background()
	if r.rendered.Find("Secret", r.name+"-webhook-tls") == nil {
		t.Fatalf("chart %s does not own the TLS Secret: nothing to migrate", prev.Metadata.Version)
	}
	data, caCert := rotatorFills(t, r)

	up, err := r.helm.Upgrade(ctx, r.name, r.values(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkTLSKept(t, r, "upgrade from "+prev.Metadata.Version, data, caCert, 5)
	if s := up.Find("Secret", r.name+"-webhook-tls"); s == nil || s.GetAnnotations()[keepPolicy] != "keep" {
		t.Errorf("the migrating upgrade does not render the Secret once more with keep: %v", s)
	}
	up, err = r.helm.Upgrade(ctx, r.name, r.values(nil))
	if err != nil {
		t.Fatal(err)
	}
	if up.Find("Secret", r.name+"-webhook-tls") != nil {
		t.Error("the second upgrade still renders the TLS Secret as a release object")
	}
	checkTLSKept(t, r, "the next upgrade", data, caCert, 5)
	if _, err := r.helm.UpgradeForce(ctx, r.name, r.values(nil)); err != nil {
		t.Fatal(err)
	}
	checkTLSKept(t, r, "a later upgrade --force", data, caCert, 5)

	if err := r.helm.Uninstall(r.name, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the TLS Secret to go with the release", func(ctx context.Context) (bool, error) {
		_, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestRollbackToThePreviousChartKeepsTheTLS: `helm rollback` from this chart to a revision of the
// previous chart (0.1.0, which owned the TLS Secret rendered without data and rendered no caBundle)
// applies that revision's manifest with a three-way merge against this chart's revision: whatever
// this chart's rendering holds and 0.1.0's lacks is removed from the live objects. Were it the
// rotator's data (`data`), the rollback would empty the Secret and the rotator would mint a new CA
// while the running Pods serve certificates of the old one; were it the caBundle, every call fails
// with x509 until the rotator puts it back (workloads refused, Pods admitted unreviewed). Both must
// survive a rollback right after the upgrade. The caBundle is kept by the first upgrade from 0.1.0
// rendering none; the cost is a `--force` upgrade from 0.1.0, which then empties it until the
// rotator puts it back (README "Limits"), so that case checks the Secret alone.
func TestRollbackToThePreviousChartKeepsTheTLS(t *testing.T) {
	t.Parallel()
	r, prev := installPrevious(t)
	ctx := context.Background()
	data, caCert := rotatorFills(t, r)
	secretKept := func(step string) {
		t.Helper()
		got, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, r.name+"-webhook-tls", metav1.GetOptions{})
		if err != nil || !reflect.DeepEqual(got.Data, data) {
			t.Errorf("%s: the TLS Secret's data changed (err %v, keys now %v)", step, err, keys(got.Data))
		}
	}
	for i, upgrade := range []struct {
		name     string
		run      func(context.Context, string, map[string]any) (*Rendered, error)
		caBundle bool // the caBundle is kept, not only the Secret
	}{{"helm upgrade", r.helm.Upgrade, true}, {"helm upgrade --force", r.helm.UpgradeForce, false}} {
		if _, err := upgrade.run(ctx, r.name, r.values(nil)); err != nil {
			t.Fatal(err)
		}
		kept := func(step string) {
			t.Helper()
			if upgrade.caBundle {
				checkTLSKept(t, r, step, data, caCert, 0)
			} else {
				secretKept(step)
			}
		}
		kept(upgrade.name + " from " + prev.Metadata.Version)
		if err := r.helm.Rollback(r.name, 1, false); err != nil {
			t.Fatal(err)
		}
		kept(fmt.Sprintf("helm rollback to revision 1 (%s) after %s (revision %d)", prev.Metadata.Version, upgrade.name, 2*i+2))
	}
}
