// Package metrics is the guard's Prometheus series. It lives apart from package webhook, which
// records decisions through the small webhook.Recorder interface, so that the guard's judgement
// (and its fuzzer) links no Prometheus client.
package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/noetl/ehdb-election/webhook"
)

// Decisions are the guard's own series, next to the webhook server's.
type Decisions struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

var _ webhook.Recorder = (*Decisions)(nil)

// New registers the guard's series with reg:
//
//	ehdb_webhook_decisions_total{kind,result,reason,dry_run}  decisions; result is allowed or denied,
//	                                                  reason the Reason (a denial's first unmet requirement)
//	ehdb_webhook_decision_duration_seconds{kind,result,dry_run}  time from request to decision, lookups included
//
// dry_run is "true" for a server-side dry run (AdmissionRequest.dryRun: kubectl diff, kubectl apply
// --dry-run=server, Argo CD's diff): nothing is written, so alerts on refusals leave those out.
// Every kind × result × reason × dry_run that can occur is pinned at 0, so rate() and alerts work
// from the first scrape.
func New(reg prometheus.Registerer) (*Decisions, error) {
	m := &Decisions{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ehdb_webhook_decisions_total",
			Help: "Admission decisions of the ehdb-election guard by object kind, result (allowed/denied) and reason.",
		}, []string{"kind", "result", "reason", "dry_run"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ehdb_webhook_decision_duration_seconds",
			Help:    "Time the ehdb-election guard took to decide, API lookups included.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"kind", "result", "dry_run"}),
	}
	// Registering again with the same registry (a second server in one process, as tests do)
	// reuses the series already there.
	if err := reg.Register(m.decisions); err != nil {
		var are prometheus.AlreadyRegisteredError
		existing, ok := (*prometheus.CounterVec)(nil), false
		if errors.As(err, &are) {
			existing, ok = are.ExistingCollector.(*prometheus.CounterVec)
		}
		if !ok {
			return nil, fmt.Errorf("registering ehdb_webhook_decisions_total: %w", err)
		}
		m.decisions = existing
	}
	if err := reg.Register(m.duration); err != nil {
		var are prometheus.AlreadyRegisteredError
		existing, ok := (*prometheus.HistogramVec)(nil), false
		if errors.As(err, &are) {
			existing, ok = are.ExistingCollector.(*prometheus.HistogramVec)
		}
		if !ok {
			return nil, fmt.Errorf("registering ehdb_webhook_decision_duration_seconds: %w", err)
		}
		m.duration = existing
	}
	for _, dry := range []string{"false", "true"} {
		for _, k := range webhook.JudgedKinds() {
			for _, r := range webhook.AllowReasons {
				m.decisions.WithLabelValues(k, "allowed", string(r), dry)
			}
			for _, r := range webhook.DenialReasons {
				m.decisions.WithLabelValues(k, "denied", string(r), dry)
			}
			m.duration.WithLabelValues(k, "allowed", dry)
			m.duration.WithLabelValues(k, "denied", dry)
		}
		m.decisions.WithLabelValues(webhook.KindOther, "allowed", string(webhook.ReasonNoOpinion), dry)
		m.decisions.WithLabelValues(webhook.KindOther, "denied", string(webhook.ReasonMalformed), dry)
	}
	return m, nil
}

// Decided implements webhook.Recorder.
func (m *Decisions) Decided(kind string, allowed bool, reason webhook.Reason, dryRun bool, took time.Duration) {
	result := "denied"
	if allowed {
		result = "allowed"
	}
	dry := strconv.FormatBool(dryRun)
	m.decisions.WithLabelValues(kind, result, string(reason), dry).Inc()
	m.duration.WithLabelValues(kind, result, dry).Observe(took.Seconds())
}
