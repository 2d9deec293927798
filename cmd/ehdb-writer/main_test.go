package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noetl/ehdb-election/election"

	"github.com/noetl/ehdb-election/internal/harness"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// startRun runs the writer in-process; cancelling stop plays SIGTERM. It returns the metrics address
// and the exit code channel.
func startRun(t *testing.T, lookup func(string) (string, bool), args ...string) (addr string, stop context.CancelFunc, code <-chan int, logs *harness.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	logs = &harness.SyncBuffer{}
	go func() { done <- run(ctx, append([]string{"--metrics-addr=127.0.0.1:0"}, args...), lookup, logs, ready) }()
	select {
	case addr = <-ready:
	case c := <-done:
		t.Fatalf("writer exited with %d: %s", c, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("writer never served metrics")
	}
	t.Cleanup(cancel)
	return addr, cancel, done, logs
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestOffTheWriterServesMetricsAndExitsCleanly(t *testing.T) {
	addr, stop, code, logs := startRun(t, env("HOSTNAME", "noetl-cmdbus-writer-0"))
	metrics := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{"ehdb_election_active 0", "ehdb_election_last_contact_age_seconds -1",
		`ehdb_election_errors_total{reason="forbidden"} 0`, "ehdb_election_lease_duration_seconds 15", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if got := get(t, "http://"+addr+"/healthz"); got != "ok\n" {
		t.Errorf("healthz %q", got)
	}
	stop()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"election disabled"`) {
		t.Errorf("logs: %s", logs.String())
	}
}

// Enabled but unable: one clear line, metrics still served, the writer runs on.
func TestEnabledButUnableTheWriterDeclinesAndRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lookup func(string) (string, bool)
		args   []string
		reason string
	}{
		{"no shard", env("NOETL_EHDB_ELECTION", "true", "HOSTNAME", "laptop", "POD_NAMESPACE", "noetl"), nil, "no shard"},
		{"no in-cluster configuration", env("NOETL_EHDB_ELECTION", "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"), nil, "no in-cluster configuration"},
		{"unreadable kubeconfig", env("NOETL_EHDB_ELECTION", "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"),
			[]string{"--kubeconfig=" + t.TempDir() + "/missing"}, "cannot load the kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				t.Skip("running in a pod: the in-cluster configuration exists")
			}
			addr, stop, code, logs := startRun(t, tc.lookup, tc.args...)
			if m := get(t, "http://"+addr+"/metrics"); !strings.Contains(m, "ehdb_election_active 0") {
				t.Errorf("metrics:\n%s", m)
			}
			stop()
			if c := <-code; c != 0 {
				t.Fatalf("exit %d", c)
			}
			if !strings.Contains(logs.String(), tc.reason) {
				t.Fatalf("logs lack %q:\n%s", tc.reason, logs.String())
			}
		})
	}
}

func TestBadArgumentsExit2(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"stray"}} {
		if c := run(context.Background(), args, env(), io.Discard, nil); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}

func TestIntervalsLines(t *testing.T) {
	var buf bytes.Buffer
	rec := &intervals{w: &buf, identity: "w-0#u"}
	from := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 3, From: from, Until: from.Add(15 * time.Second)})
	rec.record(election.Event{Outcome: election.HeldByOther, Holder: "x"})
	rec.record(election.Event{Outcome: election.Renewed, Epoch: 3, From: from, Until: from.Add(20 * time.Second)})
	rec.record(election.Event{Outcome: election.Released, Epoch: 3, From: from, Until: from.Add(7 * time.Second)})
	want := `{"identity":"w-0#u","epoch":3,"from":"2030-01-02T03:04:05.0000006Z","until":"2030-01-02T03:04:20.0000006Z"}
{"identity":"w-0#u","epoch":3,"from":"2030-01-02T03:04:05.0000006Z","until":"2030-01-02T03:04:25.0000006Z"}
{"identity":"w-0#u","epoch":3,"from":"2030-01-02T03:04:05.0000006Z","until":"2030-01-02T03:04:12.0000006Z"}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		var l intervalLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNamespaceFallbackFromTheKubeconfig(t *testing.T) {
	for _, tc := range []struct {
		env  func(string) (string, bool)
		want string
	}{
		{env(), "from-kubeconfig"},
		{env("POD_NAMESPACE", "pod"), "pod"},
		{env(election.EnvNamespace, "explicit"), "explicit"},
	} {
		cfg, _ := election.ParseConfig(withNamespaceFallback(tc.env, "from-kubeconfig"))
		if cfg.Namespace != tc.want {
			t.Errorf("namespace %q, want %q", cfg.Namespace, tc.want)
		}
	}
}
