package webhook

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Metrics are the guard's own series, next to controller-runtime's webhook metrics.
type Metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// KindOther is the kind label of requests for kinds the guard does not judge.
const KindOther = "other"

// judgedKinds are the kind label values besides KindOther.
var judgedKinds = func() []string {
	var out []string
	for _, s := range PodSources {
		out = append(out, s.GVK.Kind)
	}
	out = append(out, gvkConfigMap.Kind, gvkService.Kind)
	for _, k := range RBACKinds {
		out = append(out, k.Kind)
	}
	return out
}()

// NewMetrics registers the guard's series with reg:
//
//	ehdb_webhook_decisions_total{kind,result,reason,dry_run}  decisions; result is allowed or denied,
//	                                                  reason the Reason (a denial's first unmet requirement)
//	ehdb_webhook_decision_duration_seconds{kind,result,dry_run}  time from request to decision, lookups included
//
// dry_run is "true" for a server-side dry run (AdmissionRequest.dryRun: kubectl diff, kubectl apply
// --dry-run=server, Argo CD's diff): nothing is written, so alerts on refusals leave those out.
// Every kind × result × reason × dry_run that can occur is pinned at 0, so rate() and alerts work
// from the first scrape.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
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
		for _, k := range judgedKinds {
			for _, r := range AllowReasons {
				m.decisions.WithLabelValues(k, "allowed", string(r), dry)
			}
			for _, r := range DenialReasons {
				m.decisions.WithLabelValues(k, "denied", string(r), dry)
			}
			m.duration.WithLabelValues(k, "allowed", dry)
			m.duration.WithLabelValues(k, "denied", dry)
		}
		m.decisions.WithLabelValues(KindOther, "allowed", string(ReasonNoOpinion), dry)
		m.decisions.WithLabelValues(KindOther, "denied", string(ReasonMalformed), dry)
	}
	return m, nil
}

// observe records one decision on req; every decision is recorded through it, so none misses the
// dry_run label.
func (m *Metrics) observe(req admission.Request, kind string, allowed bool, reason Reason, took time.Duration) {
	if m == nil {
		return
	}
	result := "denied"
	if allowed {
		result = "allowed"
	}
	dry := strconv.FormatBool(req.DryRun != nil && *req.DryRun)
	m.decisions.WithLabelValues(kind, result, string(reason), dry).Inc()
	m.duration.WithLabelValues(kind, result, dry).Observe(took.Seconds())
}
