package charttest

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestWebhookDrainsBeforeItStops: a terminating webhook replica keeps serving for the preStop delay
// (endpoint removal reaches the API server after the pod starts terminating) and then has room to
// finish the calls in flight, each bounded by timeoutSeconds, before the kubelet kills it.
func TestWebhookDrainsBeforeItStops(t *testing.T) {
	wh := func(v map[string]any) map[string]any { return map[string]any{"webhook": v} }
	for _, tc := range []struct {
		name           string
		values         map[string]any
		preStop, grace int64 // preStop 0: no preStop hook
	}{
		{"defaults", nil, 10, 45},
		{"full", mustValuesFile(t, "ci/full-values.yaml"), 15, 40},
		{"no delay", wh(map[string]any{"preStopDelaySeconds": 0, "terminationGracePeriodSeconds": 5}), 0, 5},
		{"exactly enough", wh(map[string]any{"preStopDelaySeconds": 20, "timeoutSeconds": 30, "terminationGracePeriodSeconds": 50}), 20, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := typed[appsv1.Deployment](t, mustRender(t, tc.values).Find("Deployment", "ehdb-election-webhook"))
			spec := d.Spec.Template.Spec
			if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != tc.grace {
				t.Errorf("terminationGracePeriodSeconds = %v, want %d", spec.TerminationGracePeriodSeconds, tc.grace)
			}
			lc := spec.Containers[0].Lifecycle
			switch {
			case tc.preStop == 0 && lc != nil && lc.PreStop != nil:
				t.Errorf("preStop rendered with a zero delay: %+v", lc.PreStop)
			case tc.preStop == 0:
			case lc == nil || lc.PreStop == nil || lc.PreStop.Sleep == nil:
				t.Fatalf("no preStop sleep: %+v", lc)
			case lc.PreStop.Sleep.Seconds != tc.preStop || lc.PreStop.Exec != nil || lc.PreStop.HTTPGet != nil:
				t.Errorf("preStop = %+v, want a %d s sleep (the image has no shell)", lc.PreStop, tc.preStop)
			}
		})
	}

	// A grace period shorter than the delay plus the longest call is refused, by the template.
	_, err := Render(Name, testNS, wh(map[string]any{"preStopDelaySeconds": 20, "timeoutSeconds": 30, "terminationGracePeriodSeconds": 49}))
	if err == nil || !strings.Contains(err.Error(), "webhook.terminationGracePeriodSeconds=49 is shorter than") {
		t.Errorf("grace 49 < 20 + 30: err = %v, want the template's refusal", err)
	}
	// And the schema bounds both.
	for _, v := range []struct {
		values map[string]any
		path   string
	}{
		{wh(map[string]any{"preStopDelaySeconds": -1}), "/webhook/preStopDelaySeconds"},
		{wh(map[string]any{"preStopDelaySeconds": "10s"}), "/webhook/preStopDelaySeconds"},
		{wh(map[string]any{"preStopDelaySeconds": 121}), "/webhook/preStopDelaySeconds"},
		{wh(map[string]any{"terminationGracePeriodSeconds": 0}), "/webhook/terminationGracePeriodSeconds"},
		{wh(map[string]any{"terminationGracePeriodSeconds": 1.5}), "/webhook/terminationGracePeriodSeconds"},
	} {
		if _, err := Render(Name, testNS, v.values); err == nil || !strings.Contains(err.Error(), v.path) {
			t.Errorf("%v: err = %v, want a schema refusal at %s", v.values, err, v.path)
		}
	}
}

func certManagerObject(t *testing.T, r *Rendered, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := r.Find(kind, name)
	if o == nil {
		var have []string
		for _, x := range r.Objects {
			if x.GetAPIVersion() == "cert-manager.io/v1" {
				have = append(have, x.GetKind()+"/"+x.GetName())
			}
		}
		t.Fatalf("%s/%s not rendered; cert-manager objects: %v", kind, name, have)
	}
	return o
}

func str(t *testing.T, o *unstructured.Unstructured, path ...string) string {
	t.Helper()
	v, _, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	return s
}

// TestCertManagerChainKeepsTheRoot: with cert-manager and no issuerRef, the self-signed Issuer signs
// only a CA certificate; a CA Issuer made from that CA's Secret signs the serving certificate; and
// cainjector fills the caBundle from the CA. Renewing the serving certificate then changes neither
// the CA nor the caBundle. Before, the serving certificate came from the self-signed Issuer
// directly: each renewal was a new root, and calls failed until cainjector caught up.
func TestCertManagerChainKeepsTheRoot(t *testing.T) {
	r := mustRender(t, mustValuesFile(t, "ci/certmanager-values.yaml"))
	const fn = "ehdb-election-webhook"

	selfSigned := certManagerObject(t, r, "Issuer", fn+"-selfsigned")
	if _, ok, _ := unstructured.NestedMap(selfSigned.Object, "spec", "selfSigned"); !ok {
		t.Errorf("%s is not a selfSigned issuer", selfSigned.GetName())
	}

	ca := certManagerObject(t, r, "Certificate", fn+"-ca")
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Error("the CA Certificate lacks isCA: true")
	}
	if got := str(t, ca, "spec", "issuerRef", "name"); got != selfSigned.GetName() || str(t, ca, "spec", "issuerRef", "kind") != "Issuer" {
		t.Errorf("the CA is issued by %q, want the self-signed Issuer %q", got, selfSigned.GetName())
	}
	if got := str(t, ca, "spec", "privateKey", "rotationPolicy"); got != "Never" {
		t.Errorf("the CA's key rotationPolicy = %q, want Never (a CA renewal keeps the root's key)", got)
	}
	if str(t, ca, "spec", "duration") != "87600h" || str(t, ca, "spec", "renewBefore") != "17520h" {
		t.Errorf("certManager.ca durations not applied: %v", ca.Object["spec"])
	}

	caIssuer := certManagerObject(t, r, "Issuer", fn+"-ca")
	if got := str(t, caIssuer, "spec", "ca", "secretName"); got == "" || got != str(t, ca, "spec", "secretName") {
		t.Errorf("the CA Issuer signs with Secret %q, want the CA Certificate's %q", got, str(t, ca, "spec", "secretName"))
	}

	leaf := certManagerObject(t, r, "Certificate", fn)
	if got := str(t, leaf, "spec", "issuerRef", "name"); got != caIssuer.GetName() {
		t.Errorf("the serving certificate is issued by %q, want the CA Issuer %q (not the self-signed one)", got, caIssuer.GetName())
	}
	if isCA, _, _ := unstructured.NestedBool(leaf.Object, "spec", "isCA"); isCA {
		t.Error("the serving certificate is a CA")
	}
	if str(t, leaf, "spec", "secretName") == str(t, ca, "spec", "secretName") {
		t.Error("the serving certificate and the CA share a Secret")
	}
	if str(t, leaf, "spec", "duration") != "2160h" || str(t, leaf, "spec", "renewBefore") != "360h" {
		t.Errorf("certManager durations not applied to the serving certificate: %v", leaf.Object["spec"])
	}
	// The Deployment mounts the serving certificate's Secret.
	d := typed[appsv1.Deployment](t, r.Find("Deployment", fn))
	if got := d.Spec.Template.Spec.Volumes[0].Secret.SecretName; got != str(t, leaf, "spec", "secretName") {
		t.Errorf("the webhook mounts %q, the serving certificate is in %q", got, str(t, leaf, "spec", "secretName"))
	}
	// cainjector reads the CA's Certificate: the caBundle is the root, whatever the leaf does.
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "ehdb-election"))
	if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != testNS+"/"+ca.GetName() {
		t.Errorf("inject-ca-from = %q, want the CA Certificate %s/%s", got, testNS, ca.GetName())
	}

	// An external issuer: the chart makes no issuer or CA of its own, and the caBundle comes from the
	// serving certificate's Secret (whose ca.crt is that issuer's CA).
	r = mustRender(t, mustValuesFile(t, "ci/certmanager-issuer-values.yaml"))
	if n := len(r.OfKind("Issuer")); n != 0 {
		t.Errorf("issuerRef set: %d Issuers rendered", n)
	}
	certs := r.OfKind("Certificate")
	if len(certs) != 1 || str(t, certs[0], "spec", "issuerRef", "name") != "internal-ca" || str(t, certs[0], "spec", "issuerRef", "kind") != "ClusterIssuer" {
		t.Fatalf("issuerRef set: Certificates %v", certs)
	}
	vwc = typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "ehdb-election"))
	if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != testNS+"/"+fn {
		t.Errorf("issuerRef set: inject-ca-from = %q, want %s/%s", got, testNS, fn)
	}
}
