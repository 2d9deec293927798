package charttest

// A promtool-style rule tester in Go: the chart's PrometheusRule is rendered, its alerts are
// evaluated by Prometheus's own PromQL engine (github.com/prometheus/prometheus/promql, a test
// dependency; the rules package is not used, it pulls in every service-discovery SDK) over series
// written in promtool's input notation, and the `for` clause is applied as Prometheus's rule
// manager does: an alert is pending from the first evaluation that returns its label set, firing
// once it has been returned without a gap for `for`.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// promParser is the PromQL parser every expression of the chart must satisfy.
var promParser = parser.NewParser(parser.Options{})

// alertRule is one alerting rule of the rendered PrometheusRule.
type alertRule struct {
	Group       string
	Name        string
	Expr        string
	For         time.Duration
	Labels      map[string]string
	Annotations map[string]string
}

// renderedAlerts renders the chart with values and returns its PrometheusRule's alerts by name.
func renderedAlerts(t *testing.T, values map[string]any) map[string]alertRule {
	t.Helper()
	r := mustRender(t, values)
	prs := r.OfKind("PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("want one PrometheusRule, rendered %d", len(prs))
	}
	groups, _, err := unstructured.NestedSlice(prs[0].Object, "spec", "groups")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]alertRule{}
	for _, g := range groups {
		gm := g.(map[string]any)
		rules, _, _ := unstructured.NestedSlice(gm, "rules")
		for _, x := range rules {
			m := x.(map[string]any)
			rule := alertRule{Group: gm["name"].(string), Labels: map[string]string{}, Annotations: map[string]string{}}
			rule.Name, _ = m["alert"].(string)
			rule.Expr, _ = m["expr"].(string)
			if f, ok := m["for"].(string); ok {
				d, err := parsePromDuration(f)
				if err != nil {
					t.Fatalf("%s: for %q: %v", rule.Name, f, err)
				}
				rule.For = d
			}
			for k, v := range asStringMap(m["labels"]) {
				rule.Labels[k] = v
			}
			for k, v := range asStringMap(m["annotations"]) {
				rule.Annotations[k] = v
			}
			if rule.Name == "" || rule.Expr == "" {
				t.Fatalf("rule without alert name or expr: %v", m)
			}
			if _, dup := out[rule.Name]; dup {
				t.Fatalf("alert %s defined twice", rule.Name)
			}
			out[rule.Name] = rule
		}
	}
	return out
}

func asStringMap(v any) map[string]string {
	out := map[string]string{}
	m, _ := v.(map[string]any)
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// parsePromDuration parses a duration as Prometheus reads a rule's `for` (model.Duration).
func parsePromDuration(s string) (time.Duration, error) {
	d, err := model.ParseDuration(s)
	return time.Duration(d), err
}

// checkAnnotationTemplates parses an alert's annotations as Prometheus does: Go text/template with
// $labels, $externalLabels and $value defined first.
func checkAnnotationTemplates(t *testing.T, rule alertRule) {
	t.Helper()
	funcs := template.FuncMap{}
	for _, f := range []string{"humanize", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "printf", "query", "first", "value", "label", "reReplaceAll", "title", "toUpper", "toLower", "match", "args", "safeHtml", "externalURL", "pathPrefix", "stripPort", "tableLink", "graphLink", "sortByLabel", "strvalue", "parseDuration", "humanize1024", "toTime", "urlQueryEscape"} {
		funcs[f] = func(...any) any { return nil }
	}
	for k, v := range rule.Annotations {
		src := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + v
		if _, err := template.New(k).Funcs(funcs).Option("missingkey=zero").Parse(src); err != nil {
			t.Errorf("%s: annotation %s is not a valid template: %v", rule.Name, k, err)
		}
	}
}

// fsample is one float sample.
type fsample struct {
	t int64
	f float64
}

func (s fsample) T() int64                      { return s.t }
func (s fsample) ST() int64                     { return 0 }
func (s fsample) F() float64                    { return s.f }
func (s fsample) H() *histogram.Histogram       { return nil }
func (s fsample) FH() *histogram.FloatHistogram { return nil }
func (s fsample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fsample) Copy() chunks.Sample           { return s }

// memStorage is a read-only, in-memory storage.Queryable over loaded series.
type memStorage struct {
	series []*storage.SeriesEntry
}

// loadSeries reads series in promtool's input notation, one per line ("metric{l="v"} 1x10 0 _ stale"),
// the first sample at time 0 and one every interval after it.
func loadSeries(t *testing.T, interval time.Duration, lines ...string) *memStorage {
	t.Helper()
	st := &memStorage{}
	seen := map[string]bool{}
	for _, line := range lines {
		lbls, vals, err := promParser.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		if seen[lbls.String()] {
			t.Fatalf("series %s given twice", lbls)
		}
		seen[lbls.String()] = true
		var samples []chunks.Sample
		for i, v := range vals {
			if v.Omitted {
				continue
			}
			samples = append(samples, fsample{t: int64(i) * interval.Milliseconds(), f: v.Value})
		}
		st.series = append(st.series, storage.NewListSeries(lbls, samples))
	}
	sort.Slice(st.series, func(i, j int) bool { return labels.Compare(st.series[i].Labels(), st.series[j].Labels()) < 0 })
	return st
}

func (m *memStorage) Querier(int64, int64) (storage.Querier, error) { return m, nil }

func (m *memStorage) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range m.series {
		l := s.Labels()
		if !slices.ContainsFunc(ms, func(x *labels.Matcher) bool { return !x.Matches(l.Get(x.Name)) }) {
			out = append(out, s)
		}
	}
	return &listSeriesSet{series: out}
}

func (m *memStorage) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (m *memStorage) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (m *memStorage) Close() error { return nil }

type listSeriesSet struct {
	series []storage.Series
	i      int
}

func (l *listSeriesSet) Next() bool                        { l.i++; return l.i <= len(l.series) }
func (l *listSeriesSet) At() storage.Series                { return l.series[l.i-1] }
func (l *listSeriesSet) Err() error                        { return nil }
func (l *listSeriesSet) Warnings() annotations.Annotations { return nil }

// evalInterval is how often the tests evaluate a rule, and the default resolution of subqueries
// (Prometheus's global evaluation_interval).
const evalInterval = 15 * time.Second

func newEngine() *promql.Engine { return newEngineStep(evalInterval) }

func newEngineStep(step time.Duration) *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{
		MaxSamples:               10_000_000,
		Timeout:                  time.Minute,
		LookbackDelta:            5 * time.Minute,
		NoStepSubqueryIntervalFn: func(int64) int64 { return step.Milliseconds() },
		Parser:                   promParser,
	})
}

// firing evaluates rule every evalInterval from 0 to until and returns, per evaluation time, the
// label sets (sorted) of the alerts firing then. An evaluation error (e.g. an ambiguous join) is an
// error: Prometheus would evaluate no alert at all.
func firing(st *memStorage, rule alertRule, until time.Duration) (map[time.Duration][]labels.Labels, error) {
	return firingStep(st, rule, evalInterval, until)
}

// firingStep is firing with evaluations (and subquery steps) every step.
func firingStep(st *memStorage, rule alertRule, step, until time.Duration) (map[time.Duration][]labels.Labels, error) {
	ng := newEngineStep(step)
	activeAt := map[string]time.Duration{}
	out := map[time.Duration][]labels.Labels{}
	for at := time.Duration(0); at <= until; at += step {
		q, err := ng.NewInstantQuery(context.Background(), st, nil, rule.Expr, time.Unix(0, 0).Add(at))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rule.Name, err)
		}
		res := q.Exec(context.Background())
		vec, err := res.Vector()
		q.Close()
		if err != nil {
			return nil, fmt.Errorf("%s at %v: %w", rule.Name, at, err)
		}
		now := map[string]bool{}
		for _, s := range vec {
			if math.IsNaN(s.F) {
				continue
			}
			b := labels.NewBuilder(s.Metric)
			b.Del(labels.MetricName)
			l := b.Labels()
			k := l.String()
			now[k] = true
			if _, ok := activeAt[k]; !ok {
				activeAt[k] = at
			}
			if at-activeAt[k] >= rule.For {
				out[at] = append(out[at], l)
			}
		}
		for k := range activeAt {
			if !now[k] {
				delete(activeAt, k)
			}
		}
		sort.Slice(out[at], func(i, j int) bool { return labels.Compare(out[at][i], out[at][j]) < 0 })
	}
	return out, nil
}

// alertCase is one rule test: series, and what must (or must not) fire.
type alertCase struct {
	name   string
	series []string
	// until is the last evaluation.
	until time.Duration
	// want lists, for the evaluation at until, the alerts that must fire there, each by a subset of
	// its labels; nil means the alert must not fire at ANY evaluation from 0 to until.
	want []map[string]string
}

// check runs c against rule and returns what went wrong ("" when the case holds).
func (c alertCase) check(t *testing.T, rule alertRule) string {
	t.Helper()
	got, err := firing(loadSeries(t, evalInterval, c.series...), rule, c.until)
	if err != nil {
		return "evaluation failed: " + err.Error()
	}
	if c.want == nil {
		for at := time.Duration(0); at <= c.until; at += evalInterval {
			if len(got[at]) > 0 {
				return fmt.Sprintf("fired at %v: %v (must never fire)", at, got[at])
			}
		}
		return ""
	}
	last := got[c.until]
	if len(last) != len(c.want) {
		return fmt.Sprintf("at %v firing %v; want %d alert(s) with %v", c.until, last, len(c.want), c.want)
	}
	for i, w := range c.want {
		for k, v := range w {
			if last[i].Get(k) != v {
				return fmt.Sprintf("at %v alert %d is %v; want %s=%q", c.until, i, last[i], k, v)
			}
		}
	}
	return ""
}

// mutant is a deliberately wrong version of a rule that the cases must catch.
type mutant struct {
	name   string
	mutate func(alertRule) alertRule
}

// runAlertCases runs every case against the chart's rule (each must hold) and against every mutant
// (some case must fail for each: a test that cannot tell the wrong rule from the right one is no test).
func runAlertCases(t *testing.T, rule alertRule, cases []alertCase, mutants []mutant) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if msg := c.check(t, rule); msg != "" {
				t.Errorf("%s\nexpr: %s", msg, rule.Expr)
			}
		})
	}
	for _, m := range mutants {
		t.Run("mutant/"+m.name, func(t *testing.T) {
			wrong := m.mutate(rule)
			if wrong.Expr == rule.Expr && wrong.For == rule.For {
				t.Fatal("the mutant does not change the rule (stale mutation)")
			}
			if _, err := promParser.ParseExpr(wrong.Expr); err != nil {
				t.Fatalf("mutant does not parse: %v", err)
			}
			var caught []string
			for _, c := range cases {
				if msg := c.check(t, wrong); msg != "" {
					caught = append(caught, c.name+": "+msg)
				}
			}
			if len(caught) == 0 {
				t.Errorf("no case catches the wrong rule\nexpr: %s", wrong.Expr)
			} else {
				t.Logf("caught by %d case(s), e.g. %s", len(caught), caught[0])
			}
		})
	}
}

// replaceExpr returns a mutator that replaces old with new in the expression; when old is not
// there the rule comes back unchanged, which runAlertCases reports as a stale mutation.
func replaceExpr(old, new string) func(alertRule) alertRule {
	return func(r alertRule) alertRule {
		if strings.Contains(r.Expr, old) {
			r.Expr = strings.ReplaceAll(r.Expr, old, new)
		}
		return r
	}
}

// vectorSelectors lists the vector selectors of an expression as PromQL prints them.
func vectorSelectors(e parser.Expr) []string {
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.String())
		}
		return nil
	})
	return out
}
