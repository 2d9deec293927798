package election

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector renders the election's series at scrape time. Every series is always present and
// every label value pinned (an absent reason="forbidden" could mean "no error" or "a build without
// the label", which an operator must be able to tell apart); token_valid and the contact age are
// computed at the scrape, like Token(), so a scrape of a paused or partitioned writer is honest.
type collector struct {
	e                                                     *Election
	active, epoch, holds, valid, age, leaseSecs, renewSec *prometheus.Desc
	outcomes, errors                                      *prometheus.Desc
	info                                                  *prometheus.Desc
}

func newCollector(e *Election) *collector {
	g := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("ehdb_election_"+name, help, nil, nil)
	}
	return &collector{
		e:         e,
		active:    g("active", "1 if an election driver is running in this process (not that a token exists)."),
		epoch:     g("epoch", "The last fencing token (epoch) this writer held; 0 = never issued."),
		holds:     g("holds_lease", "1 if the last successful call left this writer as the Lease holder."),
		valid:     g("token_valid", "1 if this writer holds the Lease and its last successful write is younger than the lease duration; the series a fence must consult."),
		age:       g("last_contact_age_seconds", "Seconds since the send time of the last successful acquire/renew write; -1 = never."),
		leaseSecs: g("lease_duration_seconds", "The lease duration in effect, after clamping."),
		renewSec:  g("renew_interval_seconds", "The renew interval in effect, after clamping."),
		outcomes: prometheus.NewDesc("ehdb_election_outcomes_total",
			"Election rounds by outcome (acquired, renewed, lost, held_by_other).", []string{"outcome"}, nil),
		errors: prometheus.NewDesc("ehdb_election_errors_total",
			"Lease store errors by reason (forbidden, unauthorized, unreachable, other).", []string{"reason"}, nil),
		// The spec's series carry no shard label, so an alert on them cannot say which shard has no
		// valid holder. An info metric (Prometheus's convention: value 1, the facts as labels) lets
		// rules and dashboards join the shard in without changing the spec's series.
		info: prometheus.NewDesc("ehdb_election_info",
			"The election this process runs: always 1, one series while an election is enabled; join on it for the shard.",
			[]string{"shard", "lease", "namespace", "identity"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.active, c.epoch, c.holds, c.valid, c.age, c.leaseSecs, c.renewSec, c.outcomes, c.errors, c.info} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	s := e.state.Load()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	age := -1.0
	if s.sent {
		age = e.clock.Since(s.lastSend).Seconds()
	}
	gauge(c.active, boolFloat(e.active.Load()))
	gauge(c.epoch, float64(s.epoch))
	gauge(c.holds, boolFloat(s.holds))
	gauge(c.valid, boolFloat(e.valid(s)))
	gauge(c.age, age)
	gauge(c.leaseSecs, e.cfg.LeaseDuration.Seconds())
	gauge(c.renewSec, e.cfg.RenewInterval.Seconds())
	for i, o := range outcomeNames {
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(e.outcomes[i].Load()), string(o))
	}
	for r := reason(0); r < numReasons; r++ {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.errs[r].Load()), r.String())
	}
	if e.cfg.Enabled {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
			strconv.FormatUint(uint64(e.cfg.Shard), 10), e.name, e.cfg.Namespace, e.identity)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
