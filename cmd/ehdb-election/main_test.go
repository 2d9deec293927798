package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/cmd/ehdb-election/internal/status"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) {
	code := testcluster.Main(m)
	removeBuiltCLI()
	os.Exit(code)
}

func runCLI(t *testing.T, argv ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), argv, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandDispatch(t *testing.T) {
	tests := []struct {
		argv       []string
		code       int
		out, err   string
		notInEmpty bool
	}{
		{argv: []string{"ehdb-election"}, code: status.ExitUsage, err: "Usage: ehdb-election <command>"},
		{argv: []string{"ehdb-election", "help"}, code: status.ExitOK, out: "Usage: ehdb-election <command>"},
		{argv: []string{"/home/me/bin/kubectl-ehdb_election", "--help"}, code: status.ExitOK, out: "Usage: kubectl ehdb-election <command>"},
		{argv: []string{"kubectl-ehdb_election", "status", "-h"}, code: status.ExitOK, out: "Usage: kubectl ehdb-election status"},
		{argv: []string{"ehdb-election", "stauts"}, code: status.ExitUsage, err: `unknown command "stauts"`},
	}
	for _, tt := range tests {
		code, out, errOut := runCLI(t, tt.argv...)
		if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.err) {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", tt.argv, code, out, errOut)
		}
	}
}

// createLeases makes the namespace's Leases as writers (and others) would leave them.
func createLeases(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	now := time.Now()
	mk := func(name, holder string, epoch int32, renewed time.Time, secs int32) {
		rt := metav1.NewMicroTime(renewed)
		_, err := cs.CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(epoch),
				RenewTime: &rt, LeaseDurationSeconds: ptr.To(secs),
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating Lease %s: %v", name, err)
		}
	}
	// Live for five minutes: no test on a loaded machine gets near its expiry.
	mk("ehdb-shard-00000000", "writer-0#0f6e4c2a-8f0e-4f5b-9d7e-3a0c1b2d4e5f", 3, now, 300)
	mk("ehdb-shard-00000001", "writer-1#6a1d", 2, now.Add(-time.Hour), 15)
	mk("ehdb-shard-00000002", "", 5, now, 15)
	mk("ehdb-shard-xyz", "someone#1", 1, now, 15)
	mk("other-app-leader", "other-0", 9, now, 15)
}

func TestStatusAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	createLeases(t, c.Clientset(), ns)

	t.Run("table", func(t *testing.T) {
		code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns)
		if code != status.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		t.Logf("\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("want a header and 3 rows:\n%s", out)
		}
		for i, want := range [][]string{
			{"SHARD", "HOLDER", "EPOCH", "RENEWED", "EXPIRES", "STATE"},
			{"0", "writer-0#0f6e4c2a-8f0e-4f5b-9d7e-3a0c1b2d4e5f", "3", "ago", "in", "live"},
			{"1", "writer-1#6a1d", "2", "ago", "expired"},
			{"2", "-", "5", "ago", "-", "released"},
		} {
			fields := strings.Fields(lines[i])
			for _, w := range want {
				if !containsField(fields, w) {
					t.Errorf("line %d %q lacks %q", i, lines[i], w)
				}
			}
		}
		if strings.Contains(out, "other-app") || strings.Contains(out, "xyz") {
			t.Errorf("foreign or malformed Leases in the table:\n%s", out)
		}
		if !strings.Contains(errOut, "warning: ignoring Lease ehdb-shard-xyz") {
			t.Errorf("stderr does not mention the malformed Lease: %q", errOut)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "-o", "json")
		if code != status.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var doc struct {
			Namespace string `json:"namespace"`
			Leases    []struct {
				Name                 string   `json:"name"`
				Shard                uint32   `json:"shard"`
				Holder               string   `json:"holder"`
				Pod                  string   `json:"pod"`
				Epoch                int32    `json:"epoch"`
				State                string   `json:"state"`
				LeaseDurationSeconds *int64   `json:"leaseDurationSeconds"`
				ExpiresInSeconds     *float64 `json:"expiresInSeconds"`
				Scrape               any      `json:"scrape"`
			} `json:"leases"`
			Ignored []struct {
				Name string `json:"name"`
			} `json:"ignored"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if doc.Namespace != ns || len(doc.Leases) != 3 || len(doc.Ignored) != 1 || doc.Ignored[0].Name != "ehdb-shard-xyz" {
			t.Fatalf("document:\n%s", out)
		}
		l := doc.Leases
		if l[0].Shard != 0 || l[0].Pod != "writer-0" || l[0].Epoch != 3 || l[0].State != "live" ||
			l[0].ExpiresInSeconds == nil || *l[0].ExpiresInSeconds <= 0 || *l[0].LeaseDurationSeconds != 300 {
			t.Errorf("live lease: %+v", l[0])
		}
		if l[1].State != "expired" || *l[1].ExpiresInSeconds > -3000 {
			t.Errorf("expired lease: %+v", l[1])
		}
		if l[2].State != "released" || l[2].Holder != "" || l[2].ExpiresInSeconds != nil || l[2].Epoch != 5 {
			t.Errorf("released lease: %+v", l[2])
		}
		if l[0].Scrape != nil {
			t.Errorf("scrape present without --scrape: %v", l[0].Scrape)
		}
	})

	// There is no kubelet here, so no pod can answer; what is tested is that each row says why,
	// in the API server's own words, and the command still succeeds.
	t.Run("scrape without running pods", func(t *testing.T) {
		createPendingPod(t, c.Clientset(), ns, "writer-0")
		code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--scrape", "-o", "json")
		if code != status.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var doc struct {
			Leases []struct {
				Scrape *struct {
					Pod        string `json:"pod"`
					TokenValid *bool  `json:"tokenValid"`
					Error      string `json:"error"`
				} `json:"scrape"`
			} `json:"leases"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Leases) != 3 {
			t.Fatalf("%v\n%s", err, out)
		}
		for i, want := range []string{"writer-0:9090/metrics answered", "pod writer-1 not found in namespace " + ns, "released: no holder"} {
			s := doc.Leases[i].Scrape
			if s == nil || s.TokenValid != nil || !strings.Contains(s.Error, want) {
				t.Errorf("lease %d scrape = %+v, want an error mentioning %q", i, s, want)
			} else {
				t.Logf("lease %d: %s", i, s.Error)
			}
		}
		// The proxy's answer alone ("address not allowed") does not say why; the pod's state does.
		if s := doc.Leases[0].Scrape; s == nil || !strings.Contains(s.Error, "(pod is Pending, not scheduled, no IP yet)") {
			t.Errorf("the Pending pod's scrape does not say it is Pending: %+v", s)
		}

		code, out, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--scrape")
		if code != status.ExitOK || !strings.Contains(out, "TOKEN_VALID") || !strings.Contains(out, "pod writer-1 not found") {
			t.Errorf("exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("no leases", func(t *testing.T) {
		empty := c.NewNamespace(t)
		code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", empty)
		if code != status.ExitOK || out != "" || !strings.Contains(errOut, "No ehdb-shard-* Leases found in namespace "+empty) {
			t.Errorf("exit %d\nstdout: %q\nstderr: %q", code, out, errOut)
		}
		code, _, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", "no-such-namespace-here")
		if code != status.ExitOK || !strings.Contains(errOut, `namespace "no-such-namespace-here" does not exist`) {
			t.Errorf("exit %d, stderr: %q", code, errOut)
		}
	})
}

// A ServiceAccount without RBAC gets the 403 explained; granting exactly what the message says
// makes the view work, and --scrape without pods/proxy degrades per row instead of failing.
func TestStatusPermissions(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	cs := c.Clientset()
	ctx := context.Background()
	createLeases(t, cs, ns)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, ns, "viewer", kc); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", kc, "-n", ns)
	errOut0 := errOut
	if code != status.ExitDenied || out != "" {
		t.Errorf("exit %d (want %d), stdout %q", code, status.ExitDenied, out)
	}
	for _, want := range []string{
		"error: forbidden",
		`User "system:serviceaccount:` + ns + `:viewer" cannot list resource "leases"`,
		`needs verb "list" on resource "leases"`,
		"--serviceaccount=" + ns + ":viewer",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	// Grant exactly the Role the hint names: list leases, nothing else.
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election-status"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election-status"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "ehdb-election-status"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "viewer", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding through its informers: wait for it, then check.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, out, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", kc, "-n", ns, "--scrape")
		return code != status.ExitDenied, nil
	})
	if err != nil || code != status.ExitOK {
		t.Fatalf("after the grant: exit %d, stderr:\n%s", code, errOut)
	}
	t.Logf("denied:\n%s\nafter the grant:\n%s", errOut0, out)
	if !strings.Contains(out, "live") || !strings.Contains(out, "forbidden: the scrape needs get on pods/proxy in namespace "+ns) {
		t.Errorf("table with a forbidden scrape:\n%s\nstderr:\n%s", out, errOut)
	}
}

// The documented plugin install works: the binary named kubectl-ehdb_election on the PATH is what
// `kubectl ehdb-election status` runs, with the arguments passed through.
func TestKubectlPlugin(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("no kubectl on PATH")
	}
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	createLeases(t, c.Clientset(), ns)

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-ehdb_election"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(kubectl, "ehdb-election", "status", "-n", ns, "-o", "json")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl ehdb-election status: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Namespace string `json:"namespace"`
		Leases    []struct {
			State string `json:"state"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || doc.Namespace != ns || len(doc.Leases) != 3 || doc.Leases[0].State != "live" {
		t.Fatalf("%v\n%s", err, out)
	}

	// kubectl's own flags after the plugin's name are the plugin's: --as reaches the API server.
	cmd = exec.Command(kubectl, "ehdb-election", "status", "-A", "--as", "alice")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig)
	out, err = cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) || exit.ExitCode() != status.ExitDenied || !strings.Contains(string(out), `User "alice" cannot list`) {
		t.Errorf("kubectl ehdb-election status -A --as alice: %v\n%s", err, out)
	}

	// The exit code comes through kubectl too, and usage names the plugin as the user typed it.
	cmd = exec.Command(kubectl, "ehdb-election", "status", "--frobnicate")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != status.ExitUsage || !strings.Contains(string(out), "See 'kubectl ehdb-election status --help'.") {
		t.Errorf("unknown flag through kubectl: %v\n%s", err, out)
	}
}

func createPendingPod(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "writer", Image: "ghcr.io/noetl/ehdb-election-writer:dev"}},
		},
	}
	// The namespace's default ServiceAccount, which admission requires, appears shortly after the
	// namespace does.
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func containsField(fields []string, s string) bool {
	for _, f := range fields {
		if strings.Contains(f, s) {
			return true
		}
	}
	return false
}
