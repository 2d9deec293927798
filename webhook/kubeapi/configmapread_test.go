package kubeapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
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

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
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
	s := wt.ReferenceWriter(ns)
	d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "reads-them-all", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Selector: s.Spec.Selector, Template: s.Spec.Template}}
	c := &d.Spec.Template.Spec.Containers[0]
	c.Env = nil
	for i := range n {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("big-%d", i)}}})
	}
	return d
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
	body := wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, readerOf(n), nil)

	runtime.GC()
	base := wt.HeapObjects()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := wt.HeapObjects(); h > peak.Load() {
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
	if code, allowed, raw := wt.Decide(http.DefaultClient, srv.URL, body); code != 200 || !allowed {
		t.Fatalf("the reader again: %d %s", code, raw)
	}
	if g := gets.Load() - before; g != 0 {
		t.Errorf("%d whole ConfigMaps sent again, none of them changed; want 0", g)
	}
	fake.put(t, bigConfigMap(n-1, size, "enforce", "2"))
	if code, allowed, raw := wt.Decide(http.DefaultClient, srv.URL, body); code != 200 || allowed {
		t.Fatalf("the reader after its ConfigMap turned enforce: %d allowed=%v %.300s; want refused", code, allowed, raw)
	}
	if g := gets.Load() - before; g != 1 {
		t.Errorf("%d whole ConfigMaps sent after one changed; want 1", g)
	}
}
