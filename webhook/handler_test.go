package webhook_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

func newServer(t *testing.T, r webhook.Resolver) (*httptest.Server, *wt.Recorder) {
	t.Helper()
	m := &wt.Recorder{}
	h := &webhook.Handler{Resolver: r, Policy: webhook.Policy{RequireLiveLease: true}, Clock: clocktesting.NewFakePassiveClock(now), Metrics: m}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	return srv, m
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

var stsKind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}

func TestHandlerAnswersOverHTTP(t *testing.T) {
	cluster := goodCluster()
	srv, reg := newServer(t, cluster)

	// A compliant writer: allowed, with the response typed as v1 and the UID echoed.
	code, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil))
	if code != 200 || out.Response == nil || !out.Response.Allowed || out.Response.UID != "8f8a0c4c-0000-4000-8000-000000000001" || out.APIVersion != "admission.k8s.io/v1" {
		t.Fatalf("compliant writer: %d %s", code, raw)
	}
	// The bare writer armed: denied with every requirement in the message, 403.
	code, out, raw = post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, stsKind, sts(wt.Armed()), nil))
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
	_, out, raw = post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil))
	if out.Response == nil || !out.Response.Allowed || len(out.Response.Warnings) != 1 {
		t.Fatalf("warning expected: %s", raw)
	}
	// An unarmed update costs no lookup.
	before := cluster.Lookups()
	_, out, raw = post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Update, stsKind, sts(), sts()))
	if out.Response == nil || !out.Response.Allowed || cluster.Lookups() != before {
		t.Fatalf("unarmed update: lookups %d→%d: %s", before, cluster.Lookups(), raw)
	}

	if got := counter(reg, "StatefulSet", "allowed", "requirements_met"); got != 2 {
		t.Errorf("allowed/requirements_met = %v, want 2", got)
	}
	if got := counter(reg, "StatefulSet", "denied", "election_disabled"); got != 1 {
		t.Errorf("denied/election_disabled = %v, want 1", got)
	}
	if got := counter(reg, "StatefulSet", "allowed", "unarmed"); got != 1 {
		t.Errorf("allowed/unarmed = %v, want 1", got)
	}
}

// counter is the decisions rec recorded with kind, result and reason.
func counter(rec *wt.Recorder, kind, result, reason string) int {
	return rec.Count(map[string]string{"kind": kind, "result": result, "reason": reason})
}

func TestHandlerRefusesMalformedReviews(t *testing.T) {
	srv, _ := newServer(t, goodCluster())
	good := wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil)
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
		// The fourteenth red team's 7 MB uids, echoed in the answer and copied into the logs.
		{"a uid longer than the API server's", "application/json", longField(t, good, "uid", 129), 400, false, ""},
		{"a name longer than any object's", "application/json", longField(t, good, "name", 254), 400, false, ""},
		// Red team L: a refusal that echoed a 60 KB Content-Type four-fold (%q of 0xff bytes) to
		// a client that read none of it held the connection, its header and the message, for
		// the 35 s write timeout; 700 of them took the webhook to 641 MiB.
		{"a content type of 60 KB", strings.Repeat("\xff", 60000), good, 400, false, ""},
		{"an apiVersion of 1 MB", "application/json", []byte(`{"apiVersion":"` + strings.Repeat("<", 1<<20) + `","kind":"AdmissionReview"}`), 400, false, ""},
		{"a kind of 1 MB", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"` + strings.Repeat("\\u00ff", 1<<18) + `"}`), 400, false, ""},
		{"empty request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), 200, true, "no request"},
		{"no object", "application/json", wt.Review(t, admissionv1.Create, stsKind, nil, nil), 200, true, "no object"},
		{"object of another kind", "application/json", wt.Review(t, admissionv1.Create, stsKind, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}}, nil), 200, true, "request says"},
		{"object not an object", "application/json", bytes.Replace(good, []byte(`"replicas":1`), []byte(`"replicas":"one"`), 1), 200, true, "decoding StatefulSet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, raw := post(t, srv.URL, c.contentType, c.body)
			if code != c.wantHTTP {
				t.Fatalf("HTTP %d, want %d: %s", code, c.wantHTTP, raw)
			}
			if len(raw) > maxRefusal {
				t.Fatalf("an answer of %d bytes to a malformed review: it echoes what the client sent (%.200s...)", len(raw), raw)
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

// maxRefusal bounds the answer to a malformed review: none carries more than a few hundred
// bytes of what its client sent.
const maxRefusal = 2 << 10

// longField is review with its request's field set to n bytes.
func longField(t *testing.T, review []byte, field string, n int) []byte {
	t.Helper()
	var rv map[string]any
	if err := json.Unmarshal(review, &rv); err != nil {
		t.Fatal(err)
	}
	rv["request"].(map[string]any)[field] = strings.Repeat("<", n)
	out, err := json.Marshal(rv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHandlerHasNoOpinionOnOtherKinds(t *testing.T) {
	cluster := goodCluster()
	srv, reg := newServer(t, cluster)
	cm := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, cm, sts(wt.Armed()), nil))
	if out.Response == nil || !out.Response.Allowed {
		t.Fatalf("unknown kind refused: %s", raw)
	}
	// A StatefulSet's scale subresource and a DELETE cannot arm anything either.
	body := wt.Review(t, admissionv1.Delete, stsKind, nil, sts(wt.Armed()))
	if _, out, raw = post(t, srv.URL, "application/json", body); out.Response == nil || !out.Response.Allowed {
		t.Fatalf("delete refused: %s", raw)
	}
	if cluster.Lookups() != 0 {
		t.Fatalf("lookups %d, want 0", cluster.Lookups())
	}
	if got := counter(reg, webhook.KindOther, "allowed", "no_opinion"); got != 1 {
		t.Errorf("other/allowed/no_opinion = %v, want 1", got)
	}
}

// An answer carries a bounded message and bounded warnings, whatever the object quotes: a
// review is answered to whoever sends it, and an answer of megabytes to a client that reads none
// of it holds its encoding on the connection until its write times out (red team L's refusals;
// here the guard's own quoting of an armed value of "enforce" and a megabyte of spaces).
func TestAnswersAreBounded(t *testing.T) {
	srv, _ := newServer(t, goodCluster())
	long := "enforce" + strings.Repeat(" ", 1<<20)
	for _, c := range []struct {
		name string
		obj  *appsv1.StatefulSet
	}{
		{"an armed value quoted in a refusal", sts(wt.SetEnv(webhook.EnvFencing, long), wt.ServiceAccount(wt.WriterSA))},
		{"an armed value quoted in an admission", sts(wt.SetEnv(webhook.EnvFencing, long), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA))},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, stsKind, c.obj, nil))
			if code != 200 || out.Response == nil {
				t.Fatalf("HTTP %d: %.300s", code, raw)
			}
			if len(raw) > 64<<10 {
				t.Fatalf("an answer of %d bytes (allowed %v): %.300s", len(raw), out.Response.Allowed, raw)
			}
			t.Logf("allowed %v, an answer of %d bytes", out.Response.Allowed, len(raw))
		})
	}
}
