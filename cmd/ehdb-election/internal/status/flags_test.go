package status

import (
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// A kubectl plugin takes kubectl's connection flags: each one must reach the request, not just parse.
func TestRunKubectlConnectionFlags(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15))}
	kc := f.kubeconfig(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig whose server nothing listens on: --server must replace it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadKC := kubeconfig(t, "http://"+l.Addr().String())
	l.Close()

	tests := []struct {
		name    string
		args    []string
		headers map[string][]string
	}{
		{"--as", []string{"--kubeconfig", kc, "--as", "alice"},
			map[string][]string{"Impersonate-User": {"alice"}, "Authorization": {"Bearer t"}}},
		{"--as and --as-group twice", []string{"--kubeconfig", kc, "--as=alice", "--as-group", "ops", "--as-group=sre"},
			map[string][]string{"Impersonate-User": {"alice"}, "Impersonate-Group": {"ops", "sre"}}},
		{"--token", []string{"--kubeconfig", kc, "--token", "s3cret"},
			map[string][]string{"Authorization": {"Bearer s3cret"}}},
		{"-s and --certificate-authority", []string{"--kubeconfig", deadKC, "-s", f.URL, "--certificate-authority", caFile},
			map[string][]string{"Authorization": {"Bearer t"}}},
		{"--server without a kubeconfig", []string{"--server", f.URL, "--insecure-skip-tls-verify", "--token", "x", "-n", "noetl"},
			map[string][]string{"Authorization": {"Bearer x"}}},
		{"--user and --cluster", []string{"--kubeconfig", deadKC, "--cluster", "c", "--user", "u", "--server", f.URL, "--certificate-authority", caFile},
			map[string][]string{"Authorization": {"Bearer t"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.headers, f.paths = nil, nil
			f.mu.Unlock()
			code, out, errOut := runStatus(t, t0, tt.args...)
			if code != ExitOK || !strings.Contains(out, "writer-0#a") {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.headers) == 0 {
				t.Fatal("no request reached the server")
			}
			for k, want := range tt.headers {
				if got := f.headers[0][k]; strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// -A reads every namespace's Leases in one cluster-wide list and says which namespace each is in.
func TestRunAllNamespaces(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-00000001", "writer-1#a", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000000", "writer-0#a", 4, d(0), ptr.To[int32](15)),
	}
	f.pages["billing"] = []coordinationv1.Lease{lease("ehdb-shard-00000000", "", 9, d(0), ptr.To[int32](15))}
	f.pages["kube-node-lease"] = []coordinationv1.Lease{lease("node-1", "node-1", 0, d(0), ptr.To[int32](40))}
	kc := f.kubeconfig(t)

	for _, args := range [][]string{{"-A"}, {"--all-namespaces"}, {"-A", "-n", "other"}} {
		code, out, errOut := runStatus(t, t0.Add(time.Second), append([]string{"--kubeconfig", kc}, args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		want := "" +
			"NAMESPACE   SHARD   HOLDER       EPOCH   RENEWED    EXPIRES   STATE\n" +
			"billing     0       -            9       1.0s ago   -         released\n" +
			"noetl       0       writer-0#a   4       1.0s ago   in 14s    live\n" +
			"noetl       1       writer-1#a   2       1.0s ago   in 14s    live\n"
		if out != want {
			t.Errorf("%v: stdout:\n%s\nwant:\n%s", args, out, want)
		}
	}
	f.mu.Lock()
	for _, p := range f.paths {
		if !strings.HasPrefix(p, "/apis/coordination.k8s.io/v1/leases?") {
			t.Errorf("request %s: want only cluster-wide lists", p)
		}
	}
	f.mu.Unlock()

	code, out, errOut := runStatus(t, t0, "--kubeconfig", kc, "-A", "-o", "json")
	var doc struct {
		Namespace     string `json:"namespace"`
		AllNamespaces bool   `json:"allNamespaces"`
		Leases        []struct {
			Namespace string `json:"namespace"`
			Shard     uint32 `json:"shard"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != ExitOK || err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if !doc.AllNamespaces || doc.Namespace != "" || len(doc.Leases) != 3 ||
		doc.Leases[0].Namespace != "billing" || doc.Leases[1].Namespace != "noetl" || doc.Leases[2].Shard != 1 {
		t.Errorf("document:\n%s", out)
	}

	// Nothing anywhere, and a cluster-wide denial: both say "cluster", not a namespace.
	empty := newFakeServer(t)
	code, _, errOut = runStatus(t, t0, "--kubeconfig", empty.kubeconfig(t), "-A")
	if code != ExitOK || !strings.Contains(errOut, "No ehdb-shard-* Leases found in any namespace") {
		t.Errorf("empty cluster: exit %d, %s", code, errOut)
	}
	f.fail = 403
	code, _, errOut = runStatus(t, t0, "--kubeconfig", kc, "-A")
	for _, w := range []string{"at the cluster scope", "kubectl create clusterrole ehdb-election-status --verb=list --resource=leases.coordination.k8s.io",
		"kubectl create clusterrolebinding ehdb-election-status --clusterrole=ehdb-election-status --user=bob"} {
		if code != ExitDenied || !strings.Contains(errOut, w) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, w, errOut)
		}
	}
}
