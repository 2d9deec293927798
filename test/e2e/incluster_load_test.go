package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The load an upgrade runs under: what a platform team's writers and users keep doing while the
// chart changes beneath them, observed continuously rather than before and after.
const (
	loadScrapeEvery = 500 * time.Millisecond
	loadReviewEvery = 300 * time.Millisecond
	// loadKeep bounds the failures kept for the report (all are counted).
	loadKeep = 20
)

// upgradeLoad scrapes each armed writer and makes admission reviews until stopped.
type upgradeLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                 sync.Mutex
	scrapes, reviews   int
	drops, bad         int      // scrapes that were not the armed holding; reviews answered wrongly
	failures           []string // the first loadKeep of either, with their times
	reported           int      // failures already logged by check
	longestScrapeGap   time.Duration
	started, lastPrint time.Time
}

func (l *upgradeLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < loadKeep {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// startLoad starts one scraper per armed shard and one reviewer.
func (s *icSystem) startLoad(armed []shardHolding) *upgradeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &upgradeLoad{cancel: cancel, started: time.Now()}
	for _, h := range armed {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			s.scrapeLoop(ctx, l, h)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		s.reviewLoop(ctx, l)
	}()
	return l
}

// scrapeLoop: every scrape of the writer must show the holding it had when the load began —
// active, holding, token_valid 1 at the same epoch. A scrape that fails is a hole in the evidence
// and counts as a failure too (a drop could hide in it).
func (s *icSystem) scrapeLoop(ctx context.Context, l *upgradeLoad, h shardHolding) {
	last := time.Now()
	for ctx.Err() == nil {
		m, err := s.podScrape(ctx, h.pod, 9090)
		now := time.Now()
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.scrapes++
		l.longestScrapeGap = max(l.longestScrapeGap, now.Sub(last))
		l.mu.Unlock()
		last = now
		if verdict := holdingVerdict(m, err, h); verdict != "" {
			l.mu.Lock()
			l.drops++
			l.mu.Unlock()
			l.fail("%s: %s", h.pod, verdict)
		}
		select {
		case <-ctx.Done():
		case <-time.After(loadScrapeEvery):
		}
	}
}

// holdingVerdict says what is wrong with a scrape of a writer that must still hold h ("" if nothing).
func holdingVerdict(m harness.Metrics, err error, h shardHolding) string {
	if err != nil {
		return "scrape failed: " + err.Error()
	}
	for _, k := range []string{"ehdb_election_active", "ehdb_election_holds_lease", "ehdb_election_token_valid", "ehdb_election_epoch"} {
		if _, err := m.Value(k); err != nil {
			return err.Error()
		}
	}
	if m.Get("ehdb_election_token_valid") != 1 || m.Get("ehdb_election_holds_lease") != 1 || uint64(m.Get("ehdb_election_epoch")) != h.epoch {
		return fmt.Sprintf("token_valid %v holds_lease %v epoch %v (held epoch %d); errors forbidden %v unreachable %v other %v",
			m.Get("ehdb_election_token_valid"), m.Get("ehdb_election_holds_lease"), m.Get("ehdb_election_epoch"), h.epoch,
			m[`ehdb_election_errors_total{reason="forbidden"}`], m[`ehdb_election_errors_total{reason="unreachable"}`], m[`ehdb_election_errors_total{reason="other"}`])
	}
	return ""
}

// probe is one review's answer and what it had to be.
type probe struct {
	what  string
	err   error
	wrong bool // must be refused, with why in the reason
	why   string
}

// reviewLoop makes, every round, server-side dry-run requests that reach each kind of the
// release's webhooks, and checks each answer: a correct change admitted, a wrong one refused by
// the guard's decision (never "failed calling webhook").
func (s *icSystem) reviewLoop(ctx context.Context, l *upgradeLoad) {
	dry := []string{metav1.DryRunAll}
	sts := s.cs.AppsV1().StatefulSets(s.ns)
	for n := 0; ctx.Err() == nil; n++ {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		probes := []struct {
			what  string
			err   error
			wrong bool // must be refused, with this fragment in the reason
			why   string
		}{}
		// A correct change of the armed writer (a restart annotation): admitted.
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"ehdb-election.test/probe":"%d"}}}}}`, n)
		_, err := sts.Patch(rctx, writerName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dry})
		probes = append(probes, probe{"a correct change of the armed writer", err, false, ""})
		// The election turned off under the armed fence: refused.
		patch = fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"env":[{"name":"NOETL_EHDB_ELECTION","value":"false"}]}]}}}}`, webhooktest.ContainerName)
		_, err = sts.Patch(rctx, writerName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dry})
		probes = append(probes, probe{"the armed writer's election off", err, true, "NOETL_EHDB_ELECTION"})
		// An armed Pod with the default ServiceAccount: the Pods webhook fails open, so only its
		// answer refuses this.
		_, err = s.cs.CoreV1().Pods(s.ns).Create(rctx, armedDefaultPod(s.ns), metav1.CreateOptions{DryRun: dry})
		probes = append(probes, probe{"an armed Pod with the default ServiceAccount", err, true, "ServiceAccount"})
		// A ConfigMap nobody reads (the ConfigMaps webhook fails closed): admitted.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", n), Namespace: s.ns}, Data: map[string]string{"k": "v"}}
		_, err = s.cs.CoreV1().ConfigMaps(s.ns).Create(rctx, cm, metav1.CreateOptions{DryRun: dry})
		probes = append(probes, probe{"a ConfigMap", err, false, ""})
		cancel()
		if ctx.Err() != nil {
			return
		}
		for _, p := range probes {
			l.mu.Lock()
			l.reviews++
			l.mu.Unlock()
			if v := reviewVerdict(p.err, p.wrong, p.why); v != "" {
				l.mu.Lock()
				l.bad++
				l.mu.Unlock()
				l.fail("%s: %s", p.what, v)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(loadReviewEvery):
		}
	}
}

// reviewVerdict says what is wrong with an answer ("" if nothing): a correct change must be
// admitted; a wrong one denied by a webhook's decision naming why.
func reviewVerdict(err error, wrong bool, why string) string {
	switch {
	case !wrong && err != nil:
		return "refused: " + err.Error()
	case wrong && err == nil:
		return "admitted (the guard did not decide it)"
	case wrong && (!strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), why)):
		return fmt.Sprintf("not the guard's refusal naming %s: %v", why, err)
	}
	return ""
}

// armedDefaultPod is a bare armed writer Pod on the default ServiceAccount, shard 0.
func armedDefaultPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-armed-default-sa", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: webhooktest.ContainerName, Image: "ehdb-election.invalid/never-pulled:dry-run",
			Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}, {Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"}},
		}}, AutomountServiceAccountToken: ptr.To(true)},
	}
}

// check logs the load so far at a phase boundary.
func (l *upgradeLoad) check(t *testing.T, phase string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("load after %s: %d scrapes (%d not the armed holding), %d reviews (%d answered wrongly)", phase, l.scrapes, l.drops, l.reviews, l.bad)
	for _, f := range l.failures[l.reported:] {
		t.Logf("  load failure: %s", f)
	}
	l.reported = len(l.failures)
}

// stop ends the load and fails the test on any drop or wrong answer; it returns the figures.
func (l *upgradeLoad) stop(t *testing.T) string {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	summary := fmt.Sprintf("%.1fs: %d scrapes, longest gap between two scrapes of a writer %s; %d reviews", time.Since(l.started).Seconds(), l.scrapes, l.longestScrapeGap.Round(time.Millisecond), l.reviews)
	if l.scrapes == 0 || l.reviews == 0 {
		t.Errorf("the load observed nothing: %s", summary)
	}
	if l.drops > 0 || l.bad > 0 {
		t.Errorf("under load: %d scrapes not the armed holding, %d reviews answered wrongly; the first ones:\n  %s", l.drops, l.bad, strings.Join(l.failures, "\n  "))
	}
	return summary
}

// admissionMetrics are the API server's admission-webhook series for the release's webhooks.
type admissionMetrics harness.Metrics

func (s *icSystem) admissionCalls(ctx context.Context) admissionMetrics {
	s.t.Helper()
	body, err := s.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		s.t.Fatalf("the API server's /metrics: %v", err)
	}
	m, err := parseExposition(body)
	if err != nil {
		s.t.Fatal(err)
	}
	out := admissionMetrics{}
	for k, v := range m {
		if strings.HasPrefix(k, "apiserver_admission_webhook_") && strings.Contains(labelOf(k, "name"), "ehdb-election") {
			out[k] = v
		}
	}
	return out
}

// labelOf is a label's value in a harness.Metrics key (`name{a="x",b="y"}`).
func labelOf(key, label string) string {
	i := strings.Index(key, label+`="`)
	if i < 0 || (i > 0 && key[i-1] != '{' && key[i-1] != ',') {
		return ""
	}
	rest := key[i+len(label)+2:]
	j := strings.Index(rest, `"`)
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// failedSince lists every series that counts a failed call to a webhook and grew since before:
// a rejection for any reason but the webhook's own decision (calling_webhook_error,
// apiserver_internal_error), a fail-open (the Pods webhook), a call that got no decision.
func (a admissionMetrics) failedSince(before admissionMetrics) []string {
	var out []string
	for k, v := range a {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		switch {
		case strings.HasPrefix(k, "apiserver_admission_webhook_rejection_count{") && labelOf(k, "error_type") != "no_error",
			strings.HasPrefix(k, "apiserver_admission_webhook_fail_open_count{"),
			strings.HasPrefix(k, "apiserver_admission_webhook_request_total{") && !decided(labelOf(k, "code")):
			out = append(out, fmt.Sprintf("%s +%v", k, d))
		}
	}
	sort.Strings(out)
	return out
}

// decided: the code a call is counted with is a decision — 200 allowed, 403 the webhook's denial
// (its Status code); 0 (no answer) and 5xx are calls that failed, and any other code is not the guard's.
func decided(code string) bool { return code == "200" || code == "403" }

// callsSince is the number of calls per webhook since before.
func (a admissionMetrics) callsSince(before admissionMetrics) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if strings.HasPrefix(k, "apiserver_admission_webhook_request_total{") {
			out[labelOf(k, "name")] += v - before[k]
		}
	}
	return out
}
