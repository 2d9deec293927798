package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

const (
	release  = "ehdb-election"
	writerSA = "noetl-cmdbus-writer"
	// The shortest timings the parser allows keep the suite quick; the rules do not depend on them.
	leaseSecs = 3
	renewSecs = 1
	lease     = leaseSecs * time.Second
	renew     = renewSecs * time.Second
)

// system is one installation of the whole product: the chart in a fresh namespace (where the
// writers run too, as with `helm install ... -n noetl`), the webhook as a host process the
// chart's webhook configuration points at, and writers as host processes using the chart's SA.
type system struct {
	t          *testing.T
	c          *testcluster.Cluster
	ns         string
	dir        string
	chart      *chartinstall.Client
	writerKube string // kubeconfig authenticating as the chart's writer ServiceAccount
	webhook    *harness.Webhook
}

func newSystem(t *testing.T, values map[string]any) *system {
	t.Helper()
	if os.Getenv(inClusterEnv) == "1" {
		t.Skip("host-process scenario: its webhook and writers run on this machine's loopback, which a cluster's API server cannot reach; with E2E_IN_CLUSTER=1 the in-cluster scenarios (incluster_test.go) run instead")
	}
	c := testcluster.ForTest(t)
	ctx := context.Background()
	s := &system{t: t, c: c, ns: c.NewNamespace(t), dir: t.TempDir()}
	chartDir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if s.chart, err = chartinstall.New(c.Kubeconfig, s.ns, chartDir, log); err != nil {
		t.Fatal(err)
	}
	if _, err := s.chart.Install(ctx, release, values); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.chart.Uninstall(release); err != nil {
			t.Errorf("uninstall: %v", err)
		}
	})
	s.writerKube = filepath.Join(s.dir, "writer.kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, s.ns, writerSA, s.writerKube); err != nil {
		t.Fatal(err)
	}
	return s
}

// startWebhook runs the webhook on the host and points the chart's configuration at it.
func (s *system) startWebhook() {
	s.t.Helper()
	w, err := harness.StartWebhook(context.Background(), s.c, binaries(s.t)+"/webhook", s.ns, release, s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	s.webhook = w
	s.t.Cleanup(func() {
		w.Stop()
		if s.t.Failed() {
			data, _ := os.ReadFile(w.LogPath)
			s.t.Logf("--- webhook log ---\n%s", tail(string(data), 40))
		}
	})
}

// writer starts an ehdb-writer for the given pod name (its ordinal is the shard) as the
// chart's writer ServiceAccount.
func (s *system) writer(hostname string, extraEnv ...string) *writer {
	return startWriter(s.t, s.writerSpec(hostname, s.writerKube, extraEnv...))
}

func (s *system) writerSpec(hostname, kubeconfig string, extraEnv ...string) harness.WriterSpec {
	return harness.WriterSpec{
		Hostname: hostname, Namespace: s.ns, Kubeconfig: kubeconfig,
		LeaseSecs: leaseSecs, RenewSecs: renewSecs, Dir: s.dir, ExtraEnv: extraEnv,
	}
}

// checkSafety runs the safety checker over every writer of the given shard's pod name.
func (s *system) checkSafety(hostname string) []interval {
	s.t.Helper()
	return s.checkSafetyResets(hostname, nil)
}

// checkSafetyResets is checkSafety with the instants a non-participant reset the shard's epoch.
func (s *system) checkSafetyResets(hostname string, resets []time.Time) []interval {
	s.t.Helper()
	return checkSafetyResets(s.t, resets, filepath.Join(s.dir, "intervals-"+hostname+".jsonl"))
}
