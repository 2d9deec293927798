package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/testcluster"
	"github.com/noetl/ehdb-election/webhook"
)

func TestFlagsMatchTheContract(t *testing.T) {
	o, err := parseFlags(nil, func(k string) string { return map[string]string{"POD_NAMESPACE": "ehdb-system"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{namespace: "ehdb-system", webhookPort: 9443, certDir: "/certs", certRotation: true,
		certSecretName: "ehdb-election-webhook-tls", serviceName: "ehdb-election-webhook", webhookConfigName: "ehdb-election",
		metricsAddr: ":8080", probeAddr: ":8081", requireLiveLease: true, cacheAllowedTTL: 10 * time.Second, watchLeases: true, logLevel: "info", shutdownTimeout: 30 * time.Second}
	if o.kubeconfig != "" || o.webhookHost != "" || o.namespace != want.namespace || o.webhookPort != want.webhookPort ||
		o.certDir != want.certDir || o.certRotation != want.certRotation || o.certSecretName != want.certSecretName ||
		o.serviceName != want.serviceName || o.webhookConfigName != want.webhookConfigName || o.metricsAddr != want.metricsAddr ||
		o.probeAddr != want.probeAddr || o.requireLiveLease != want.requireLiveLease || o.cacheAllowedTTL != want.cacheAllowedTTL || o.watchLeases != want.watchLeases || o.logLevel != want.logLevel {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
	o, err = parseFlags([]string{"--kubeconfig=/k", "--namespace=n", "--webhook-port=10250", "--webhook-host=127.0.0.1",
		"--cert-dir=/c", "--cert-rotation=false", "--cert-secret-name=s", "--service-name=svc", "--webhook-config-name=w",
		"--metrics-bind-address=:1", "--health-probe-bind-address=:2", "--require-live-lease=false", "--cache-allowed-ttl=0s", "--watch-leases=false", "--log-level=debug"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeconfig != "/k" || o.namespace != "n" || o.webhookPort != 10250 || o.webhookHost != "127.0.0.1" || o.certDir != "/c" ||
		o.certRotation || o.certSecretName != "s" || o.serviceName != "svc" || o.webhookConfigName != "w" || o.metricsAddr != ":1" ||
		o.probeAddr != ":2" || o.requireLiveLease || o.cacheAllowedTTL != 0 || o.watchLeases || o.logLevel != "debug" {
		t.Fatalf("parsed %+v", o)
	}
	// The guard's scope: its own namespace by default, a list, or every namespace.
	for args, want := range map[string][]string{
		"":                      {"ehdb-system"},
		"team-a, team-b,team-a": {"team-a", "team-b"},
		"*":                     {"*"},
	} {
		o, err := parseFlags([]string{"--guarded-namespaces=" + args}, func(k string) string { return map[string]string{"POD_NAMESPACE": "ehdb-system"}[k] }, io.Discard)
		if err != nil || !slices.Equal(o.guardedNamespaces, want) || o.maxInFlight != 32 || o.maxShards != 128 {
			t.Errorf("--guarded-namespaces=%q: %v %v (in flight %d, shards %d), want %v", args, o.guardedNamespaces, err, o.maxInFlight, o.maxShards, want)
		}
	}
	// Who writes the cluster's CA: the publisher's identities by default, or the ones named.
	for args, want := range map[string][]string{
		"": webhook.DefaultRootCAPublishers(),
		"--root-ca-publishers= system:ca-sync , system:kcm": {"system:ca-sync", "system:kcm"},
	} {
		var argv []string
		if args != "" {
			argv = []string{args}
		}
		o, err := parseFlags(argv, func(k string) string { return map[string]string{"POD_NAMESPACE": "ehdb-system"}[k] }, io.Discard)
		if err != nil || !slices.Equal(o.rootCAPublishers, want) {
			t.Errorf("%q: root CA publishers %q %v, want %q", args, o.rootCAPublishers, err, want)
		}
	}
	if got := guardedScopes([]string{"a", "*"}); !slices.Equal(got, []string{""}) {
		t.Errorf("guardedScopes with * = %q, want one cluster-wide scope", got)
	}
	for _, bad := range [][]string{
		{"--cert-rotation=false"}, // no namespace, so nothing guarded
		{"--namespace=n", "--max-in-flight=0"},
		{"--namespace=n", "--max-shards=0"},
		{"--cert-rotation=true"}, // no namespace
		{"--namespace=n", "--log-level=loud"},
		{"--namespace=n", "--webhook-port=0"},
		{"--namespace=n", "--root-ca-publishers=,"}, // no one could write the CA
		{"--namespace=n", "extra"},
		{"--no-such-flag"},
	} {
		if _, err := parseFlags(bad, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRestrictToNamesSelectsListAndWatchOnly(t *testing.T) {
	var got []*url.URL
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	cfg := restrictToNames(&rest.Config{Host: srv.URL}, map[string]string{"/api/v1/namespaces/n/secrets": "tls"})
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"/api/v1/namespaces/n/secrets?watch=true&resourceVersion=1",
		"/api/v1/namespaces/n/secrets?fieldSelector=type%3DOpaque",
		"/api/v1/namespaces/n/secrets/tls",
		"/api/v1/namespaces/other/secrets",
	} {
		resp, err := client.Get(srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"metadata.name=tls", "type=Opaque,metadata.name=tls", "", ""}
	for i, u := range got {
		if s := u.Query().Get("fieldSelector"); s != want[i] {
			t.Errorf("%s: fieldSelector %q, want %q", u, s, want[i])
		}
	}
	if got[0].Query().Get("watch") != "true" {
		t.Errorf("other parameters lost: %s", got[0])
	}
}

func TestCertificatesLoadLateAndReload(t *testing.T) {
	dir := t.TempDir()
	l := newCertLoader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), testr.New(t))
	l.poll = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loader: %v", err)
		}
	}()
	if _, err := l.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before any file exists")
	}
	served := func() []byte {
		c, err := l.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			return nil
		}
		return c.Certificate[0]
	}
	servingCert(t, dir)
	first := leaf(t, filepath.Join(dir, "tls.crt"))
	eventually(t, 10*time.Second, "the first certificate", func() error {
		if !bytes.Equal(served(), first) {
			return errNotYet
		}
		return nil
	})
	servingCert(t, dir) // a rotation: new CA, new key pair, swapped in place
	second := leaf(t, filepath.Join(dir, "tls.crt"))
	eventually(t, 30*time.Second, "the rotated certificate", func() error {
		if !bytes.Equal(served(), second) {
			return errNotYet
		}
		return nil
	})
}

func leaf(t *testing.T, path string) []byte {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, filepath.Join(filepath.Dir(path), "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x509.ParseCertificate(pair.Certificate[0]); err != nil {
		t.Fatal(err)
	}
	return pair.Certificate[0]
}

// TestReviewsTrustOnlyHealthyReaderWatches: a ConfigMap or account review is answered from the
// reader watches only while each of them in the namespace has synced and works. The third red
// team took the webhook's pods reads; its pods watch broke, and a ConfigMap edit disarming an
// armed bare Pod was admitted as read by no one.
func TestReviewsTrustOnlyHealthyReaderWatches(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	w, err := newWatches(c.Clientset(), nil, []string{ns}, false, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	readers := healthyReaders{w}
	if _, err := readers.ReadersOf(ns, "flags"); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("before the watches synced: %v, want could not tell", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.run(ctx) }()
	eventually(t, 10*time.Second, "the reader watches synced", func() error {
		_, err := readers.ReadersOf(ns, "flags")
		return err
	})
	if _, err := readers.UsersOf(webhook.AccountSelector{Namespace: ns, Name: "writer"}); err != nil {
		t.Fatalf("synced, UsersOf: %v", err)
	}
	w.byKind["pods"][ns].health.note(errors.New(`pods is forbidden: User "system:serviceaccount:noetl:ehdb-election-webhook" cannot watch resource "pods"`))
	if _, err := readers.ReadersOf(ns, "flags"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the pods watch broken: %v, want could not tell", err)
	}
	if _, err := readers.UsersOf(webhook.AccountSelector{Namespace: ns, Name: "writer"}); err == nil {
		t.Fatal("the pods watch broken: UsersOf answered")
	}
}

// An owner the watch holds at replicas 0 exempts no child that runs pods (webhook.unjudgedOwner), but
// the Deployment controller scales its ReplicaSet up right after the Deployment itself was scaled
// (and judged): a watch a moment behind would refuse that ReplicaSet. So a cached owner that runs
// no pods is read again. Here the watch is stopped after it synced, so its copy stays at 0.
func TestAnIdleOwnerIsReadAgain(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	ctx := context.Background()
	deps := c.Clientset().AppsV1().Deployments(ns)
	labels := map[string]string{"app": "w"}
	dep, err := deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWatches(c.Clientset(), nil, []string{ns}, false, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { _ = w.run(runCtx); close(stopped) }()
	ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: dep.UID, Controller: ptr.To(true)}
	eventually(t, 10*time.Second, "the watch holds the Deployment", func() error {
		if _, found, _ := w.Workload("deployments", ns, "w"); !found {
			return errors.New("not yet")
		}
		return nil
	})
	// The watch stops for good only once run returns (an event in flight would still reach it);
	// then its cache is made to hold the Deployment as it was before the scale-up, whatever the
	// watch saw while stopping, so the cache is stale for certain.
	stop()
	<-stopped
	if _, err := deps.UpdateScale(ctx, "w", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns},
		Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	x, _ := w.watchOf("deployments", ns)
	if err := x.informer.GetStore().Update(dep); err != nil {
		t.Fatal(err)
	}
	if cached, found, _ := w.Workload("deployments", ns, "w"); !found || cached.NoPods == "" {
		t.Fatalf("the cache should hold the Deployment at replicas 0: %+v", cached)
	}
	owner, found, known := w.Owner(ns, ref)
	if !found || !known || owner.NoPods != "" || owner.Replicas != 1 {
		t.Fatalf("Owner = %+v, found=%v known=%v; want the Deployment as the API server holds it now (replicas 1)", owner, found, known)
	}
}

func TestSoftMemoryLimitFollowsTheContainers(t *testing.T) {
	files := map[string]string{}
	read := func(f string) ([]byte, error) {
		if v, ok := files[f]; ok {
			return []byte(v), nil
		}
		return nil, os.ErrNotExist
	}
	noEnv := func(string) string { return "" }
	reserve := socketReserve(defaultMaxConnections) // 30 MiB at the default cap
	for _, tc := range []struct {
		name  string
		files map[string]string
		env   func(string) string
		want  int64
	}{
		{"cgroup v2, 128Mi", map[string]string{"/v2": "134217728\n"}, noEnv, 134217728/10*9 - reserve},
		{"cgroup v2, no limit", map[string]string{"/v2": "max\n"}, noEnv, 0},
		{"cgroup v1, 128Mi", map[string]string{"/v1": "134217728\n"}, noEnv, 134217728/10*9 - reserve},
		// The kernel's buffers for more connections than the limit can hold: the heap keeps half.
		{"a reserve past the limit", map[string]string{"/v2": "67108864\n"}, noEnv, 67108864 / 2},
		{"cgroup v1, no limit", map[string]string{"/v1": "9223372036854771712\n"}, noEnv, 0},
		{"no cgroup files", nil, noEnv, 0},
		{"GOMEMLIMIT set: the operator's", map[string]string{"/v2": "134217728"}, func(string) string { return "100MiB" }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(files)
			maps.Copy(files, tc.files)
			if got := softMemoryLimit(tc.env, read, []string{"/v2", "/v1"}, reserve); got != tc.want {
				t.Fatalf("soft limit %d, want %d", got, tc.want)
			}
		})
	}
}

// The RBAC watches only count changes: their caches keep no annotations, labels or
// managedFields, which a namespace admin may make 256 KiB on every Role, RoleBinding and
// ServiceAccount (the watches kept them whole before).
func TestTheRBACWatchesKeepOnlyIdentities(t *testing.T) {
	in := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: metav1.ObjectMeta{
		Name: "r", Namespace: "noetl", UID: "u", ResourceVersion: "7", Annotations: map[string]string{"big": strings.Repeat("x", 256<<10)},
		Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := identityOnly(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Size() > 256 || m.Name != "r" || m.Namespace != "noetl" || m.UID != "u" || m.ResourceVersion != "7" || m.Kind != "Role" {
		t.Errorf("kept %d bytes: %+v", m.Size(), m.ObjectMeta)
	}
}

// The Lease watches keep a shard Lease's spec and nothing of any other Lease but its identity:
// the order check reads only shard Leases' specs, and a namespace admin makes other Leases as
// large as she likes.
func TestTheLeaseWatchesKeepOnlyShardSpecs(t *testing.T) {
	big := map[string]string{"big": strings.Repeat("x", 256<<10)}
	holder := strings.Repeat("h", 1<<20)
	for _, tc := range []struct {
		name     string
		keepSpec bool
	}{{"ehdb-shard-0000002a", true}, {"other", false}, {"ehdb-shard-2a", false}} {
		in := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "noetl", ResourceVersion: "3", Annotations: big, Labels: map[string]string{"a": "b"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
		out, err := shardLeasesOnly(in)
		if err != nil {
			t.Fatal(err)
		}
		l := out.(*coordinationv1.Lease)
		if l.Name != tc.name || l.ResourceVersion != "3" || len(l.Annotations) != 0 || len(l.Labels) != 0 || (l.Spec.HolderIdentity != nil) != tc.keepSpec {
			t.Errorf("%s: kept %d bytes, spec kept %v, want %v", tc.name, l.Size(), l.Spec.HolderIdentity != nil, tc.keepSpec)
		}
	}
}
