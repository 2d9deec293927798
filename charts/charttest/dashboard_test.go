package charttest

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
)

func dashboardValues(extra map[string]any) map[string]any {
	d := map[string]any{"enabled": true}
	for k, v := range extra {
		d[k] = v
	}
	return map[string]any{"metrics": map[string]any{"dashboard": d}}
}

// renderedDashboard renders the chart with values and returns the dashboard ConfigMap and the
// dashboard it carries, decoded.
func renderedDashboard(t *testing.T, values map[string]any) (*corev1.ConfigMap, map[string]any) {
	t.Helper()
	var cms []*corev1.ConfigMap
	for _, o := range mustRender(t, values).OfKind("ConfigMap") {
		if strings.HasSuffix(o.GetName(), "-dashboard") {
			cms = append(cms, typed[corev1.ConfigMap](t, o))
		}
	}
	if len(cms) != 1 {
		t.Fatalf("want one dashboard ConfigMap, rendered %d", len(cms))
	}
	cm := cms[0]
	if len(cm.Data) != 1 {
		t.Fatalf("dashboard ConfigMap holds %d keys; want one JSON file", len(cm.Data))
	}
	for k, v := range cm.Data {
		if !strings.HasSuffix(k, ".json") {
			t.Errorf("key %q: the sidecar loads *.json", k)
		}
		var d map[string]any
		dec := json.NewDecoder(strings.NewReader(v))
		dec.UseNumber()
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s is not JSON: %v", k, err)
		}
		return cm, d
	}
	panic("unreachable")
}

func TestDashboardConfigMap(t *testing.T) {
	for _, o := range mustRender(t, nil).OfKind("ConfigMap") {
		if strings.HasSuffix(o.GetName(), "-dashboard") {
			t.Fatalf("the dashboard renders by default (%s)", o.GetName())
		}
	}

	cm, _ := renderedDashboard(t, dashboardValues(nil))
	if cm.Namespace != testNS || cm.Labels["grafana_dashboard"] != "1" || cm.Labels["app.kubernetes.io/instance"] != Name {
		t.Errorf("default ConfigMap: namespace %q, labels %v", cm.Namespace, cm.Labels)
	}

	cm, _ = renderedDashboard(t, dashboardValues(map[string]any{"namespace": "monitoring", "sidecarLabel": "example.com/dashboard",
		"sidecarLabelValue": "ehdb", "labels": map[string]any{"team": "storage"}, "annotations": map[string]any{"grafana_folder": "Storage"}}))
	if cm.Namespace != "monitoring" || cm.Labels["example.com/dashboard"] != "ehdb" || cm.Labels["grafana_dashboard"] != "" ||
		cm.Labels["team"] != "storage" || cm.Annotations["grafana_folder"] != "Storage" {
		t.Errorf("configured ConfigMap: namespace %q, labels %v, annotations %v", cm.Namespace, cm.Labels, cm.Annotations)
	}

	for _, bad := range []map[string]any{{"sidecarLabel": "grafana dashboard"}, {"sidecarLabelValue": "yes please"}, {"namespace": "Monitoring"}, {"folder": "x"}} {
		if _, err := Render(Name, testNS, dashboardValues(bad)); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %v: want a schema error, got %v", bad, err)
		}
	}
}

// grafanaBuiltins are the variables Grafana defines itself.
var grafanaBuiltins = map[string]string{"__rate_interval": "1m", "__interval": "30s", "__range": "1h", "__range_s": "3600",
	"__interval_ms": "30000", "__dashboard": "x", "__from": "0", "__to": "0", "__name": "x", "__org": "x", "__user": "x"}

var varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// expand replaces Grafana variable references with values, and reports any that are not defined.
func expand(s string, vars map[string]string) (string, []string) {
	var undefined []string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		g := varRef.FindStringSubmatch(m)
		name := g[1] + g[2] + g[3]
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := grafanaBuiltins[name]; ok {
			return v
		}
		undefined = append(undefined, name)
		return m
	})
	return out, undefined
}

type dashTarget struct {
	panel, refID, expr, legend string
	instant                    bool
}

// TestDashboardJSON checks the dashboard against the essentials of Grafana's dashboard schema that
// can be verified offline, and every query against the PromQL parser and engine.
func TestDashboardJSON(t *testing.T) {
	_, d := renderedDashboard(t, dashboardValues(nil))

	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	num := func(m map[string]any, k string) (int64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		i, err := n.Int64()
		return i, err == nil
	}

	// Top level.
	if str(d, "title") == "" {
		t.Error("no title")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`).MatchString(str(d, "uid")) {
		t.Errorf("uid %q: 1-40 of [A-Za-z0-9_-], fixed so links survive a reload", str(d, "uid"))
	}
	if v, ok := num(d, "schemaVersion"); !ok || v < 36 {
		t.Errorf("schemaVersion %v: want an integer >= 36 (datasource references by uid)", d["schemaVersion"])
	}
	if tm, _ := d["time"].(map[string]any); str(tm, "from") == "" || str(tm, "to") == "" {
		t.Errorf("time range %v", d["time"])
	}
	if _, ok := d["__inputs"]; ok {
		t.Error("__inputs: an export for manual import; the sidecar does not resolve ${DS_...} inputs")
	}
	if _, ok := d["id"]; ok && d["id"] != nil {
		t.Error("a fixed numeric id clashes between Grafana instances; leave it out (or null)")
	}

	// Variables.
	vars := map[string]string{}
	tmpl, _ := d["templating"].(map[string]any)
	list, _ := tmpl["list"].([]any)
	for _, x := range list {
		v := x.(map[string]any)
		name, typ := str(v, "name"), str(v, "type")
		if name == "" || typ == "" {
			t.Errorf("variable without name or type: %v", v)
			continue
		}
		if _, dup := vars[name]; dup {
			t.Errorf("variable %s defined twice", name)
		}
		switch typ {
		case "datasource":
			if str(v, "query") != "prometheus" {
				t.Errorf("datasource variable %s of type %q", name, str(v, "query"))
			}
			vars[name] = "prom"
		case "query":
			q, _ := v["query"].(map[string]any)
			qs := str(q, "query")
			m := regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(qs)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", name, qs)
				continue
			}
			sel, undefined := expand(m[1], vars) // only variables defined above it
			if len(undefined) > 0 {
				t.Errorf("variable %s uses %v before they are defined", name, undefined)
			}
			if _, err := promParser.ParseMetricSelector(sel); err != nil {
				t.Errorf("variable %s: selector %q: %v", name, m[1], err)
			}
			vars[name] = "noetl"
			if name == "shard" {
				vars[name] = ".*" // the All value
			}
		default:
			t.Errorf("variable %s: unexpected type %s", name, typ)
		}
	}
	for _, want := range []string{"datasource", "namespace", "shard"} {
		if _, ok := vars[want]; !ok {
			t.Errorf("no %s variable", want)
		}
	}

	// Panels.
	panels, _ := d["panels"].([]any)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	ids := map[int64]string{}
	type rect struct{ x, y, w, h int64 }
	var rects []rect
	var targets []dashTarget
	for i, x := range panels {
		p := x.(map[string]any)
		title := str(p, "title")
		if title == "" {
			t.Errorf("panel %d has no title", i)
		}
		id, ok := num(p, "id")
		if !ok || id <= 0 {
			t.Errorf("panel %q: id %v is not a positive integer", title, p["id"])
		} else if other, dup := ids[id]; dup {
			t.Errorf("panels %q and %q share id %d", other, title, id)
		}
		ids[id] = title
		typ := str(p, "type")
		if !map[string]bool{"timeseries": true, "stat": true, "table": true, "state-timeline": true, "bargauge": true, "gauge": true, "text": true}[typ] {
			t.Errorf("panel %q: type %q is not a core panel", title, typ)
		}
		gp, _ := p["gridPos"].(map[string]any)
		var r rect
		var okx, oky, okw, okh bool
		r.x, okx = num(gp, "x")
		r.y, oky = num(gp, "y")
		r.w, okw = num(gp, "w")
		r.h, okh = num(gp, "h")
		if !okx || !oky || !okw || !okh || r.x < 0 || r.y < 0 || r.w < 1 || r.h < 1 || r.x+r.w > 24 {
			t.Errorf("panel %q: gridPos %v (integers; x+w within the 24 columns)", title, gp)
		}
		for _, o := range rects {
			if r.x < o.x+o.w && o.x < r.x+r.w && r.y < o.y+o.h && o.y < r.y+r.h {
				t.Errorf("panel %q overlaps another at %v", title, gp)
			}
		}
		rects = append(rects, r)
		if ds, _ := p["datasource"].(map[string]any); str(ds, "uid") != "${datasource}" {
			t.Errorf("panel %q: datasource %v; want the ${datasource} variable", title, p["datasource"])
		}
		ts, _ := p["targets"].([]any)
		if len(ts) == 0 {
			t.Errorf("panel %q has no queries", title)
		}
		refs := map[string]bool{}
		for _, y := range ts {
			tg := y.(map[string]any)
			ref := str(tg, "refId")
			if ref == "" || refs[ref] {
				t.Errorf("panel %q: refId %q empty or repeated", title, ref)
			}
			refs[ref] = true
			if ds, _ := tg["datasource"].(map[string]any); str(ds, "uid") != "${datasource}" {
				t.Errorf("panel %q %s: datasource %v", title, ref, tg["datasource"])
			}
			if str(tg, "expr") == "" {
				t.Errorf("panel %q %s: no expr", title, ref)
			}
			instant, _ := tg["instant"].(bool)
			targets = append(targets, dashTarget{panel: title, refID: ref, expr: str(tg, "expr"), legend: str(tg, "legendFormat"), instant: instant})
		}
	}

	// Queries: defined variables only; each parses; the labels a legend names are the labels the
	// query keeps; and run against a writer's series, each returns per-shard data.
	st := loadSeries(t, evalInterval, writers(
		writer{pod: "w-0", info: "1x40", valid: "1x40", epoch: "3x20 4x20"},
		writer{pod: "w-0b", info: "1x40", valid: "0x40", epoch: "2x40"},
		writer{pod: "w-1", shard: 1, info: "1x40", valid: "1x40", epoch: "7x40"},
	)...)
	st.series = append(st.series, loadSeries(t, evalInterval,
		`ehdb_election_outcomes_total{job="noetl-cmdbus-writer",instance="w-0.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="w-0",outcome="acquired"} 1x20 2x20`,
		`ehdb_election_outcomes_total{job="noetl-cmdbus-writer",instance="w-1.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="w-1",outcome="acquired"} 1x40`,
		`ehdb_election_errors_total{job="noetl-cmdbus-writer",instance="w-1.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="w-1",reason="unreachable"} 0+1x40`,
		`ehdb_election_errors_total{job="noetl-cmdbus-writer",instance="w-0.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="w-0",reason="unreachable"} 0x40`,
	).series...)
	ng := newEngine()
	metricsUsed := map[string]bool{}
	for _, tg := range targets {
		name := tg.panel + " " + tg.refID
		expr, undefined := expand(tg.expr, vars)
		if len(undefined) > 0 {
			t.Errorf("%s uses undefined variables %v", name, undefined)
		}
		e, err := promParser.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s does not parse: %v\n%s", name, err, tg.expr)
			continue
		}
		for _, vs := range vectorSelectorNodes(e) {
			metricsUsed[vs.Name] = true
		}
		kept := keptLabels(e)
		for _, m := range regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`).FindAllStringSubmatch(tg.legend, -1) {
			if kept != nil && !kept[m[1]] {
				t.Errorf("%s: legend names {{%s}}, which the query drops (it keeps %v)", name, m[1], kept)
			}
		}
		q, err := ng.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(0, 0).Add(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		res := q.Exec(context.Background())
		vec, err := res.Vector()
		q.Close()
		if err != nil {
			t.Errorf("%s fails on a writer's series: %v", name, err)
			continue
		}
		if len(vec) == 0 {
			t.Errorf("%s returns nothing for two shards' writers\n%s", name, expr)
		}
		if kept != nil && kept["shard"] {
			shards := map[string]bool{}
			for _, s := range vec {
				shards[s.Metric.Get("shard")] = true
			}
			if len(shards) < 2 {
				t.Errorf("%s: per-shard query shows shards %v of 0 and 1", name, shards)
			}
		}
	}
	for _, m := range []string{"ehdb_election_info", "ehdb_election_token_valid", "ehdb_election_epoch", "ehdb_election_outcomes_total"} {
		if !metricsUsed[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// keptLabels returns the labels an expression's result keeps when its outermost operation is an
// aggregation `by (...)` (through parentheses, and the left side of comparisons and set
// operations, whose result has the left side's labels); nil when that cannot be said.
func keptLabels(e parser.Expr) map[string]bool {
	for {
		switch n := e.(type) {
		case *parser.ParenExpr:
			e = n.Expr
		case *parser.BinaryExpr:
			switch {
			case n.Op == parser.LOR:
				l, r := keptLabels(n.LHS), keptLabels(n.RHS)
				if l == nil || r == nil {
					return nil
				}
				for k := range l {
					if !r[k] {
						delete(l, k)
					}
				}
				return l
			case n.Op.IsComparisonOperator() || n.Op.IsSetOperator() || n.RHS.Type() == parser.ValueTypeScalar:
				e = n.LHS
			case n.LHS.Type() == parser.ValueTypeScalar:
				e = n.RHS
			default:
				return nil
			}
		case *parser.AggregateExpr:
			if n.Without {
				return nil
			}
			out := map[string]bool{}
			for _, g := range n.Grouping {
				out[g] = true
			}
			return out
		default:
			return nil
		}
	}
}

func vectorSelectorNodes(e parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}
