package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
)

// fakeConfigMaps serves ConfigMaps the way the API server does (a whole one, or its metadata
// when asked as PartialObjectMetadata), counting the whole ones sent.
type fakeConfigMaps struct {
	mu     sync.Mutex
	bodies map[string][]byte // by path
	metas  map[string][]byte
	gets   atomic.Int64
}

func (f *fakeConfigMaps) put(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	raw, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := json.Marshal(metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: cm.ObjectMeta})
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/namespaces/" + cm.Namespace + "/configmaps/" + cm.Name
	f.mu.Lock()
	f.bodies[path], f.metas[path] = raw, meta
	f.mu.Unlock()
}

func (f *fakeConfigMaps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	raw, ok := f.bodies[r.URL.Path]
	meta := f.metas[r.URL.Path]
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok || r.Method != http.MethodGet {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		_, _ = w.Write(meta)
		return
	}
	f.gets.Add(1)
	_, _ = w.Write(raw)
}

func bigConfigMap(i, size int, fencing, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: ns, ResourceVersion: version,
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("{\"x\":\"\\\"\"}", 1000)}},
		Data: map[string]string{"blob": strings.Repeat("x", size), webhook.EnvFencing: fencing, "other": `a "quoted" \ value`}}
}

// bigConfigMaps serves n ConfigMaps of size bytes each (one key "blob", and the fencing switch
// off) the way the API server does, counting the GETs of whole ones.
func bigConfigMaps(t *testing.T, n, size int) (*httptest.Server, *fakeConfigMaps) {
	t.Helper()
	f := &fakeConfigMaps{bodies: map[string][]byte{}, metas: map[string][]byte{}}
	for i := range n {
		f.put(t, bigConfigMap(i, size, "shadow", "1"))
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv, f
}

// readerOf is an unarmed Deployment whose only container reads every big ConfigMap with envFrom.
func readerOf(n int) *appsv1.Deployment {
	d := deployment(sts())
	d.Name = "reads-them-all"
	c := &d.Spec.Template.Spec.Containers[0]
	c.Env = nil
	for i := range n {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("big-%d", i)}}})
	}
	return d
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestConfigMapReadsHoldOnlyWhatMatters: reviews of an unarmed Deployment reading 32 ConfigMaps
// of 1 MB, 8 at once (once: 494 MB of RSS, and wrong refusals), are all admitted, the heap grows
// by far less than one review's ConfigMaps, and concurrent reviews share their GETs.
func TestConfigMapReadsHoldOnlyWhatMatters(t *testing.T) {
	const n, size, concurrent = 32, 1 << 20, 8
	api, fake := bigConfigMaps(t, n, size)
	gets := &fake.gets
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := &webhook.Handler{Resolver: webhook.NewAPIResolver(kubeapi.New(cs), 0), Policy: webhook.Policy{RequireLiveLease: true}}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	body := review(t, admissionv1.Create, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, readerOf(n), nil)

	runtime.GC()
	base := heapObjects()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := heapObjects(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	answers := make([]string, concurrent)
	for i := range concurrent {
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"?timeout=30s", "application/json", bytes.NewReader(body))
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			var out admissionv1.AdmissionReview
			if json.NewDecoder(resp.Body).Decode(&out) != nil || out.Response == nil || !out.Response.Allowed {
				answers[i] = fmt.Sprintf("HTTP %d %+v", resp.StatusCode, out.Response)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	for i, a := range answers {
		if a != "" {
			t.Errorf("review %d of an unarmed Deployment reading %d ConfigMaps of %d bytes: %s; want admitted", i, n, size, a)
		}
	}
	extra := int64(peak.Load()) - int64(base)
	t.Logf("%d reviews at once: heap peak %d MiB over %d MiB, %d GETs", concurrent, extra>>20, base>>20, gets.Load())
	if extra > 16<<20 {
		t.Errorf("the heap grew by %d MiB reading ConfigMaps whose relevant keys are a few bytes; want < 16 MiB", extra>>20)
	}
	if g := gets.Load(); g > 2*n {
		t.Errorf("%d GETs for %d reviews of the same %d ConfigMaps at once; want them shared (at most %d)", g, concurrent, n, 2*n)
	}

	// Unchanged, they are not sent whole again; changed, the next review sees the change.
	before := gets.Load()
	if code, allowed, raw := decide(http.DefaultClient, srv.URL, body); code != 200 || !allowed {
		t.Fatalf("the reader again: %d %s", code, raw)
	}
	if g := gets.Load() - before; g != 0 {
		t.Errorf("%d whole ConfigMaps sent again, none of them changed; want 0", g)
	}
	fake.put(t, bigConfigMap(n-1, size, "enforce", "2"))
	if code, allowed, raw := decide(http.DefaultClient, srv.URL, body); code != 200 || allowed {
		t.Fatalf("the reader after its ConfigMap turned enforce: %d allowed=%v %.300s; want refused", code, allowed, raw)
	}
	if g := gets.Load() - before; g != 1 {
		t.Errorf("%d whole ConfigMaps sent after one changed; want 1", g)
	}
}

// TestConfigMapNeedsCoverWhatTheParserReads: every variable election.ParseConfig reads is one the
// guard keeps from a ConfigMap.
func TestConfigMapNeedsCoverWhatTheParserReads(t *testing.T) {
	var read []string
	for _, env := range []map[string]string{{}, {election.EnvShard: "1", election.EnvNamespace: "x"}} {
		election.ParseConfig(func(k string) (string, bool) { read = append(read, k); v, ok := env[k]; return v, ok })
	}
	for _, k := range append(read, webhook.EnvFencing) {
		covered := strings.HasPrefix(k, webhook.GuardReadPrefix)
		for _, n := range webhook.GuardReadNames {
			covered = covered || n == k
		}
		if !covered {
			t.Errorf("election.ParseConfig reads %s, which the guard would not read from a ConfigMap", k)
		}
	}
}

func TestSkimConfigMap(t *testing.T) {
	keepAll := func(string) bool { return true }
	cases := []struct {
		name, in string
		keep     func(string) bool
		want     map[string]string
		wantErr  bool
	}{
		{"escapes", `{"kind":"ConfigMap","metadata":{"name":"a","x":[1,{"y":"}\""}],"n":null},"data":{"a":"\"q\"\\","b":"\u00e9\ud83d\ude00","c\"":"x"}}`, keepAll,
			map[string]string{"a": `"q"\`, "b": "é😀", `c"`: "x"}, false},
		{"filtered", `{"data":{"a":"1","b":"2"},"binaryData":{"a":"AAAA"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "2"}, false},
		{"data null", `{"data":null,"kind":"ConfigMap"}`, keepAll, map[string]string{}, false},
		{"truncated", `{"data":{"a":"1`, keepAll, nil, true},
		{"not JSON", `[`, keepAll, nil, true},
		{"too large", `{"data":{"a":"` + strings.Repeat("x", 100) + `"}}`, keepAll, nil, true},
		{"large but not kept", `{"data":{"a":"` + strings.Repeat("x", 100000) + `","b":"ok"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "ok"}, false},
		{"backslashes across buffers", `{"data":{"a":"` + strings.Repeat(`\\`, 20000) + `\"","b":"ok"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "ok"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := webhook.SkimConfigMap(strings.NewReader(c.in), c.keep, 50)
			if c.name == "large but not kept" || c.name == "backslashes across buffers" {
				got, _, err = webhook.SkimConfigMap(strings.NewReader(c.in), c.keep, 1000)
			}
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %v", err, c.wantErr)
			}
			if !c.wantErr && fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// FuzzSkimConfigMap: wherever client-go's decoder (case-sensitive, sigs.k8s.io/json) decodes a
// ConfigMap, the skimmer keeps the same data.
func FuzzSkimConfigMap(f *testing.F) {
	f.Add([]byte(`{"kind":"ConfigMap","metadata":{"name":"a"},"data":{"a":"1","NOETL_X":"\"\\"}}`))
	f.Add([]byte(`{"data":{"a":"\u00e9","b":"x"},"binaryData":{"c":"AA=="},"immutable":true}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var cm corev1.ConfigMap
		if kjson.UnmarshalCaseSensitivePreserveInts(in, &cm) != nil || !json.Valid(in) || bytes.Count(in, []byte(`"data"`)) > 1 {
			return
		}
		got, _, err := webhook.SkimConfigMap(bytes.NewReader(in), func(string) bool { return true }, 1<<20)
		if err != nil {
			t.Fatalf("client-go decodes %q, the skimmer: %v", in, err)
		}
		if len(got) != len(cm.Data) {
			t.Fatalf("%q: skimmer %q, client-go %q", in, got, cm.Data)
		}
		for k, v := range cm.Data {
			if got[k] != v {
				t.Fatalf("%q: key %q: skimmer %q, client-go %q", in, k, got[k], v)
			}
		}
	})
}
