package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/metrics"
)

// TestSeriesArePinnedAndCounted: every kind × result × reason × dry_run the guard can record is a
// series at 0 from the first scrape (so rate() and alerts work at once), a decision moves exactly
// its own series, and a second New on the same registry shares the series (two servers in one
// process).
func TestSeriesArePinnedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := metrics.New(reg)
	if err != nil {
		t.Fatalf("registering again: %v", err)
	}
	kinds := len(webhook.JudgedKinds())
	pinned := 2 * (kinds*(len(webhook.AllowReasons)+len(webhook.DenialReasons)) + 2)
	if got := testutil.CollectAndCount(reg, "ehdb_webhook_decisions_total"); got != pinned {
		t.Fatalf("%d decision series before any decision, want %d pinned", got, pinned)
	}
	if got := testutil.CollectAndCount(reg, "ehdb_webhook_decision_duration_seconds"); got != 2*2*kinds {
		t.Fatalf("%d duration series, want %d", got, 2*2*kinds)
	}

	m.Decided("StatefulSet", false, webhook.ReasonElectionDisabled, true, time.Millisecond)
	decisions.Decided("StatefulSet", false, webhook.ReasonElectionDisabled, true, time.Millisecond)
	m.Decided(webhook.KindOther, true, webhook.ReasonNoOpinion, false, time.Millisecond)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"StatefulSet", "denied", string(webhook.ReasonElectionDisabled), "true"}, 2},
		{[]string{"StatefulSet", "denied", string(webhook.ReasonElectionDisabled), "false"}, 0},
		{[]string{webhook.KindOther, "allowed", string(webhook.ReasonNoOpinion), "false"}, 1},
		{[]string{"Deployment", "denied", string(webhook.ReasonElectionDisabled), "true"}, 0},
	} {
		if got := value(t, reg, c.labels); got != c.want {
			t.Errorf("%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := testutil.CollectAndCount(reg, "ehdb_webhook_decisions_total"); got != pinned {
		t.Fatalf("%d decision series after decisions, want still %d", got, pinned)
	}
}

// value is the ehdb_webhook_decisions_total series with labels kind, result, reason, dry_run.
func value(t *testing.T, reg *prometheus.Registry, labels []string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ehdb_webhook_decisions_total" {
			continue
		}
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["kind"] == labels[0] && l["result"] == labels[1] && l["reason"] == labels[2] && l["dry_run"] == labels[3] {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %v", labels)
	return 0
}
