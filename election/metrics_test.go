package election

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

func newPlainRegistry() *prometheus.Registry { return prometheus.NewPedanticRegistry() }

func newRegistry(t testing.TB, e *Election) *prometheus.Registry {
	t.Helper()
	reg := newPlainRegistry()
	if err := reg.Register(newCollector(e)); err != nil {
		t.Fatal(err)
	}
	return reg
}

// gauges returns every ehdb_election_ sample, keyed by name and, for labelled series, name{value}.
func gauges(t testing.TB, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func wantGauges(t testing.TB, reg prometheus.Gatherer, want map[string]float64) {
	t.Helper()
	got := gauges(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

const disabledExposition = `
# HELP ehdb_election_active 1 if an election driver is running in this process (not that a token exists).
# TYPE ehdb_election_active gauge
ehdb_election_active 0
# HELP ehdb_election_epoch The last fencing token (epoch) this writer held; 0 = never issued.
# TYPE ehdb_election_epoch gauge
ehdb_election_epoch 0
# HELP ehdb_election_errors_total Lease store errors by reason (forbidden, unauthorized, unreachable, other).
# TYPE ehdb_election_errors_total counter
ehdb_election_errors_total{reason="forbidden"} 0
ehdb_election_errors_total{reason="other"} 0
ehdb_election_errors_total{reason="unauthorized"} 0
ehdb_election_errors_total{reason="unreachable"} 0
# HELP ehdb_election_holds_lease 1 if the last successful call left this writer as the Lease holder.
# TYPE ehdb_election_holds_lease gauge
ehdb_election_holds_lease 0
# HELP ehdb_election_last_contact_age_seconds Seconds since the send time of the last successful acquire/renew write; -1 = never.
# TYPE ehdb_election_last_contact_age_seconds gauge
ehdb_election_last_contact_age_seconds -1
# HELP ehdb_election_lease_duration_seconds The lease duration in effect, after clamping.
# TYPE ehdb_election_lease_duration_seconds gauge
ehdb_election_lease_duration_seconds 15
# HELP ehdb_election_outcomes_total Election rounds by outcome (acquired, renewed, lost, held_by_other).
# TYPE ehdb_election_outcomes_total counter
ehdb_election_outcomes_total{outcome="acquired"} 0
ehdb_election_outcomes_total{outcome="held_by_other"} 0
ehdb_election_outcomes_total{outcome="lost"} 0
ehdb_election_outcomes_total{outcome="renewed"} 0
# HELP ehdb_election_renew_interval_seconds The renew interval in effect, after clamping.
# TYPE ehdb_election_renew_interval_seconds gauge
ehdb_election_renew_interval_seconds 5
# HELP ehdb_election_token_valid 1 if this writer holds the Lease and its last successful write is younger than the lease duration; the series a fence must consult.
# TYPE ehdb_election_token_valid gauge
ehdb_election_token_valid 0
`

// Election off: every series is there, every label value pinned at 0, the contact age -1 (0 would
// claim contact just now), the pair as configured.
func TestMetricsRenderWhenTheElectionIsOff(t *testing.T) {
	reg := newPlainRegistry()
	cfg, _ := ParseConfig(func(string) (string, bool) { return "", false })
	if _, err := Start(context.Background(), nil, cfg, Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(disabledExposition)); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// Election running: the same series, now with the holder's values; lint-clean.
func TestMetricsRenderWhileTheElectionRuns(t *testing.T) {
	reg := newPlainRegistry()
	clk := clocktesting.NewFakeClock(t0)
	store := fake.NewLeaseStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := testConfig(lease, renew)
	e, err := Start(ctx, store, cfg, Options{Registerer: reg, Clock: clk, Logger: discard, Identity: "w#1"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "acquisition", func() bool { return e.Token().Valid })
	clk.Step(3 * 1e9)
	wantGauges(t, reg, map[string]float64{
		"ehdb_election_active": 1, "ehdb_election_epoch": 1, "ehdb_election_holds_lease": 1,
		"ehdb_election_token_valid": 1, "ehdb_election_last_contact_age_seconds": 3,
		"ehdb_election_lease_duration_seconds": 15, "ehdb_election_renew_interval_seconds": 5,
		"ehdb_election_outcomes_total{acquired}": 1, "ehdb_election_outcomes_total{renewed}": 0,
		"ehdb_election_outcomes_total{lost}": 0, "ehdb_election_outcomes_total{held_by_other}": 0,
		"ehdb_election_errors_total{forbidden}": 0, "ehdb_election_errors_total{unauthorized}": 0,
		"ehdb_election_errors_total{unreachable}": 0, "ehdb_election_errors_total{other}": 0,
	})
	if n := len(gauges(t, reg)); n != 16 {
		t.Fatalf("%d samples, want 16", n)
	}
	// The info series names the shard, so a per-shard alert can join on it.
	const info = `
# HELP ehdb_election_info The election this process runs: always 1, one series while an election is enabled; join on it for the shard.
# TYPE ehdb_election_info gauge
ehdb_election_info{identity="w#1",lease="ehdb-shard-00000007",namespace="ns",shard="7"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(info), "ehdb_election_info"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(newCollector(e)); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	cancel()
	<-e.done
	wantGauges(t, reg, map[string]float64{"ehdb_election_active": 0})
}

func TestMetricsGoToTheCallersRegisterer(t *testing.T) {
	reg := newPlainRegistry()
	cfg, _ := ParseConfig(func(string) (string, bool) { return "", false })
	if _, err := Start(context.Background(), nil, cfg, Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "ehdb_") {
			t.Fatalf("%s registered globally", mf.GetName())
		}
	}
	if _, err := Start(context.Background(), nil, cfg, Options{Registerer: reg}); err == nil {
		t.Fatal("registering twice on one registerer must fail, not panic")
	}
}
