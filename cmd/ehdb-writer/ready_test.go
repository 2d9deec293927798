package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

// probe GETs /readyz and returns the status code and body.
func probe(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The handler answers 200 or 503 with the reason, and logs each change of reason once.
func TestReadyzAnswersAndLogsChanges(t *testing.T) {
	var logs harness.SyncBuffer
	var answer error
	h := &readyz{check: func() error { return answer }, log: slog.New(slog.NewJSONHandler(&logs, nil))}
	steps := []struct {
		answer error
		code   int
		body   string
	}{
		{&election.NotReady{Reason: election.NoTokenYet, Detail: "3s"}, 503, "no_token_yet: 3s\n"},
		{&election.NotReady{Reason: election.NoTokenYet, Detail: "4s"}, 503, "no_token_yet: 4s\n"},
		{nil, 200, "ok\n"},
		{nil, 200, "ok\n"},
		{&election.NotReady{Reason: election.TokenLapsed, Detail: "cut off"}, 503, "token_lapsed: cut off\n"},
		{errors.New("something else"), 503, "something else\n"},
	}
	for i, s := range steps {
		answer = s.answer
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != s.code || rec.Body.String() != s.body {
			t.Fatalf("step %d: %d %q, want %d %q", i, rec.Code, rec.Body.String(), s.code, s.body)
		}
	}
	want := []string{`"msg":"not ready","reason":"no_token_yet","detail":"no_token_yet: 3s"`, `"msg":"ready"`,
		`"msg":"not ready","reason":"token_lapsed"`, `"msg":"not ready","reason":"not ready","detail":"something else"`}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d log lines (one per change), got:\n%s", len(want), logs.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("log line %d %s lacks %s", i, lines[i], w)
		}
	}
}

// The writer's /readyz: an unarmed writer is ready whatever its election does; an armed one whose
// election is off (the image's ENV armed it, say) or declined is not, and says why.
func TestTheWritersReadiness(t *testing.T) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		t.Skip("running in a pod: the in-cluster configuration exists")
	}
	for _, tc := range []struct {
		name   string
		lookup func(string) (string, bool)
		args   []string
		code   int
		body   string
	}{
		{"unarmed, election off", env("HOSTNAME", "w-0"), nil, 200, "ok\n"},
		{"shadow, declined", env("NOETL_EHDB_FENCING", "shadow", "NOETL_EHDB_ELECTION", "true", "HOSTNAME", "laptop"), nil, 200, "ok\n"},
		{"armed, election off", env("NOETL_EHDB_FENCING", "enforce", "HOSTNAME", "w-0"), nil, 503, "election_off: "},
		{"armed, declined: no shard", env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "true", "HOSTNAME", "laptop", "POD_NAMESPACE", "noetl"), nil, 503, "election_declined: "},
		{"armed, declined: no in-cluster configuration", env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"), nil, 503, "election_declined: "},
		{"armed, declined: unreadable kubeconfig", env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"),
			[]string{"--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}, 503, "election_declined: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop, code, logs := startRun(t, tc.lookup, tc.args...)
			got, body := probe(t, addr)
			if got != tc.code || !strings.HasPrefix(body, tc.body) {
				t.Fatalf("/readyz: %d %q, want %d %q", got, body, tc.code, tc.body)
			}
			stop()
			if c := <-code; c != 0 {
				t.Fatalf("exit %d: %s", c, logs.String())
			}
		})
	}
}

// Against a real API server: an armed writer whose ServiceAccount may not use Leases is not ready
// (and says forbidden); once the Role is bound it acquires and is ready.
func TestAnArmedWriterIsReadyOnceItMints(t *testing.T) {
	c := testcluster.ForTest(t)
	ctx := context.Background()
	cs := c.Clientset()
	ns := c.NewNamespace(t)
	const sa = "writer"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, ns, sa, kc); err != nil {
		t.Fatal(err)
	}
	addr, _, _, logs := startRun(t, env("NOETL_EHDB_FENCING", "enforce", "NOETL_EHDB_ELECTION", "true", "HOSTNAME", "w-0", "POD_NAMESPACE", ns,
		"NOETL_EHDB_ELECTION_LEASE_SECS", "3", "NOETL_EHDB_ELECTION_RENEW_SECS", "1"), "--kubeconfig="+kc)

	waitProbe := func(what string, ok func(code int, body string) bool) (int, string) {
		t.Helper()
		var code int
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			if code, body = probe(t, addr); ok(code, body) {
				return code, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz still %d %q\n%s", what, code, body, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_, body := waitProbe("refused by RBAC", func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "store errors: forbidden")
	})
	if !strings.HasPrefix(body, "no_token_yet: ") {
		t.Fatalf("/readyz %q, want no_token_yet", body)
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitProbe("bound", func(code int, _ string) bool { return code == 200 })
	m := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(m, "ehdb_election_token_valid 1") {
		t.Fatalf("ready, but the scrape does not show a valid token:\n%s", m)
	}
	if !strings.Contains(logs.String(), `"msg":"ready"`) || !strings.Contains(logs.String(), fmt.Sprintf(`"reason":"%s"`, election.NoTokenYet)) {
		t.Fatalf("the log does not show the change:\n%s", logs.String())
	}
}
