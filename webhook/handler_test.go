package webhook_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/metrics"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

func newServer(t *testing.T, r webhook.Resolver) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := &webhook.Handler{Resolver: r, Policy: webhook.Policy{RequireLiveLease: true}, Clock: clocktesting.NewFakePassiveClock(now), Metrics: m}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	return srv, reg
}

func post(t *testing.T, url, contentType string, body []byte) (int, admissionv1.AdmissionReview, string) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

func review(t testing.TB, op admissionv1.Operation, kind metav1.GroupVersionKind, obj, old runtime.Object) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID: "8f8a0c4c-0000-4000-8000-000000000001", Kind: kind, Operation: op, Namespace: ns, Name: wt.WriterName,
		DryRun: ptr.To(false),
	}
	if obj != nil {
		req.Object = runtime.RawExtension{Object: obj}
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Object: old}
	}
	raw, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

var stsKind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}

func TestHandlerAnswersOverHTTP(t *testing.T) {
	cluster := goodCluster()
	srv, reg := newServer(t, cluster)

	// A compliant writer: allowed, with the response typed as v1 and the UID echoed.
	code, out, raw := post(t, srv.URL, "application/json", review(t, admissionv1.Create, stsKind, sts(compliant()...), nil))
	if code != 200 || out.Response == nil || !out.Response.Allowed || out.Response.UID != "8f8a0c4c-0000-4000-8000-000000000001" || out.APIVersion != "admission.k8s.io/v1" {
		t.Fatalf("compliant writer: %d %s", code, raw)
	}
	// The bare writer armed: denied with every requirement in the message, 403.
	code, out, raw = post(t, srv.URL, "application/json", review(t, admissionv1.Create, stsKind, sts(wt.Armed()), nil))
	if code != 200 || out.Response == nil || out.Response.Allowed || out.Response.Result.Code != 403 {
		t.Fatalf("armed bare writer: %d %s", code, raw)
	}
	for _, want := range []string{"NOETL_EHDB_ELECTION is not set", "default ServiceAccount", "Fix:"} {
		if !strings.Contains(out.Response.Result.Message, want) {
			t.Errorf("denial lacks %q: %s", want, out.Response.Result.Message)
		}
	}
	// Warnings travel in the response.
	cluster.Grant(ns, "default", ns, "update")
	_, out, raw = post(t, srv.URL, "application/json", review(t, admissionv1.Create, stsKind, sts(compliant()...), nil))
	if out.Response == nil || !out.Response.Allowed || len(out.Response.Warnings) != 1 {
		t.Fatalf("warning expected: %s", raw)
	}
	// An unarmed update costs no lookup.
	before := cluster.Lookups()
	_, out, raw = post(t, srv.URL, "application/json", review(t, admissionv1.Update, stsKind, sts(), sts()))
	if out.Response == nil || !out.Response.Allowed || cluster.Lookups() != before {
		t.Fatalf("unarmed update: lookups %d→%d: %s", before, cluster.Lookups(), raw)
	}

	if got := testutil.ToFloat64(counter(t, reg, "StatefulSet", "allowed", "requirements_met")); got != 2 {
		t.Errorf("allowed/requirements_met = %v, want 2", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "StatefulSet", "denied", "election_disabled")); got != 1 {
		t.Errorf("denied/election_disabled = %v, want 1", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "StatefulSet", "allowed", "unarmed")); got != 1 {
		t.Errorf("allowed/unarmed = %v, want 1", got)
	}
}

// counter finds one series of ehdb_webhook_decisions_total in reg.
func counter(t *testing.T, reg *prometheus.Registry, kind, result, reason string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ehdb_webhook_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["kind"] == kind && l["result"] == result && l["reason"] == reason {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no series kind=%s result=%s reason=%s", kind, result, reason)
	return nil
}

func TestHandlerRefusesMalformedReviews(t *testing.T) {
	srv, _ := newServer(t, goodCluster())
	good := review(t, admissionv1.Create, stsKind, sts(compliant()...), nil)
	cases := []struct {
		name        string
		contentType string
		body        []byte
		wantHTTP    int  // 400: the request is refused at the HTTP level
		wantDenied  bool // 200 with a denial
		wantMessage string
	}{
		{"not JSON", "application/json", []byte("{\"apiVersion\": "), 400, false, ""},
		{"not an object", "application/json", []byte("[1,2]"), 400, false, ""},
		{"wrong content type", "text/plain", good, 400, false, ""},
		{"empty body", "application/json", nil, 400, false, ""},
		{"wrong version", "application/json", bytes.Replace(good, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v9"), 1), 400, false, ""},
		{"not an AdmissionReview", "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), 400, false, ""},
		{"no request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, false, ""},
		{"null request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`), 400, false, ""},
		{"request not an object", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":7}`), 400, false, ""},
		{"empty request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), 200, true, "no request"},
		{"no object", "application/json", review(t, admissionv1.Create, stsKind, nil, nil), 200, true, "no object"},
		{"object of another kind", "application/json", review(t, admissionv1.Create, stsKind, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}}, nil), 200, true, "request says"},
		{"object not an object", "application/json", bytes.Replace(good, []byte(`"replicas":1`), []byte(`"replicas":"one"`), 1), 200, true, "decoding StatefulSet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, raw := post(t, srv.URL, c.contentType, c.body)
			if code != c.wantHTTP {
				t.Fatalf("HTTP %d, want %d: %s", code, c.wantHTTP, raw)
			}
			if c.wantHTTP != 200 {
				if out.Response != nil || len(raw) == 0 {
					t.Fatalf("want a plain-text reason: %s", raw)
				}
				return
			}
			if out.Response == nil || out.Response.Allowed {
				t.Fatalf("not refused: %s", raw)
			}
			if c.wantDenied && (out.Response.Result == nil || out.Response.Result.Code != 400 || !strings.Contains(out.Response.Result.Message, c.wantMessage)) {
				t.Fatalf("want a 400 denial mentioning %q: %s", c.wantMessage, raw)
			}
		})
	}
}

func TestHandlerHasNoOpinionOnOtherKinds(t *testing.T) {
	cluster := goodCluster()
	srv, reg := newServer(t, cluster)
	cm := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	_, out, raw := post(t, srv.URL, "application/json", review(t, admissionv1.Create, cm, sts(wt.Armed()), nil))
	if out.Response == nil || !out.Response.Allowed {
		t.Fatalf("unknown kind refused: %s", raw)
	}
	// A StatefulSet's scale subresource and a DELETE cannot arm anything either.
	body := review(t, admissionv1.Delete, stsKind, nil, sts(wt.Armed()))
	if _, out, raw = post(t, srv.URL, "application/json", body); out.Response == nil || !out.Response.Allowed {
		t.Fatalf("delete refused: %s", raw)
	}
	if cluster.Lookups() != 0 {
		t.Fatalf("lookups %d, want 0", cluster.Lookups())
	}
	if got := testutil.ToFloat64(counter(t, reg, webhook.KindOther, "allowed", "no_opinion")); got != 1 {
		t.Errorf("other/allowed/no_opinion = %v, want 1", got)
	}
}
