package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/election/fake"
)

func TestParseExposition(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		contentType string
		valid       *bool
		epoch       *int64
		err         string
	}{
		{
			name: "gauges, as the writer serves them",
			body: "# HELP ehdb_election_epoch e\n# TYPE ehdb_election_epoch gauge\nehdb_election_epoch 7\n" +
				"# HELP ehdb_election_token_valid v\n# TYPE ehdb_election_token_valid gauge\nehdb_election_token_valid 1\n" +
				"# TYPE ehdb_election_errors_total counter\nehdb_election_errors_total{reason=\"forbidden\"} 0\n",
			contentType: "text/plain; version=0.0.4; charset=utf-8",
			valid:       ptr.To(true), epoch: ptr.To[int64](7),
		},
		{
			name:  "untyped (no TYPE lines), no Content-Type",
			body:  "ehdb_election_token_valid 0\nehdb_election_epoch 0\n",
			valid: ptr.To(false), epoch: ptr.To[int64](0),
		},
		{
			name:  "only token_valid: epoch stays unknown",
			body:  "ehdb_election_token_valid 1\n",
			valid: ptr.To(true),
		},
		{name: "empty exposition", body: ""},
		{name: "token_valid out of range", body: "ehdb_election_token_valid 2\n", err: "expected 0 or 1"},
		{name: "fractional epoch", body: "ehdb_election_epoch 1.5\n", err: "whole number"},
		{name: "negative epoch", body: "ehdb_election_epoch -1\n", err: "whole number"},
		{name: "labelled series", body: "ehdb_election_token_valid{a=\"1\"} 1\nehdb_election_token_valid{a=\"2\"} 0\n", err: "2 series"},
		{name: "a counter where a gauge belongs", body: "# TYPE ehdb_election_epoch counter\nehdb_election_epoch 3\n", err: "is a counter"},
		{name: "not an exposition", body: "<html><body>hello</body></html>\n", contentType: "text/html", err: "cannot parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseExposition([]byte(tt.body), tt.contentType)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if !equalPtr(m.TokenValid, tt.valid) || !equalPtr(m.Epoch, tt.epoch) {
				t.Errorf("got valid=%v epoch=%v, want valid=%v epoch=%v", show(m.TokenValid), show(m.Epoch), show(tt.valid), show(tt.epoch))
			}
		})
	}
}

// The protobuf exposition is decoded too (a proxy or a client library may prefer it).
func TestParseExpositionProtobuf(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricEpoch, Help: "e"})
	g.Set(42)
	v := prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricTokenValid, Help: "v"})
	v.Set(1)
	reg.MustRegister(g, v)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ParseExposition(b.Bytes(), string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	if err != nil || !equalPtr(m.Epoch, ptr.To[int64](42)) || !equalPtr(m.TokenValid, ptr.To(true)) {
		t.Fatalf("got %v %v, %v", show(m.TokenValid), show(m.Epoch), err)
	}
}

// fakeAPI is an http.RoundTripper standing in for the API server's pod proxy: it maps a pod's
// proxy path to a handler and records what was asked.
type fakeAPI struct {
	mu       sync.Mutex
	pods     map[string]http.Handler // the proxy to each pod's :9090/metrics, by pod name
	objs     map[string]*corev1.Pod  // GET of the pod objects; absent ones are 404
	requests []*http.Request
}

func (f *fakeAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	const prefix = "/api/v1/namespaces/noetl/pods/"
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	pod, tail, _ := strings.Cut(rest, "/")
	if ok && !strings.Contains(rest, "/") && !strings.Contains(rest, ":") {
		if obj := f.objs[pod]; obj != nil {
			return jsonResponse(200, obj), nil
		}
		return jsonResponse(404, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: 404, Reason: metav1.StatusReasonNotFound, Message: `pods "` + pod + `" not found`, Details: &metav1.StatusDetails{Name: pod, Kind: "pods"}}), nil
	}
	pod, port, _ := strings.Cut(pod, ":")
	h := f.pods[pod]
	if !ok || tail != "proxy/metrics" || port != "9090" || h == nil {
		return nil, errors.New("fakeAPI: unexpected request " + req.URL.String())
	}
	// Serve in a goroutine so that, like a real transport, the round trip ends when the request's
	// context does even if the "pod" never answers.
	done := make(chan *http.Response, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- rec.Result()
	}()
	select {
	case resp := <-done:
		return resp, nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

func jsonResponse(code int, obj any) *http.Response {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	rec.WriteHeader(code)
	json.NewEncoder(rec).Encode(obj)
	return rec.Result()
}

// status answers like the API server does when it refuses: a metav1.Status body.
func status(code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg, Details: details,
		})
	})
}

func text(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		io.WriteString(w, body)
	})
}

// writerMetrics runs a real election (in-memory store) and returns its /metrics handler once it
// holds a valid token: the scrape is tested against exactly what a writer serves.
func writerMetrics(t *testing.T) http.Handler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	e, err := election.Start(ctx, fake.NewLeaseStore(), election.Config{
		Enabled: true, LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second,
		Shard: 0, HasShard: true, Namespace: "noetl",
	}, election.Options{Identity: "writer-0#test", Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !e.Token().Valid {
		if time.Now().After(deadline) {
			t.Fatal("the in-memory election did not acquire its Lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

func TestScrapeRowsThroughPodProxy(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	api := &fakeAPI{pods: map[string]http.Handler{
		"writer-0": writerMetrics(t),
		"writer-1": status(404, metav1.StatusReasonNotFound, `pods "writer-1" not found`, &metav1.StatusDetails{Name: "writer-1", Kind: "pods"}),
		"writer-2": status(503, metav1.StatusReasonServiceUnavailable, "error trying to reach service: dial tcp 10.0.0.5:9090: connect: connection refused", nil),
		"writer-3": status(403, metav1.StatusReasonForbidden, `pods "writer-3" is forbidden: User "bob" cannot get resource "pods/proxy" in API group "" in the namespace "noetl"`, nil),
		"writer-4": text("# TYPE go_goroutines gauge\ngo_goroutines 12\n"),
		"writer-5": http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }),
		"writer-6": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(404)
			io.WriteString(w, "404 page not found\n")
		}),
	}, objs: map[string]*corev1.Pod{
		"writer-2": {TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "writer-2"},
			Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.5",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
		"writer-5": {TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "writer-5"},
			Status: corev1.PodStatus{Phase: corev1.PodPending}},
	}}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://apiserver.test", Transport: api})
	if err != nil {
		t.Fatal(err)
	}
	rows := []Row{
		{Shard: 0, Holder: "writer-0#test", Pod: "writer-0"},
		{Shard: 1, Holder: "writer-1#a", Pod: "writer-1"},
		{Shard: 2, Holder: "writer-2#b", Pod: "writer-2"},
		{Shard: 3, Holder: "writer-3#c", Pod: "writer-3"},
		{Shard: 4, Holder: "writer-4#d", Pod: "writer-4"},
		{Shard: 5, Holder: "writer-5#e", Pod: "writer-5"},
		{Shard: 6, Holder: "writer-6#f", Pod: "writer-6"},
		{Shard: 7, Holder: "gone#g", Pod: "gone"}, // the fake fails the round trip itself
		{Shard: 8, Holder: "", State: Released},
		{Shard: 9, Holder: "Not_A_Pod#h", Pod: "Not_A_Pod"},
	}
	ScrapeRows(context.Background(), PodProxy{Client: cs.CoreV1().RESTClient()}, "noetl", rows,
		ScrapeOptions{Timeout: 200 * time.Millisecond})

	want := []struct {
		valid *bool
		epoch *int64
		err   string
	}{
		{ptr.To(true), ptr.To[int64](1), ""},
		{nil, nil, "pod writer-1 not found in namespace noetl"},
		{nil, nil, "answered 503: error trying to reach service: dial tcp 10.0.0.5:9090: connect: connection refused (pod is Running, IP 10.0.0.5, Ready)"},
		{nil, nil, `forbidden: the scrape needs get on pods/proxy in namespace noetl`},
		{nil, nil, "no ehdb_election_token_valid or ehdb_election_epoch on :9090/metrics"},
		{nil, nil, "no answer from pod writer-5 within 200ms (pod is Pending, not scheduled, no IP yet)"},
		{nil, nil, "answered 404: the server could not find the requested resource (get pods writer-6:9090)"},
		{nil, nil, "cannot reach the API server"},
		{nil, nil, "released: no holder to scrape"},
		{nil, nil, `holder identity "Not_A_Pod#h" does not name a pod`},
	}
	for i, w := range want {
		s := rows[i].Scrape
		if s == nil {
			t.Errorf("row %d: no scrape outcome", i)
			continue
		}
		if !equalPtr(s.TokenValid, w.valid) || !equalPtr(s.Epoch, w.epoch) {
			t.Errorf("row %d: valid=%v epoch=%v, want valid=%v epoch=%v", i, show(s.TokenValid), show(s.Epoch), show(w.valid), show(w.epoch))
		}
		if (w.err == "") != (s.Err == "") || !strings.Contains(s.Err, w.err) {
			t.Errorf("row %d: err %q, want one containing %q", i, s.Err, w.err)
		}
	}
	if strings.Contains(rows[6].Scrape.Err, "not found in namespace") || strings.Contains(rows[6].Scrape.Err, "(pod is") {
		t.Errorf("a 404 from the pod's own server was reported as a missing pod: %q", rows[6].Scrape.Err)
	}

	// Released rows and non-pod identities cost no request; every scrape asked for the text format;
	// the pod is looked up only to explain a failure it may explain (not a denial, not a missing pod).
	api.mu.Lock()
	defer api.mu.Unlock()
	var proxied int
	var described []string
	for _, r := range api.requests {
		if r.Method != http.MethodGet {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if strings.HasSuffix(r.URL.Path, ":9090/proxy/metrics") {
			proxied++
			if !strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
				t.Errorf("request %s Accept=%q", r.URL.Path, r.Header.Get("Accept"))
			}
		} else {
			described = append(described, strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/noetl/pods/"))
		}
	}
	sort.Strings(described)
	if proxied != 8 || strings.Join(described, ",") != "writer-2,writer-5,writer-6" {
		t.Errorf("%d scrapes (want 8), pods looked up %v (want writer-2, writer-5, writer-6)", proxied, described)
	}
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func show[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}
