package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
)

// latency is one admission configuration's distribution of server-side dry-run create latency.
type latency struct {
	Label      string
	Registered []string // the admission webhook configurations registered while it was measured
	Calls      int64    // calls the measured webhook received during the measurement; -1: none registered
	N, Errors  int
	FirstError string
	P50, P99   time.Duration
}

// admissionResult is the four configurations of the admission benchmark, measured in one run.
type admissionResult struct {
	Requests, Concurrency, Warmup int
	A, B, C, D                    latency
}

const noopConfigName = "ehdb-bench-noop"

// measureAdmission times server-side dry-run creates of the reference writer StatefulSet with (a)
// no webhook, (b) a no-op controller-runtime webhook, (c) ours on an armed, fully correct object and
// (d) ours on an unarmed object. Exactly one webhook configuration is registered during (b), (c) and
// (d), none during (a); everything else (the chart, its webhook process, a live writer) runs in all
// four, so the only difference is the webhook in the request's path.
func (b *bench) measureAdmission(ctx context.Context) (admissionResult, error) {
	res := admissionResult{Requests: b.opts.requests, Concurrency: b.opts.concurrency, Warmup: b.opts.warmup}
	cs, err := unthrottled(b.cluster.Config)
	if err != nil {
		return res, err
	}
	bin, err := b.build(ctx, "webhook")
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

	armed := map[string]string{"NOETL_EHDB_FENCING": "enforce", election.EnvElection: "true"}
	correct := referenceStatefulSet(writerSA, armed)
	wrong := referenceStatefulSet("", armed) // the default ServiceAccount: ours must deny it
	unarmed := referenceStatefulSet(writerSA, map[string]string{election.EnvElection: "true"})
	if err := dryRun(ctx, cs, correct); err != nil {
		return res, fmt.Errorf("ours refused the armed, fully correct StatefulSet, so (c) cannot be measured: %w", err)
	}
	if err := dryRun(ctx, cs, wrong); err == nil {
		return res, errors.New("ours admitted an armed StatefulSet with the default ServiceAccount: the webhook is not in the path")
	}

	vwcs := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	ours, err := vwcs.Get(ctx, wh.Config, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	b.step("admission: (a) no webhook")
	if err := vwcs.Delete(ctx, ours.Name, metav1.DeleteOptions{}); err != nil {
		return res, err
	}
	restored := false
	restore := func() error {
		if restored {
			return nil
		}
		restored = true
		again := ours.DeepCopy()
		again.ObjectMeta = metav1.ObjectMeta{Name: ours.Name, Labels: ours.Labels, Annotations: ours.Annotations}
		_, err := vwcs.Create(ctx, again, metav1.CreateOptions{})
		return err
	}
	defer func() { _ = restore() }()
	// Once the API server has dropped ours, the wrong object passes.
	if err := waitFor(ctx, func() bool { return dryRun(ctx, cs, wrong) == nil }); err != nil {
		return res, fmt.Errorf("the API server kept calling the deleted webhook configuration: %w", err)
	}
	if res.A, err = b.timeConfiguration(ctx, cs, "(a) no webhook", nil, correct, func() int64 { return -1 }); err != nil {
		return res, err
	}

	b.step("admission: (b) a no-op controller-runtime webhook")
	noop, err := startNoopWebhook(ctx, b.dir)
	if err != nil {
		return res, err
	}
	if _, err := vwcs.Create(ctx, noopConfiguration(noop), metav1.CreateOptions{}); err != nil {
		return res, err
	}
	removeNoop := func() error {
		err := vwcs.Delete(ctx, noopConfigName, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	defer func() { _ = removeNoop() }()
	if err := waitFor(ctx, func() bool {
		before := noop.calls.Load()
		return dryRun(ctx, cs, correct) == nil && noop.calls.Load() > before
	}); err != nil {
		return res, fmt.Errorf("the API server never called the no-op webhook: %w", err)
	}
	if res.B, err = b.timeConfiguration(ctx, cs, "(b) no-op controller-runtime webhook", []string{noopConfigName}, correct, noop.calls.Load); err != nil {
		return res, err
	}
	if err := removeNoop(); err != nil {
		return res, err
	}
	if err := waitFor(ctx, func() bool {
		before := noop.calls.Load()
		return dryRun(ctx, cs, correct) == nil && noop.calls.Load() == before
	}); err != nil {
		return res, fmt.Errorf("the API server kept calling the deleted no-op webhook: %w", err)
	}

	b.step("admission: (c) ours, armed and correct; (d) ours, unarmed")
	if err := restore(); err != nil {
		return res, fmt.Errorf("restoring %s: %w", ours.Name, err)
	}
	if err := waitFor(ctx, func() bool { return dryRun(ctx, cs, wrong) != nil }); err != nil {
		return res, fmt.Errorf("the API server never called the restored webhook configuration: %w", err)
	}
	decisions := func() int64 { return statefulSetDecisions(wh.MetricsURL) }
	if res.C, err = b.timeConfiguration(ctx, cs, "(c) ours, armed and correct", []string{ours.Name}, correct, decisions); err != nil {
		return res, err
	}
	if res.D, err = b.timeConfiguration(ctx, cs, "(d) ours, unarmed", []string{ours.Name}, unarmed, decisions); err != nil {
		return res, err
	}
	return res, nil
}

// timeConfiguration checks that exactly the expected webhook configurations are registered, warms
// up, and times opts.requests dry-run creates of obj at opts.concurrency. calls counts what the
// configuration's webhook received, so the report can show it was (or was not) in the path.
func (b *bench) timeConfiguration(ctx context.Context, cs kubernetes.Interface, label string, want []string, obj *appsv1.StatefulSet, calls func() int64) (latency, error) {
	l := latency{Label: label}
	registered, err := registeredWebhooks(ctx, cs)
	if err != nil {
		return l, err
	}
	if !slices.Equal(registered, want) {
		return l, fmt.Errorf("%s: want exactly %v registered, found %v", label, want, registered)
	}
	l.Registered = registered
	_, _, _ = timeDryRuns(ctx, cs, obj, b.opts.warmup, b.opts.concurrency)
	before := calls()
	durations, errs, firstErr := timeDryRuns(ctx, cs, obj, b.opts.requests, b.opts.concurrency)
	l.Calls = calls() - before
	if before < 0 {
		l.Calls = -1
	}
	s := summarize(durations)
	l.N, l.Errors, l.P50, l.P99 = s.N, errs, s.P50, s.P99
	if firstErr != nil {
		l.FirstError = firstErr.Error()
	}
	return l, ctx.Err()
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

// referenceStatefulSet is the writer StatefulSet of SPEC.md "Reference deployment" (replicas 1),
// with the given ServiceAccount ("" = default) and environment.
func referenceStatefulSet(sa string, env map[string]string) *appsv1.StatefulSet {
	labels := map[string]string{"app": stsName, "component": "cmdbus-writer", "command-bus": "ehdb", "managed-by": "noetl"}
	var vars []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		vars = append(vars, corev1.EnvVar{Name: k, Value: env[k]})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: stsName, Namespace: namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](1),
			ServiceName:         stsName + "-headless",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": stsName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            sa,
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []corev1.Container{{
						Name:  "noetl-worker",
						Image: "ghcr.io/noetl/ehdb-election-writer:dev",
						Env:   vars,
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}},
					}},
				},
			},
		},
	}
}
