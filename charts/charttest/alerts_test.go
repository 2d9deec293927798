package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/noetl/ehdb-election/internal/repo"
)

// The alert tests feed the rendered rules series shaped as Prometheus stores a writer's scrape: the
// target labels a PodMonitor/ServiceMonitor attaches (job, instance, namespace, pod) on every series,
// and the info metric's own namespace label (the Lease's) renamed to exported_namespace, as
// Prometheus does when a scraped label collides with a target label (honor_labels off).

func ruleValues(extra map[string]any) map[string]any {
	pr := map[string]any{"enabled": true}
	for k, v := range extra {
		pr[k] = v
	}
	return map[string]any{"metrics": map[string]any{"prometheusRule": pr}}
}

// writer is one writer process's series; an empty field leaves that series out.
type writer struct {
	job   string // default noetl-cmdbus-writer
	pod   string
	shard int
	info  string // ehdb_election_info
	valid string // ehdb_election_token_valid
	epoch string // ehdb_election_epoch
}

func (w writer) target() string {
	job := w.job
	if job == "" {
		job = "noetl-cmdbus-writer"
	}
	return fmt.Sprintf(`job=%q,instance="%s.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="%s"`, job, w.pod, w.pod)
}

func (w writer) lines() []string {
	var out []string
	if w.info != "" {
		out = append(out, fmt.Sprintf(`ehdb_election_info{%s,exported_namespace="noetl",shard="%d",lease="ehdb-shard-%08x",identity="%s#0b7c6f1e-6a53-4f0e-9c11-%012d"} %s`,
			w.target(), w.shard, w.shard, w.pod, w.shard, w.info))
	}
	if w.valid != "" {
		out = append(out, fmt.Sprintf(`ehdb_election_token_valid{%s} %s`, w.target(), w.valid))
		// ehdb_election_active is 1 wherever a driver runs; only the old per-writer rule reads it.
		out = append(out, fmt.Sprintf(`ehdb_election_active{%s} 1x200`, w.target()))
	}
	if w.epoch != "" {
		out = append(out, fmt.Sprintf(`ehdb_election_epoch{%s} %s`, w.target(), w.epoch))
	}
	return out
}

func writers(ws ...writer) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.lines()...)
	}
	return out
}

func shard(n int) map[string]string {
	return map[string]string{"namespace": "noetl", "shard": fmt.Sprint(n), "lease": fmt.Sprintf("ehdb-shard-%08x", n)}
}

func withFor(d time.Duration) func(alertRule) alertRule {
	return func(r alertRule) alertRule { r.For = d; return r }
}

func withExpr(expr string) func(alertRule) alertRule {
	return func(r alertRule) alertRule { r.Expr = expr; return r }
}

func cutExpr(re string) func(alertRule) alertRule {
	rx := regexp.MustCompile(re)
	return func(r alertRule) alertRule { r.Expr = rx.ReplaceAllString(r.Expr, ""); return r }
}

// Series values are one sample every 15 s from time 0 (promtool notation: "1x8" is nine samples of 1,
// 0 s to 2 m; "stale" ends a series as a failed or removed target does).

func TestAlertShardNoValidToken(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionShardNoValidToken"]
	if rule.For != 30*time.Second {
		t.Fatalf("for = %v; want 30s, twice the default lease", rule.For)
	}
	cases := []alertCase{
		{name: "hot standby beside a valid holder: no alert", until: 20 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x80", valid: "1x80"},
			writer{pod: "w-0b", info: "1x80", valid: "0x80"},
		)},
		{name: "the holder stops renewing and the standby does not take over", until: 10 * time.Minute,
			want: []map[string]string{shard(0)}, series: writers(
				writer{pod: "w-0", info: "1x48", valid: "1x8 0x40"},
				writer{pod: "w-0b", info: "1x48", valid: "0x48"},
			)},
		{name: "the only writer of shard 1 is gone; shard 0 is fine", until: 10 * time.Minute,
			want: []map[string]string{shard(1)}, series: writers(
				writer{pod: "w-0", info: "1x48", valid: "1x48"},
				writer{pod: "w-1", shard: 1, info: "1x8 stale", valid: "1x8 stale"},
			)},
		{name: "a takeover within twice the lease: no alert", until: 10 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x8 stale", valid: "1x8 stale"},
			writer{pod: "w-0b", info: "1x48", valid: "0x9 1x38"},
		)},
		{name: "a writer without a running election is no shard", until: 10 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x48", valid: "1x48"},
			writer{pod: "w-9", valid: "0x48"},
		)},
		{name: "every writer scraped by two jobs: still one answer per shard", until: 5 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x20", valid: "1x20"},
			writer{pod: "w-0b", info: "1x20", valid: "0x20"},
			writer{job: "kubernetes-pods", pod: "w-0", info: "1x20", valid: "1x20"},
			writer{job: "kubernetes-pods", pod: "w-0b", info: "1x20", valid: "0x20"},
		)},
		{name: "a writer restarted in place (new identity, same Pod)", until: 5 * time.Minute, series: append(writers(
			writer{pod: "w-0", info: "1x20", valid: "1x20"}),
			`ehdb_election_info{job="noetl-cmdbus-writer",instance="w-0.noetl-cmdbus-writer-headless:9090",namespace="noetl",pod="w-0",exported_namespace="noetl",shard="0",lease="ehdb-shard-00000000",identity="w-0#previous-process"} 1x4 _x16`,
		)},
	}
	mutants := []mutant{
		{"the per-writer rule this replaces", withExpr(`ehdb_election_token_valid{namespace="noetl"} == 0 and ehdb_election_active{namespace="noetl"} == 1`)},
		{"min across writers instead of max", replaceExpr(`max by (namespace, shard, lease) (ehdb_election_token_valid`, `min by (namespace, shard, lease) (ehdb_election_token_valid`)},
		{"shards of vanished writers forgotten", cutExpr(`(?s)\s+or\s+0 \* max by.*?\[1h\]\)\)`)},
		{"not per shard", func(r alertRule) alertRule {
			r.Expr = strings.ReplaceAll(r.Expr, "max by (namespace, shard, lease) (", "max by (namespace) (")
			return r
		}},
		{"no pending time", withFor(0)},
		{"the info side not reduced to one series per Pod", replaceExpr(`max by (namespace, pod, shard, lease) (ehdb_election_info{namespace="noetl"})`, `ehdb_election_info{namespace="noetl"}`)},
	}
	runAlertCases(t, rule, cases, mutants)
}

func TestAlertShardFlapping(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionShardFlapping"]
	cases := []alertCase{
		{name: "five holder changes in ten minutes", until: 8 * time.Minute,
			want: []map[string]string{shard(0)}, series: writers(
				writer{pod: "w-0", info: "1x35", epoch: "1x7 3x7 5x19"},
				writer{pod: "w-0b", info: "1x35", epoch: "0x3 2x7 4x7 6x15"},
			)},
		{name: "five changes after fifteen steady minutes", until: 20 * time.Minute,
			want: []map[string]string{shard(0)}, series: writers(
				writer{pod: "w-0", info: "1x89", epoch: "100x60 101x3 103x3 105x20"},
				writer{pod: "w-0b", info: "1x89", epoch: "99x63 102x3 104x20"},
			)},
		{name: "one holder change: no alert", until: 20 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x80", epoch: "7x80"},
			writer{pod: "w-0b", info: "1x80", epoch: "3x40 8x40"},
		)},
		{name: "exactly maxChanges changes: no alert", until: 10 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x40", epoch: "1x7 3x32"},
			writer{pod: "w-0b", info: "1x40", epoch: "0x3 2x7 4x28"},
		)},
		{name: "the newest holder crashes while standbys show old epochs: one change", until: 18 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x48 stale", epoch: "10x48 stale"},
			writer{pod: "w-0b", info: "1x72", epoch: "2x51 11x20"},
			writer{pod: "w-0c", info: "1x72", epoch: "1x72"},
		)},
		{name: "epoch steady for half an hour", until: 30 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x120", epoch: "42x120"},
			writer{pod: "w-0b", info: "1x120", epoch: "41x120"},
		)},
	}
	mutants := []mutant{
		{"highest minus lowest in the window", replaceExpr("[10m:] offset 10m", "[10m:] offset 10h")},
		{"at least maxChanges", replaceExpr(") > 3", ") >= 3")},
		{"any change", replaceExpr(") > 3", ") > 0")},
	}
	runAlertCases(t, rule, cases, mutants)

	// maxChanges and the window are values.
	r := renderedAlerts(t, ruleValues(map[string]any{"alerts": map[string]any{"holderFlapping": map[string]any{"maxChanges": 7, "window": "30m"}}}))["EhdbElectionShardFlapping"]
	if !strings.Contains(r.Expr, ") > 7") || strings.Count(r.Expr, "[30m:]") != 3 || !strings.Contains(r.Expr, "offset 30m") {
		t.Errorf("maxChanges/window not applied: %s", r.Expr)
	}
}

func TestAlertShardEpochWentBackwards(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionShardEpochWentBackwards"]
	cases := []alertCase{
		{name: "the Lease was recreated: the new holder's epoch is below the old one", until: 10 * time.Minute,
			want: []map[string]string{shard(0)}, series: writers(
				writer{pod: "w-0", info: "1x40", valid: "1x20 0x20", epoch: "9x40"},
				writer{pod: "w-0b", info: "1x40", valid: "0x21 1x19", epoch: "0x21 1x19"},
				writer{pod: "w-1", shard: 1, info: "1x40", valid: "1x40", epoch: "4x40"},
			)},
		{name: "epoch steady, a standby showing an older one: no alert", until: 20 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x80", valid: "1x80", epoch: "5x80"},
			writer{pod: "w-0b", info: "1x80", valid: "0x80", epoch: "3x80"},
		)},
		{name: "a takeover after the holder crashed: no alert", until: 15 * time.Minute, series: writers(
			writer{pod: "w-0", info: "1x20 stale", valid: "1x20 stale", epoch: "5x20 stale"},
			writer{pod: "w-0b", info: "1x60", valid: "0x22 1x38", epoch: "3x22 6x38"},
		)},
	}
	mutants := []mutant{
		{"every writer compared, not only valid holders", replaceExpr(` and ehdb_election_token_valid{namespace="noetl"} == 1`, ``)},
		{"the lowest epoch of any writer", func(r alertRule) alertRule {
			r.Expr = strings.Replace(r.Expr, ` and ehdb_election_token_valid{namespace="noetl"} == 1`, ``, 1)
			r.Expr = strings.Replace(r.Expr, "max by (namespace, shard, lease) (\n", "min by (namespace, shard, lease) (\n", 1)
			return r
		}},
		{"not per shard", func(r alertRule) alertRule {
			r.Expr = strings.ReplaceAll(r.Expr, "max by (namespace, shard, lease) (", "max by (namespace) (")
			return r
		}},
	}
	runAlertCases(t, rule, cases, mutants)
}

const webhookTarget = `job="ehdb-election-webhook",namespace="noetl"`

func TestAlertWebhookDown(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionWebhookDown"]
	cases := []alertCase{
		{name: "both replicas down", until: 6 * time.Minute, want: []map[string]string{{"job": "ehdb-election-webhook", "namespace": "noetl"}}, series: []string{
			`up{` + webhookTarget + `,pod="ehdb-election-webhook-a",instance="10.0.0.1:8080"} 1x4 0x20`,
			`up{` + webhookTarget + `,pod="ehdb-election-webhook-b",instance="10.0.0.2:8080"} 1x4 0x20`,
		}},
		{name: "one replica of two down: no alert", until: 6 * time.Minute, series: []string{
			`up{` + webhookTarget + `,pod="ehdb-election-webhook-a",instance="10.0.0.1:8080"} 1x24`,
			`up{` + webhookTarget + `,pod="ehdb-election-webhook-b",instance="10.0.0.2:8080"} 1x4 0x20`,
		}},
		{name: "not scraped at all", until: 3 * time.Minute, want: []map[string]string{{"job": "ehdb-election-webhook", "namespace": "noetl"}}, series: []string{
			`up{job="something-else",namespace="noetl",instance="10.0.0.9:8080"} 1x12`,
		}},
	}
	mutants := []mutant{
		{"only when no replica is scraped", cutExpr(`^.* == 0 or `)},
		{"any replica down", withExpr(`up{` + webhookTarget + `} == 0`)},
	}
	runAlertCases(t, rule, cases, mutants)
}

// releaseWebhookNames lists the entries of the release's rendered ValidatingWebhookConfiguration:
// the alert must cover each one, including any entry added later.
func releaseWebhookNames(t *testing.T, values map[string]any) []string {
	t.Helper()
	vwcs := mustRender(t, values).OfKind("ValidatingWebhookConfiguration")
	if len(vwcs) != 1 {
		t.Fatalf("want one ValidatingWebhookConfiguration, rendered %d", len(vwcs))
	}
	var names []string
	for _, w := range typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, vwcs[0]).Webhooks {
		names = append(names, w.Name)
	}
	if len(names) == 0 {
		t.Fatal("the webhook configuration has no entries")
	}
	return names
}

func TestAlertWebhookUnreachable(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionWebhookUnreachable"]
	apiserver := `job="apiserver",instance="10.0.0.1:6443",type="validating"`
	var cases []alertCase
	for _, name := range releaseWebhookNames(t, ruleValues(nil)) {
		cases = append(cases,
			alertCase{name: "calls to " + name + " fail and are refused", until: 6 * time.Minute, want: []map[string]string{{"name": name, "operation": "UPDATE"}}, series: []string{
				`apiserver_admission_webhook_rejection_count{` + apiserver + `,name="` + name + `",operation="UPDATE",error_type="calling_webhook_error",rejection_code="500"} 0x4 1+1x20`,
			}},
			alertCase{name: "calls to " + name + " fail open", until: 6 * time.Minute, want: []map[string]string{{"name": name}}, series: []string{
				`apiserver_admission_webhook_fail_open_count{` + apiserver + `,name="` + name + `"} 0x4 1+1x20`,
			}},
			alertCase{name: "denials " + name + " decided, lookalike webhooks failing: no alert", until: 6 * time.Minute, series: []string{
				`apiserver_admission_webhook_rejection_count{` + apiserver + `,name="` + name + `",operation="CREATE",error_type="no_error",rejection_code="403"} 0x4 1+1x20`,
				`apiserver_admission_webhook_rejection_count{` + apiserver + `,name="` + name + `.example.com",operation="CREATE",error_type="calling_webhook_error",rejection_code="500"} 0x4 1+1x20`,
				`apiserver_admission_webhook_rejection_count{` + apiserver + `,name="x` + name + `",operation="CREATE",error_type="calling_webhook_error",rejection_code="500"} 0x4 1+1x20`,
				`apiserver_admission_webhook_fail_open_count{` + apiserver + `,name="` + strings.ReplaceAll(name, ".", "-") + `"} 0x4 1+1x20`,
			}},
		)
	}
	sel := regexp.MustCompile(`name=~"[^"]*"`).FindString(rule.Expr)
	if sel == "" {
		t.Fatalf("the rule selects no webhook by name: %s", rule.Expr)
	}
	mutants := []mutant{
		{"every rejection", cutExpr(`,error_type=~"[^"]*"`)},
		{"every webhook", replaceExpr(sel, `name=~".+"`)},
		{"the old rule: workloads and pods only", replaceExpr(sel, `name=~"(workloads|pods)\\.ehdb-election\\.noetl\\.io"`)},
		{"dots unescaped", replaceExpr(sel, strings.ReplaceAll(sel, `\\.`, "."))},
	}
	runAlertCases(t, rule, cases, mutants)
}

// TestEveryAlertHasARunbook: each alert's runbook_url is runbookBaseURL/<alert>.md, and that page
// exists in the repository's docs/runbooks, names its alert and says what to do.
func TestEveryAlertHasARunbook(t *testing.T) {
	const base = "https://github.com/noetl/ehdb-election/blob/main/docs/runbooks/"
	dir, err := repo.Path("docs", "runbooks")
	if err != nil {
		t.Fatal(err)
	}
	alerts := renderedAlerts(t, ruleValues(nil))
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
	for name, a := range alerts {
		url := a.Annotations["runbook_url"]
		if url != base+name+".md" {
			t.Errorf("%s: runbook_url %q, want %q", name, url, base+name+".md")
			continue
		}
		page, err := os.ReadFile(filepath.Join(dir, name+".md"))
		if err != nil {
			t.Errorf("%s: its runbook: %v", name, err)
			continue
		}
		for _, want := range []string{"# " + name, "**Meaning.**", "**Confirm.**", "**Act.**"} {
			if !strings.Contains(string(page), want) {
				t.Errorf("%s: the runbook lacks %q", name, want)
			}
		}
	}
	// The base follows the value.
	alerts = renderedAlerts(t, ruleValues(map[string]any{"runbookBaseURL": "https://runbooks.example.com/ehdb/"}))
	if got := alerts["EhdbElectionWebhookDown"].Annotations["runbook_url"]; got != "https://runbooks.example.com/ehdb/EhdbElectionWebhookDown.md" {
		t.Errorf("runbookBaseURL override: runbook_url %q", got)
	}
}

func TestAlertWebhookErrors(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionWebhookErrors"]
	pod := webhookTarget + `,pod="ehdb-election-webhook-a",instance="10.0.0.1:8080"`
	cases := []alertCase{
		{name: "HTTP 500 answers", until: 10 * time.Minute, want: []map[string]string{{"namespace": "noetl", "code": "500"}}, series: []string{
			`controller_runtime_webhook_requests_total{` + pod + `,webhook="/validate",code="500"} 0x4 1+1x40`,
			`controller_runtime_webhook_requests_total{` + pod + `,webhook="/validate",code="200"} 0+5x44`,
		}},
		{name: "its own lookups fail", until: 10 * time.Minute, want: []map[string]string{{"namespace": "noetl", "kind": "StatefulSet"}}, series: []string{
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="could_not_verify"} 0x4 1+1x40`,
		}},
		{name: "healthy traffic and ordinary denials: no alert", until: 10 * time.Minute, series: []string{
			`controller_runtime_webhook_requests_total{` + pod + `,webhook="/validate",code="200"} 0+5x44`,
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="lease_not_live"} 0+1x44`,
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="allowed",reason="requirements_met"} 0+1x44`,
		}},
		{name: "a short burst of errors: no alert", until: 10 * time.Minute, series: []string{
			`controller_runtime_webhook_requests_total{` + pod + `,webhook="/validate",code="500"} 0x4 1x40`,
		}},
	}
	mutants := []mutant{
		{"every answer", replaceExpr(`code!="200"`, `code=~".+"`)},
		{"every denial", replaceExpr(`reason="could_not_verify"`, `result="denied"`)},
		{"no pending time", withFor(0)},
	}
	runAlertCases(t, rule, cases, mutants)
}

// TestAlertWebhookDenials (issue 18): a refusal fires; the same refusal of a server-side dry run
// (kubectl diff, Argo CD's diff, dry_run="true") does not, and neither do series from a webhook that
// predates the label.
func TestAlertWebhookDenials(t *testing.T) {
	rule := renderedAlerts(t, ruleValues(nil))["EhdbElectionWebhookDenials"]
	pod := webhookTarget + `,pod="ehdb-election-webhook-a",instance="10.0.0.1:8080"`
	cases := []alertCase{
		{name: "an apply refused", until: 5 * time.Minute, want: []map[string]string{{"kind": "StatefulSet", "reason": "lease_not_live"}}, series: []string{
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="lease_not_live",dry_run="false"} 0x4 1x16`,
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="lease_not_live",dry_run="true"} 0x20`,
		}},
		{name: "a webhook without the label refuses", until: 5 * time.Minute, want: []map[string]string{{"kind": "StatefulSet", "reason": "election_disabled"}}, series: []string{
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="election_disabled"} 0x4 1x16`,
		}},
		{name: "only dry runs refused (kubectl diff, Argo CD's diff): no alert", until: 10 * time.Minute, series: []string{
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="lease_not_live",dry_run="true"} 0x4 1+1x36`,
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="denied",reason="lease_not_live",dry_run="false"} 0x40`,
			`ehdb_webhook_decisions_total{` + pod + `,kind="StatefulSet",result="allowed",reason="requirements_met",dry_run="false"} 0+1x40`,
		}},
	}
	mutants := []mutant{
		{"dry runs counted", replaceExpr(`,dry_run!="true"`, ``)},
		{"only labelled series", replaceExpr(`dry_run!="true"`, `dry_run="false"`)},
	}
	runAlertCases(t, rule, cases, mutants)
}

// TestPrometheusRule: which alerts render, that each parses and its annotations are valid
// templates, and that the selectors reach every expression.
func TestPrometheusRule(t *testing.T) {
	all := []string{"EhdbElectionShardNoValidToken", "EhdbElectionShardFlapping", "EhdbElectionShardEpochWentBackwards",
		"EhdbElectionForbidden", "EhdbElectionWebhookDenials", "EhdbElectionWebhookDown", "EhdbElectionWebhookUnreachable", "EhdbElectionWebhookErrors"}
	writerAlerts := all[:4]

	if r := mustRender(t, nil); len(r.OfKind("PrometheusRule")) != 0 {
		t.Fatal("PrometheusRule rendered by default")
	}
	for name, values := range scenarios(t) {
		if values == nil {
			values = ruleValues(nil)
		}
		pr, _, _ := unstructured.NestedMap(values, "metrics", "prometheusRule")
		if pr["enabled"] != true {
			continue
		}
		t.Run(name, func(t *testing.T) {
			alerts := renderedAlerts(t, values)
			for _, a := range alerts {
				if _, err := promParser.ParseExpr(a.Expr); err != nil {
					t.Errorf("%s does not parse: %v\n%s", a.Name, err, a.Expr)
				}
				checkAnnotationTemplates(t, a)
				if a.Labels["severity"] == "" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
					t.Errorf("%s lacks severity, summary or description", a.Name)
				}
			}
		})
	}

	alerts := renderedAlerts(t, ruleValues(nil))
	for _, n := range all {
		if _, ok := alerts[n]; !ok {
			t.Errorf("default alerts lack %s", n)
		}
	}
	if len(alerts) != len(all) {
		t.Errorf("alerts %v; want %v", alertNames(alerts), all)
	}
	if _, ok := alerts["EhdbElectionTokenNotValid"]; ok {
		t.Error("the per-writer EhdbElectionTokenNotValid (fires for every hot standby) is still rendered")
	}

	// The writer selector reaches every selector of every writer alert.
	sel := `namespace="prod",job="noetl-cmdbus-writer"`
	alerts = renderedAlerts(t, ruleValues(map[string]any{"writerSelector": sel}))
	for _, n := range writerAlerts {
		expr, err := promParser.ParseExpr(alerts[n].Expr)
		if err != nil {
			t.Fatal(err)
		}
		selectors := 0
		for _, vs := range vectorSelectors(expr) {
			selectors++
			if !strings.Contains(vs, `namespace="prod"`) || !strings.Contains(vs, `job="noetl-cmdbus-writer"`) {
				t.Errorf("%s: selector %s lacks the writer selector", n, vs)
			}
		}
		if selectors == 0 {
			t.Errorf("%s selects nothing", n)
		}
	}

	// Alerts switch off one by one; the webhook's alerts go with the webhook; with none left the
	// chart refuses rather than render an empty rule group.
	off := map[string]any{}
	for _, k := range []string{"noValidToken", "holderFlapping", "epochBackwards", "forbidden"} {
		off[k] = map[string]any{"enabled": false}
	}
	alerts = renderedAlerts(t, ruleValues(map[string]any{"alerts": off}))
	if len(alerts) != 4 || alerts["EhdbElectionWebhookDown"].Group != "ehdb-election.webhook" {
		t.Errorf("with the writer alerts off: %v", alertNames(alerts))
	}
	v := ruleValues(map[string]any{"alerts": off})
	v["webhook"] = map[string]any{"enabled": false}
	if _, err := Render(Name, testNS, v); err == nil || !strings.Contains(err.Error(), "every alert is disabled") {
		t.Errorf("every alert off: want a clear refusal, got %v", err)
	}
	v = ruleValues(nil)
	v["webhook"] = map[string]any{"enabled": false}
	alerts = renderedAlerts(t, v)
	for n := range alerts {
		if strings.Contains(n, "Webhook") {
			t.Errorf("webhook.enabled=false still renders %s", n)
		}
	}
}

// TestWebhookSelectorMatchesTheServiceMonitor: the default webhook selector names the labels the
// chart's own ServiceMonitor gives the webhook's series. The Prometheus operator sets `job` to the
// name of the Service a ServiceMonitor endpoint was found through (unless spec.jobLabel says
// otherwise) and `namespace` to its namespace.
func TestWebhookSelectorMatchesTheServiceMonitor(t *testing.T) {
	v := ruleValues(nil)
	v["metrics"].(map[string]any)["serviceMonitor"] = map[string]any{"enabled": true}
	r := mustRender(t, v)
	sms := r.OfKind("ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("want one ServiceMonitor, got %d", len(sms))
	}
	if _, found, _ := unstructured.NestedString(sms[0].Object, "spec", "jobLabel"); found {
		t.Fatal("the ServiceMonitor sets jobLabel: job is no longer the Service name")
	}
	match, _, _ := unstructured.NestedStringMap(sms[0].Object, "spec", "selector", "matchLabels")
	var svc *corev1.Service
	for _, o := range r.OfKind("Service") {
		s := typed[corev1.Service](t, o)
		if labels.SelectorFromSet(match).Matches(labels.Set(s.Labels)) {
			if svc != nil {
				t.Fatalf("the ServiceMonitor selects two Services: %s, %s", svc.Name, s.Name)
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("the ServiceMonitor selects no Service")
	}
	want := []string{fmt.Sprintf(`job=%q`, svc.Name), fmt.Sprintf(`namespace=%q`, svc.Namespace)}
	for _, n := range []string{"EhdbElectionWebhookDown", "EhdbElectionWebhookErrors"} {
		expr, err := promParser.ParseExpr(renderedAlerts(t, v)[n].Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, vs := range vectorSelectors(expr) {
			if !strings.Contains(vs, want[0]) || !strings.Contains(vs, want[1]) {
				t.Errorf("%s: %s does not select the ServiceMonitor's target labels %s", n, vs, want)
			}
		}
	}
}

func alertNames(m map[string]alertRule) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestAlertValuesSchema(t *testing.T) {
	alert := func(name string, v map[string]any) map[string]any {
		return ruleValues(map[string]any{"alerts": map[string]any{name: v}})
	}
	cases := []struct {
		name   string
		values map[string]any
		path   string
	}{
		{"zero flapping window", alert("holderFlapping", map[string]any{"window": "0m"}), "/metrics/prometheusRule/alerts/holderFlapping/window"},
		{"flapping window not a duration", alert("holderFlapping", map[string]any{"window": "ten minutes"}), "/metrics/prometheusRule/alerts/holderFlapping/window"},
		{"negative maxChanges", alert("holderFlapping", map[string]any{"maxChanges": -1}), "/metrics/prometheusRule/alerts/holderFlapping/maxChanges"},
		{"maxChanges a string", alert("holderFlapping", map[string]any{"maxChanges": "3"}), "/metrics/prometheusRule/alerts/holderFlapping/maxChanges"},
		{"empty lookback", alert("noValidToken", map[string]any{"lookback": ""}), "/metrics/prometheusRule/alerts/noValidToken/lookback"},
		{"zero epoch lookback", alert("epochBackwards", map[string]any{"lookback": "0"}), "/metrics/prometheusRule/alerts/epochBackwards/lookback"},
		{"the removed per-writer alert", alert("tokenNotValid", map[string]any{"enabled": true, "for": "2m", "severity": "critical"}), "'tokenNotValid' not allowed"},
		{"webhook alert without severity", alert("webhookDown", map[string]any{"severity": ""}), "/metrics/prometheusRule/alerts/webhookDown/severity"},
		{"webhook selector with braces", ruleValues(map[string]any{"webhookSelector": `{job="x"}`}), "/metrics/prometheusRule/webhookSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Name, testNS, tc.values)
			if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("want a schema error naming %q, got %v", tc.path, err)
			}
		})
	}
	// Positive controls: the bounds themselves are accepted.
	for _, v := range []map[string]any{
		alert("holderFlapping", map[string]any{"window": "1h30m", "maxChanges": 0}),
		alert("noValidToken", map[string]any{"lookback": "90s", "for": "0s"}),
		alert("epochBackwards", map[string]any{"lookback": "1d"}),
	} {
		if _, err := Render(Name, testNS, v); err != nil {
			t.Errorf("%v refused: %v", v, err)
		}
	}
}
