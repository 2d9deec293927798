package status

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeServer is a loopback HTTP server answering the few API calls the command makes, so Run is
// tested whole — flags, kubeconfig loading, paging, errors — with an injected clock. The real API
// server is exercised by the integration test in cmd/ehdb-election.
type fakeServer struct {
	*httptest.Server
	mu     sync.Mutex
	paths  []string
	pages  map[string][]coordinationv1.Lease // by namespace; served two per page
	namesp map[string]bool                   // namespaces that exist
	fail   int                               // when set, the lease list answers this status
	// date, when set, is the server's clock: each answer's Date header. Unset, answers carry no
	// Date header (the client then has only its own clock).
	date func() time.Time
	// headers are the identity headers of each request, in order.
	headers []http.Header
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{pages: map[string][]coordinationv1.Lease{}, namesp: map[string]bool{}}
	// TLS: client-go sends credentials (--token, the kubeconfig's token) only over TLS.
	f.Server = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.URL.RequestURI())
	h := http.Header{}
	for _, k := range []string{"Authorization", "Impersonate-User", "Impersonate-Group"} {
		if v, ok := r.Header[k]; ok {
			h[k] = v
		}
	}
	f.headers = append(f.headers, h)
	if f.date != nil {
		w.Header().Set("Date", f.date().UTC().Format(http.TimeFormat))
	} else {
		w.Header()["Date"] = nil // net/http would add the real clock's
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	allNS := len(parts) == 4 && parts[0] == "apis" && parts[1] == "coordination.k8s.io" && parts[3] == "leases"
	switch {
	case allNS || len(parts) == 6 && parts[0] == "apis" && parts[1] == "coordination.k8s.io" && parts[5] == "leases":
		var ns string
		var all []coordinationv1.Lease
		if allNS {
			for _, n := range slices.Sorted(maps.Keys(f.pages)) {
				for _, l := range f.pages[n] {
					l.Namespace = n
					all = append(all, l)
				}
			}
		} else {
			ns = parts[4]
			for _, l := range f.pages[ns] {
				l.Namespace = ns
				all = append(all, l)
			}
		}
		if f.fail != 0 {
			// What the API server answers, for each failure the command tells apart.
			st := map[int]metav1.Status{
				401: {Reason: metav1.StatusReasonUnauthorized, Message: "Unauthorized"},
				403: {Reason: metav1.StatusReasonForbidden, Message: forbiddenMessage(ns)},
				500: {Reason: metav1.StatusReasonInternalError, Message: "Internal error occurred: etcdserver: request timed out"},
			}[f.fail]
			st.TypeMeta, st.Status, st.Code = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, metav1.StatusFailure, int32(f.fail)
			w.WriteHeader(f.fail)
			enc.Encode(st)
			return
		}
		start := 0
		if c := r.URL.Query().Get("continue"); c != "" {
			start = len(c) // the token is just a string of that many characters
		}
		end := min(start+2, len(all))
		list := coordinationv1.LeaseList{TypeMeta: metav1.TypeMeta{Kind: "LeaseList", APIVersion: "coordination.k8s.io/v1"}, Items: all[start:end]}
		if end < len(all) {
			list.Continue = strings.Repeat("c", end)
		}
		enc.Encode(list)
	case len(parts) == 4 && parts[0] == "api" && parts[2] == "namespaces":
		if !f.namesp[parts[3]] {
			w.WriteHeader(404)
			enc.Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
				Message: `namespaces "` + parts[3] + `" not found`, Details: &metav1.StatusDetails{Name: parts[3], Kind: "namespaces"}})
			return
		}
		enc.Encode(corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: parts[3]}})
	default:
		w.WriteHeader(404)
	}
}

// kubeconfig writes a kubeconfig of the fake server (see kubeconfig).
func (f *fakeServer) kubeconfig(t *testing.T) string {
	t.Helper()
	return kubeconfig(t, f.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw}))
}

// kubeconfig writes a kubeconfig with two contexts: "main" (namespace noetl, current) and
// "other" (namespace other), both pointing at server, whose CA is ca (if any), user "u" with
// token "t".
func kubeconfig(t *testing.T, server string, ca ...[]byte) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	if len(ca) > 0 {
		kc.Clusters["c"].CertificateAuthorityData = ca[0]
	}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["main"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "noetl"}
	kc.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "other"}
	kc.CurrentContext = "main"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// isolate keeps the machine's own kubeconfig and in-cluster environment out of a test.
func isolate(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func runStatus(t *testing.T, now time.Time, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &out, &errOut, Options{Clock: clocktesting.NewFakePassiveClock(now)})
	return code, out.String(), errOut.String()
}

func TestRunLivenessAtTheBoundary(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15)),
		lease("kube-scheduler", "x", 1, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000001", "", 4, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000002", "writer-2#b", 1, d(-time.Minute), ptr.To[int32](15)),
		lease("ehdb-shard-nothex00", "y#z", 1, d(0), ptr.To[int32](15)),
	}
	kc := f.kubeconfig(t)

	states := func(now time.Time) []string {
		code, out, errOut := runStatus(t, now, "--kubeconfig", kc, "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
		var doc struct {
			Namespace string
			Leases    []struct{ Name, State string }
			Ignored   []struct{ Name string }
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if doc.Namespace != "noetl" || len(doc.Ignored) != 1 || doc.Ignored[0].Name != "ehdb-shard-nothex00" {
			t.Errorf("namespace %q, ignored %+v", doc.Namespace, doc.Ignored)
		}
		var s []string
		for _, l := range doc.Leases {
			s = append(s, l.Name+"="+l.State)
		}
		return s
	}
	at := strings.Join(states(t0.Add(15*time.Second)), " ")
	if want := "ehdb-shard-00000000=live ehdb-shard-00000001=released ehdb-shard-00000002=expired"; at != want {
		t.Errorf("at renewTime+duration: %s, want %s", at, want)
	}
	after := strings.Join(states(t0.Add(15*time.Second+time.Microsecond)), " ")
	if want := "ehdb-shard-00000000=expired ehdb-shard-00000001=released ehdb-shard-00000002=expired"; after != want {
		t.Errorf("just after: %s, want %s", after, want)
	}

	// The five Leases came in three pages; the namespace was the context's.
	f.mu.Lock()
	defer f.mu.Unlock()
	var lists int
	for _, p := range f.paths {
		if strings.HasPrefix(p, "/apis/coordination.k8s.io/v1/namespaces/noetl/leases?") {
			lists++
		}
	}
	if lists != 6 {
		t.Errorf("%d list calls for two runs, want 6 (three pages each): %v", lists, f.paths)
	}
}

func TestRunTable(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-bad", "y#z", 1, d(0), ptr.To[int32](15))}
	code, out, errOut := runStatus(t, t0.Add(5*time.Second), "--kubeconfig", f.kubeconfig(t))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "SHARD   HOLDER       EPOCH   RENEWED    EXPIRES   STATE\n0       writer-0#a   2       5.0s ago   in 10s    live\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errOut, "warning: ignoring Lease ehdb-shard-bad") {
		t.Errorf("stderr %q lacks the ignored Lease", errOut)
	}
}

// The namespace and context are chosen exactly as kubectl does: -n over the context's namespace,
// --context over current-context, $KUBECONFIG when --kubeconfig is absent.
func TestRunKubeconfigLikeKubectl(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	kc := f.kubeconfig(t)
	f.namesp["noetl"], f.namesp["other"], f.namesp["ns3"] = true, true, true
	tests := []struct {
		name   string
		env    string
		args   []string
		wantNS string
	}{
		{"current context's namespace", "", []string{"--kubeconfig", kc}, "noetl"},
		{"--context", "", []string{"--kubeconfig", kc, "--context", "other"}, "other"},
		{"-n wins", "", []string{"--kubeconfig", kc, "--context", "other", "-n", "ns3"}, "ns3"},
		{"--namespace=", "", []string{"--kubeconfig", kc, "--namespace=ns3"}, "ns3"},
		{"$KUBECONFIG", kc, []string{"-o", "json"}, "noetl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			f.mu.Lock()
			f.paths = nil
			f.mu.Unlock()
			code, _, errOut := runStatus(t, t0, tt.args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			f.mu.Lock()
			first := f.paths[0]
			f.mu.Unlock()
			if want := "/apis/coordination.k8s.io/v1/namespaces/" + tt.wantNS + "/leases?"; !strings.HasPrefix(first, want) {
				t.Errorf("first request %s, want a list in namespace %s", first, tt.wantNS)
			}
			if strings.Contains(strings.Join(tt.args, " "), "json") {
				return
			}
			if !strings.Contains(errOut, "No ehdb-shard-* Leases found in namespace "+tt.wantNS) {
				t.Errorf("stderr %q: want the no-leases message for %s", errOut, tt.wantNS)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	kc := f.kubeconfig(t)

	// A port nothing listens on: take one from the kernel and give it back.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	deadKC := kubeconfig(t, dead)

	tests := []struct {
		name  string
		fail  int
		args  []string
		code  int
		want  []string
		empty bool // stdout must be empty
	}{
		{name: "unreachable", args: []string{"--kubeconfig", deadKC}, code: ExitError,
			want: []string{"cannot reach the API server at " + dead + ": ", "connection refused"}},
		{name: "forbidden", fail: 403, args: []string{"--kubeconfig", kc}, code: ExitDenied,
			want: []string{"forbidden", `verb "list" on resource "leases"`, "coordination.k8s.io", "namespace noetl", "kubectl create role", "--user=bob"}},
		{name: "unauthorized", fail: 401, args: []string{"--kubeconfig", kc}, code: ExitDenied,
			want: []string{"rejected the kubeconfig's credentials (401 Unauthorized)", f.URL}},
		{name: "server error", fail: 500, args: []string{"--kubeconfig", kc, "-o", "json"}, code: ExitError,
			want: []string{"listing leases in namespace noetl at " + f.URL + ": Internal error occurred: etcdserver: request timed out"}},
		{name: "no leases, namespace missing", args: []string{"--kubeconfig", kc, "-n", "nope"}, code: ExitOK,
			want: []string{`namespace "nope" does not exist`}},
		{name: "no kubeconfig", args: nil, code: ExitError, want: []string{"no kubeconfig found"}},
		{name: "kubeconfig file missing", args: []string{"--kubeconfig", "/nonexistent/kc"}, code: ExitError,
			want: []string{"loading the kubeconfig", "/nonexistent/kc"}},
		{name: "unknown context", args: []string{"--kubeconfig", kc, "--context", "nope"}, code: ExitError,
			want: []string{"loading the kubeconfig", `"nope"`}},
		{name: "bad output", args: []string{"-o", "xml"}, code: ExitUsage, want: []string{`--output "xml": must be one of table, wide, json, yaml`}},
		{name: "bad request timeout", args: []string{"--kubeconfig", kc, "--request-timeout", "soon"}, code: ExitUsage, want: []string{`--request-timeout "soon"`}},
		{name: "bad namespace", args: []string{"-n", "Not_A_NS"}, code: ExitUsage, want: []string{"is not a namespace name"}},
		{name: "unknown flag", args: []string{"--frobnicate"}, code: ExitUsage, want: []string{"unknown flag: --frobnicate", "status --help"}},
		{name: "stray argument", args: []string{"noetl"}, code: ExitUsage, want: []string{`unexpected argument "noetl"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.fail = tt.fail
			f.mu.Unlock()
			code, out, errOut := runStatus(t, t0, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if tt.code != ExitOK && out != "" {
				t.Errorf("stdout on failure: %q", out)
			}
		})
	}
}

func TestSubjectFlag(t *testing.T) {
	for msg, want := range map[string]string{
		`leases.coordination.k8s.io is forbidden: User "system:serviceaccount:noetl:ops" cannot list resource "leases"`: "--serviceaccount=noetl:ops",
		`leases.coordination.k8s.io is forbidden: User "alice@example.com" cannot list resource "leases"`:               "--user=alice@example.com",
		"forbidden": "--user=<you>",
	} {
		if got := subjectFlag(msg); got != want {
			t.Errorf("subjectFlag(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestRunHelp(t *testing.T) {
	code, out, errOut := runStatus(t, t0, "--help")
	if code != ExitOK || !strings.Contains(out, "--scrape") || !strings.Contains(out, "-n, --namespace") || errOut != "" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// forbiddenMessage is the API server's denial of bob's list, in a namespace or ("") cluster-wide.
func forbiddenMessage(ns string) string {
	if ns == "" {
		return `leases.coordination.k8s.io is forbidden: User "bob" cannot list resource "leases" in API group "coordination.k8s.io" at the cluster scope`
	}
	return `leases.coordination.k8s.io is forbidden: User "bob" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "` + ns + `"`
}
