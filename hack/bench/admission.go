package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

// latency is one admission configuration's distribution of server-side dry-run create latency.
type latency struct {
	Label      string
	Registered []string // the admission webhook configurations registered while it was measured
	Calls      int64    // calls the measured webhook received during the measurement; -1: none registered
	N, Errors  int
	FirstError string
	P50, P99   time.Duration
	// Decision is the measured webhook's own mean time to decide, lookups included, from its
	// histogram (ours only; 0: not known).
	Decision time.Duration
}

// admissionResult is the four configurations of the admission benchmark, measured in one run.
type admissionResult struct {
	Requests, Concurrency, Warmup, Rounds int
	A, B, C, D                            latency
	// Budget is the worst-review measurement (section "budget", also part of "admission").
	Budget    *budgetResult
	BudgetErr error
}

const noopConfigName = "ehdb-bench-noop"

// registration is the admission webhook configuration the API server has while a configuration is
// measured: exactly one, or none.
type registration int

const (
	regNone registration = iota
	regNoop
	regOurs
)

// admissionConfig is one of the four measured configurations.
type admissionConfig struct {
	reg   registration
	obj   *appsv1.StatefulSet
	calls func() int64 // calls its webhook has received so far; nil: no webhook
	out   *latency
}

// measureAdmission times server-side dry-run creates of the reference writer StatefulSet with (a)
// no webhook, (b) a no-op controller-runtime webhook, (c) ours on an armed, fully correct object and
// (d) ours on an unarmed object. Exactly one webhook configuration is registered during (b), (c) and
// (d), none during (a); everything else (the chart, its webhook process, a live writer) runs in all
// four, so the only difference is the webhook in the request's path. The requests are sent in
// rounds that go through all four configurations in turn, so that a change of load on a shared
// machine during the run weighs on every configuration alike instead of skewing the ratios.
func (b *bench) measureAdmission(ctx context.Context) (admissionResult, error) {
	o := b.opts
	res := admissionResult{Requests: o.requests, Concurrency: o.concurrency, Warmup: o.warmup, Rounds: o.rounds}
	cs, err := unthrottled(b.cluster.Config)
	if err != nil {
		return res, err
	}
	bin, err := b.build("webhook")
	if err != nil {
		return res, err
	}
	b.step("admission: the webhook as the chart's webhook ServiceAccount, and a live writer for shard 0")
	wh, err := harness.StartWebhook(ctx, b.cluster, bin, namespace, release, b.dir)
	if err != nil {
		return res, err
	}
	defer wh.Stop()
	w, err := b.startWriter(stsName + "-0")
	if err != nil {
		return res, err
	}
	defer w.Kill()
	if _, err := b.waitHolder(ctx, election.LeaseName(0), time.Minute); err != nil {
		return res, err
	}
	noop, err := startNoopWebhook(ctx, b.dir)
	if err != nil {
		return res, err
	}

	// The reference writer (SPEC.md "Reference deployment", replicas 1): armed and fully correct;
	// armed with the default ServiceAccount, which ours denies; and without the fencing variable.
	correct := webhooktest.ReferenceWriter(namespace, webhooktest.Armed(), webhooktest.ElectionOn(), webhooktest.ServiceAccount(writerSA))
	wrong := webhooktest.ReferenceWriter(namespace, webhooktest.Armed(), webhooktest.ElectionOn())
	unarmed := webhooktest.ReferenceWriter(namespace, webhooktest.ElectionOn(), webhooktest.ServiceAccount(writerSA), withoutFencing)
	s := &registrar{cs: cs, noop: noop, current: regOurs, wrong: wrong}
	if err := dryRun(ctx, cs, correct); err != nil {
		return res, fmt.Errorf("ours refused the armed, fully correct StatefulSet, so (c) cannot be measured: %w", err)
	}
	if err := dryRun(ctx, cs, s.wrong); err == nil {
		return res, errors.New("ours admitted an armed StatefulSet with the default ServiceAccount: the webhook is not in the path")
	}
	if s.ours, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, wh.Config, metav1.GetOptions{}); err != nil {
		return res, err
	}
	// Leave the chart's configuration as it was found, however the measurement ends.
	defer func() { _ = s.register(context.WithoutCancel(ctx), regOurs) }()

	// The budget first: the process is freshest, and ours is the registration in effect.
	if o.runs("admission") || o.runs("budget") {
		br, err := b.measureBudget(ctx, cs, wh, correct)
		res.Budget, res.BudgetErr = &br, err
	}
	if !o.runs("admission") {
		return res, nil
	}

	decisions := func() int64 { return statefulSetDecisions(wh.MetricsURL) }
	res.A, res.B = latency{Label: "(a) no webhook"}, latency{Label: "(b) no-op controller-runtime webhook"}
	res.C, res.D = latency{Label: "(c) ours, armed and correct"}, latency{Label: "(d) ours, unarmed"}
	configs := []admissionConfig{
		{reg: regNone, obj: correct, out: &res.A},
		{reg: regNoop, obj: correct, calls: noop.calls.Load, out: &res.B},
		{reg: regOurs, obj: correct, calls: decisions, out: &res.C},
		{reg: regOurs, obj: unarmed, calls: decisions, out: &res.D},
	}
	samples := make([][]time.Duration, len(configs))
	var decided time.Duration
	var decisionsSeen uint64
	for round := range o.rounds {
		b.step("admission: round %d of %d", round+1, o.rounds)
		for i, c := range configs {
			if err := s.register(ctx, c.reg); err != nil {
				return res, err
			}
			sum0, n0 := decisionTimeOf(wh.MetricsURL, "allowed")
			d, err := b.timeBlock(ctx, s, c)
			if err != nil {
				return res, err
			}
			samples[i] = append(samples[i], d...)
			if c.out == &res.C {
				sum1, n1 := decisionTimeOf(wh.MetricsURL, "allowed")
				decided += time.Duration((sum1 - sum0) * float64(time.Second))
				decisionsSeen += n1 - n0
			}
		}
	}
	for i, c := range configs {
		sm := summarize(samples[i])
		c.out.N, c.out.P50, c.out.P99 = sm.N, sm.P50, sm.P99
	}
	if decisionsSeen > 0 {
		res.C.Decision = decided / time.Duration(decisionsSeen)
	}
	return res, nil
}

// timeBlock checks that exactly the configuration's webhook is registered, warms up, and times
// requests/rounds dry-run creates of its object, adding the errors and webhook calls to its result.
func (b *bench) timeBlock(ctx context.Context, s *registrar, c admissionConfig) ([]time.Duration, error) {
	registered, err := registeredWebhooks(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	if want := s.names(c.reg); !slices.Equal(registered, want) {
		return nil, fmt.Errorf("%s: want exactly %v registered, found %v", c.out.Label, want, registered)
	}
	c.out.Registered = registered
	_, _, _ = timeDryRuns(ctx, s.cs, c.obj, b.opts.warmup/b.opts.rounds, b.opts.concurrency)
	var before int64
	if c.calls != nil {
		before = c.calls()
	}
	durations, errs, firstErr := timeDryRuns(ctx, s.cs, c.obj, b.opts.requests/b.opts.rounds, b.opts.concurrency)
	if c.calls == nil {
		c.out.Calls = -1
	} else {
		c.out.Calls += c.calls() - before
	}
	c.out.Errors += errs
	if firstErr != nil && c.out.FirstError == "" {
		c.out.FirstError = firstErr.Error()
	}
	return durations, ctx.Err()
}

// registrar switches the API server between the three registrations, and waits until the API
// server acts on each switch before anything is measured.
type registrar struct {
	cs      kubernetes.Interface
	ours    *admissionregistrationv1.ValidatingWebhookConfiguration // the chart's, as installed
	noop    *noopWebhook
	current registration
	wrong   *appsv1.StatefulSet // armed with the default ServiceAccount: ours denies it
}

func (s *registrar) names(r registration) []string {
	switch r {
	case regNoop:
		return []string{noopConfigName}
	case regOurs:
		return []string{s.ours.Name}
	}
	return nil
}

func (s *registrar) register(ctx context.Context, want registration) error {
	if s.current == want {
		return nil
	}
	vwcs := s.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for _, name := range s.names(s.current) {
		if err := vwcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", name, err)
		}
	}
	var add *admissionregistrationv1.ValidatingWebhookConfiguration
	switch want {
	case regNoop:
		add = noopConfiguration(s.noop)
	case regOurs:
		add = s.ours.DeepCopy()
		add.ObjectMeta = metav1.ObjectMeta{Name: s.ours.Name, Labels: s.ours.Labels, Annotations: s.ours.Annotations}
	}
	if add != nil {
		if _, err := vwcs.Create(ctx, add, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", add.Name, err)
		}
	}
	s.current = want
	// In effect when the probe is denied exactly when ours is registered, and reaches the no-op
	// webhook exactly when it is registered.
	err := waitFor(ctx, func() bool {
		before := s.noop.calls.Load()
		denied := dryRun(ctx, s.cs, s.wrong) != nil
		return denied == (want == regOurs) && (s.noop.calls.Load() > before) == (want == regNoop)
	})
	if err != nil {
		return fmt.Errorf("the API server did not act on the webhook configuration %v: %w", s.names(want), err)
	}
	return nil
}

// timeDryRuns sends total server-side dry-run creates of obj from concurrency workers and returns
// the latency of each successful one, with the count of failures and the first failure.
func timeDryRuns(ctx context.Context, cs kubernetes.Interface, obj *appsv1.StatefulSet, total, concurrency int) ([]time.Duration, int, error) {
	var (
		mu       sync.Mutex
		out      = make([]time.Duration, 0, total)
		errs     int
		firstErr error
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	for range concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(total) && ctx.Err() == nil {
				start := time.Now()
				err := dryRun(ctx, cs, obj)
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					out = append(out, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out, errs, firstErr
}

func dryRun(ctx context.Context, cs kubernetes.Interface, obj *appsv1.StatefulSet) error {
	_, err := cs.AppsV1().StatefulSets(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// registeredWebhooks names every validating and mutating admission webhook configuration.
func registeredWebhooks(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	var names []string
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range v.Items {
		names = append(names, c.Name)
	}
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range m.Items {
		names = append(names, "mutating/"+c.Name)
	}
	slices.Sort(names)
	return names, nil
}

// statefulSetDecisions is the webhook's count of StatefulSet decisions, from its /metrics; -1 if
// the scrape fails.
func statefulSetDecisions(metricsURL string) int64 {
	m, err := harness.Scrape(metricsURL)
	if err != nil {
		return -1
	}
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "ehdb_webhook_decisions_total{") && strings.Contains(k, `kind="StatefulSet"`) {
			n += v
		}
	}
	return int64(n)
}

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// waitFor polls cond every 100 ms for up to 30 s.
func waitFor(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out after 30s")
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// unthrottled is an admin client without client-side rate limiting: the benchmark must measure
// the API server, not client-go's token bucket.
func unthrottled(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	c.UserAgent = "ehdb-bench-admission"
	return kubernetes.NewForConfig(c)
}

// noopConfiguration registers the no-op webhook for StatefulSets, with no matchConditions: every
// StatefulSet create and update reaches it.
func noopConfiguration(h *noopWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: noopConfigName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "noop.bench.ehdb.noetl.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &h.URL, CABundle: h.CA},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"statefulsets"},
				},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
}

// withoutFencing removes NOETL_EHDB_FENCING from the writer container: the template then mentions
// it nowhere, so the chart's matchConditions keep the object from our webhook.
func withoutFencing(sts *appsv1.StatefulSet) {
	c := &sts.Spec.Template.Spec.Containers[0]
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == webhook.EnvFencing })
}
