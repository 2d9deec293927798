package charttest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The metrics the unreachable alert reads, as the API server exports them.
var webhookCallMetrics = []string{"apiserver_admission_webhook_rejection_count", "apiserver_admission_webhook_fail_open_count"}

// armedSamples create (as a dry run, which still calls the webhooks) one object per resource a
// webhook entry of the chart may watch, armed so that its matchConditions send it to the webhook.
// An entry whose resources have no sample here fails the test: add one, so no entry goes untested.
var armedSamples = map[string]func(ctx context.Context, cs kubernetes.Interface, ns string) error{
	"statefulsets": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		return createStatefulSet(ctx, cs, ns, "armed", podTemplate(container(fencing, nil)), false)
	},
	"pods": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		return createPod(ctx, cs, ns, "armed", podTemplate(container(fencing, nil)), false)
	},
	// A label written through a Pod's status subresource (it writes labels and annotations too).
	"pods/status": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		pods := cs.CoreV1().Pods(ns)
		pod, err := pods.Get(ctx, "status-target", metav1.GetOptions{})
		if err != nil {
			tmpl := podTemplate(container(fencing, nil))
			if pod, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "status-target"}, Spec: tmpl.Spec}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels["touched"] = fmt.Sprint(time.Now().UnixNano())
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	},
	// An ephemeral container is added to a running Pod: the Pod is created for real (Pods fail
	// open, so the unreachable webhook lets it in), the ephemeral container as a dry run.
	"pods/ephemeralcontainers": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		pods := cs.CoreV1().Pods(ns)
		pod, err := pods.Get(ctx, "ephemeral-target", metav1.GetOptions{})
		if err != nil {
			tmpl := podTemplate(corev1.Container{Name: "main", Image: "registry.invalid/app"})
			pod, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ephemeral-target"}, Spec: tmpl.Spec}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
		}
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: fmt.Sprintf("debug-%d", len(pod.Spec.EphemeralContainers)),
				Image: "registry.invalid/debug", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}}})
		_, err = pods.UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	},
	// A disarming change (issue 17) to the chart's own writer RBAC, as a dry run: the delete of its
	// lease Role (the rbac entry) and of its lease-viewer ClusterRole (the clusterrbac entry).
	"roles": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		roles, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=writer-election"})
		if err != nil || len(roles.Items) == 0 {
			return fmt.Errorf("no writer Role in %s: %v", ns, err)
		}
		return cs.RbacV1().Roles(ns).Delete(ctx, roles.Items[0].Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	},
	"clusterroles": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		crs, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=writer-election"})
		if err != nil {
			return err
		}
		for _, cr := range crs.Items {
			if strings.HasSuffix(cr.Name, "."+ns) {
				return cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}
		}
		return fmt.Errorf("no lease-viewer ClusterRole of %s", ns)
	},
	// A scale-up goes through the scale subresource of an existing set: an unarmed one is created
	// for real (no matchCondition sends it to the webhook), the scale-up is a dry run.
	"statefulsets/scale": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		sets := cs.AppsV1().StatefulSets(ns)
		if _, err := sets.Get(ctx, "scale-target", metav1.GetOptions{}); err != nil {
			tmpl := podTemplate(corev1.Container{Name: "main", Image: "registry.invalid/app"})
			set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "scale-target"}, Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](0), ServiceName: "scale-target", Template: tmpl,
				Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}}}
			if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		scale, err := sets.GetScale(ctx, "scale-target", metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas++
		_, err = sets.UpdateScale(ctx, "scale-target", scale, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	},
	"configmaps": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-env"},
			Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}, dryRun(false))
		return err
	},
	"services": func(ctx context.Context, cs kubernetes.Interface, ns string) error {
		_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}, dryRun(false))
		return err
	},
}

// scrapeWebhookCalls reads the API server's /metrics and returns the webhook call counters by series
// (the metric name and its labels, in Prometheus' text notation).
func scrapeWebhookCalls(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the API server: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, name := range webhookCallMetrics {
		mf := families[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[seriesKey(name, m.GetLabel())] = m.GetCounter().GetValue()
		}
	}
	return out, nil
}

func seriesKey(name string, ls []*dto.LabelPair) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// TestAlertWebhookUnreachableOnAPIServerSeries installs the chart with its webhook unreachable (the
// local cluster has no Service network), sends an armed object to every entry of the release's
// webhook configuration, and records the real API server's call metrics before and after. The
// unreachable alert, evaluated over that recording, must fire for every entry: what the API server
// really exports (names, error_type values, fail-open counters) is what the rule is held to.
func TestAlertWebhookUnreachableOnAPIServerSeries(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	ensureStubCRDs(t, r.c) // the PrometheusRule's
	labelNamespace(t, r.cs, r.ns, map[string]string{isolationLabel: r.name})
	values := r.values(ruleValues(nil))
	r.install(t, values)
	ctx := context.Background()

	vwcs := r.rendered.OfKind("ValidatingWebhookConfiguration")
	if len(vwcs) != 1 {
		t.Fatalf("rendered %d webhook configurations", len(vwcs))
	}
	var sends []func(context.Context) error
	var names []string
	for _, w := range typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, vwcs[0]).Webhooks {
		names = append(names, w.Name)
		var send func(ctx context.Context, cs kubernetes.Interface, ns string) error
		for _, rule := range w.Rules {
			for _, res := range rule.Resources {
				// The pods sample creates a Pod; an entry of Pod edits gets the status sample's edit.
				if res == "pods" && !slices.Contains(rule.Operations, admissionregistrationv1.Create) {
					continue
				}
				if s, ok := armedSamples[res]; ok && send == nil {
					send = s
				}
			}
		}
		if send == nil {
			t.Fatalf("webhook %s: no armed sample for its resources %v; add one to armedSamples", w.Name, w.Rules)
		}
		sends = append(sends, func(ctx context.Context) error { return send(ctx, r.cs, r.ns) })
	}

	before, err := scrapeWebhookCalls(ctx, r.cs)
	if err != nil {
		t.Fatal(err)
	}
	var after map[string]float64
	// The API server picks up the configuration asynchronously: send until every entry was called.
	waitFor(t, 60*time.Second, "the API server to call every webhook of the release", func(ctx context.Context) (bool, error) {
		for _, send := range sends {
			_ = send(ctx) // refused (fail closed) or admitted (fail open): either way a failed call
		}
		after, err = scrapeWebhookCalls(ctx, r.cs)
		if err != nil {
			return false, err
		}
		for _, n := range names {
			called := false
			for k, v := range after {
				if strings.Contains(k, `name="`+n+`"`) && v > before[k] {
					called = true
				}
			}
			if !called {
				return false, nil
			}
		}
		return true, nil
	})

	// The recording as Prometheus would store it: the target's labels, the value before for a
	// minute, then the value after (one scrape every 15 s). The alert is judged 3 m in: the calls
	// failed 1 m in, within the rule's 5 m rate window, and its `for` (1 m) has passed.
	var lines []string
	for k, v := range after {
		name, labels, _ := strings.Cut(k, "{")
		lines = append(lines, fmt.Sprintf(`%s{job="apiserver",instance="127.0.0.1:6443",%s %vx4 %vx20`, name, labels, before[k], v))
	}
	sort.Strings(lines)
	rule := renderedAlerts(t, values)["EhdbElectionWebhookUnreachable"]
	const at = 3 * time.Minute
	got, err := firing(loadSeries(t, evalInterval, lines...), rule, at)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, l := range got[at] {
		fired[l.Get("name")] = true
	}
	for _, n := range names {
		if !fired[n] {
			t.Errorf("the API server could not call %s, and the alert is silent about it\nrecorded:\n%s\nexpr: %s", n, strings.Join(lines, "\n"), rule.Expr)
		}
	}
}
