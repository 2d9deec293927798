package harness

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape, with series keyed like `name` or `name{label="value"}`.
type Metrics map[string]float64

// Value returns a series, or an error naming it when the scrape lacks it: every ehdb_election_*
// series must always render, so a missing one is a finding, not a zero.
func (m Metrics) Value(key string) (float64, error) {
	v, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("series %s missing from the scrape", key)
	}
	return v, nil
}

// Get is Value for the ehdb_election_* series, which always render: a missing one is a broken
// writer, and Get panics so that the mistake is loud rather than read as 0.
func (m Metrics) Get(key string) float64 {
	v, err := m.Value(key)
	if err != nil {
		panic(err)
	}
	return v
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

// Scrape fetches and parses a Prometheus text exposition.
func Scrape(url string) (Metrics, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return m, nil
}

// ParseMetrics parses a Prometheus text exposition.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := Metrics{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := name
			if len(m.GetLabel()) > 0 {
				parts := make([]string, 0, len(m.GetLabel()))
				for _, l := range m.GetLabel() {
					parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] = value(m)
		}
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// Probe GETs a health endpoint and wants 200.
func Probe(url string) error {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
