package election

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// logLines decodes JSON log lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// Disabled, or enabled but unable to run: never an error, one log line saying why, the metrics
// render with active=0 and the token is never valid.
func TestStartFromEnvironmentNeverFailsTheWriter(t *testing.T) {
	if _, err := os.Stat(serviceAccountNamespaceFile); err == nil {
		t.Skip("running in a pod: the namespace file exists")
	}
	for _, tc := range []struct {
		name  string
		env   func(string) (string, bool)
		level string
		msg   string
	}{
		{"disabled", env("HOSTNAME", "w-0"), "INFO", "election disabled"},
		{"unparseable switch", env(EnvElection, "enabled", "HOSTNAME", "w-0"), "INFO", "election disabled"},
		{"no shard", env(EnvElection, "true", "HOSTNAME", "laptop", "POD_NAMESPACE", "noetl"), "ERROR", "no shard"},
		{"no namespace", env(EnvElection, "true", "HOSTNAME", "w-0"), "ERROR", "no namespace"},
		{"no in-cluster configuration", env(EnvElection, "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"), "ERROR", "no in-cluster configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no in-cluster configuration" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				t.Skip("running in a pod")
			}
			var buf bytes.Buffer
			reg := newPlainRegistry()
			e := StartFromEnvironment(context.Background(), tc.env, nil, Options{Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
			if e == nil || e.Token().Valid || e.Release(context.Background()) != nil {
				t.Fatal("want an inert election")
			}
			wantGauges(t, reg, map[string]float64{"ehdb_election_active": 0, "ehdb_election_last_contact_age_seconds": -1,
				"ehdb_election_errors_total{forbidden}": 0, "ehdb_election_lease_duration_seconds": 15})
			var matching int
			for _, l := range logLines(t, &buf) {
				text, _ := l["msg"].(string)
				if r, ok := l["reason"].(string); ok {
					text += " " + r
				}
				if l["level"] == tc.level && strings.Contains(text, tc.msg) {
					matching++
				}
			}
			if matching != 1 {
				t.Fatalf("want one %s line about %q, got:\n%s", tc.level, tc.msg, buf.String())
			}
		})
	}
}

// containerd's Windows containers get no HOSTNAME variable: a writer that takes its shard from its
// hostname reads the container's hostname there (the Pod's), and nowhere else does anything change.
func TestTheShardFromTheRuntimeHostname(t *testing.T) {
	env := map[string]string{EnvElection: "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	host := func() (string, error) { return "writer-3", nil }
	for _, tc := range []struct {
		name      string
		goos      string
		hostEnv   string
		wantShard bool
		shard     uint32
	}{
		{"windows, no HOSTNAME: the container's hostname", "windows", "", true, 3},
		{"windows, HOSTNAME set: the variable", "windows", "writer-5", true, 5},
		{"linux, no HOSTNAME: no shard (the runtime always sets it)", "linux", "", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delete(env, "HOSTNAME")
			if tc.hostEnv != "" {
				env["HOSTNAME"] = tc.hostEnv
			}
			cfg, _ := ParseConfig(withRuntimeHostname(lookup, tc.goos, host))
			if cfg.HasShard != tc.wantShard || (tc.wantShard && cfg.Shard != tc.shard) {
				t.Fatalf("shard %v %d, want %v %d", cfg.HasShard, cfg.Shard, tc.wantShard, tc.shard)
			}
		})
	}
}
