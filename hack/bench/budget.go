package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The budget goals of issue 12: the worst single review is decided in under 50 ms with under
// 10 MB of extra memory; 50 of them at once leave the webhook under 64 MiB while a correct review
// is still answered within a second.
const (
	goalWorstDecide     = 50 * time.Millisecond
	goalWorstExtraRSS   = 10 << 20
	goalConcurrentRSS   = 64 << 20
	goalCorrectLatency  = time.Second
	worstConcurrency    = 50
	worstReplicas       = 2147483647
	worstSingleRequests = 10
	// The ConfigMap reader of issue 17: an unarmed Deployment reading 32 ConfigMaps of 1 MB
	// (once 37 → 102 MB for one review, 494 MB for 8 at once).
	bigConfigMaps    = 32
	bigConfigMapSize = 1 << 20
	// The hostile clients of issue 17: connections without credentials, each a POST claiming a
	// 7 MiB body, reopened whenever the webhook hangs up; half send a byte a second, half 32 KiB
	// every 450 ms (the twelfth red team's: fast enough never to be hung up on for slowness).
	slowClients      = 100
	slowClaimedBytes = 7 << 20
	// The watches' share: a namespace admin's Deployments each carrying a 1 MB env value, whose
	// ReplicaSets and Pods carry it too, all in the webhook's watches (once 297 MB for 60).
	largeWorkloads    = 60
	largeWorkloadSize = 1 << 20
)

// budgetResult is what one webhook process does with the worst object an armed writer can be: a
// StatefulSet with replicas 2147483647 whose pods take their shard from the ordinal.
type budgetResult struct {
	Replicas   int32
	Single     int           // worst reviews sent one at a time
	DecideMax  time.Duration // the webhook's own decision time, the slowest of them (its histogram)
	LatencyMax time.Duration // the same requests as the client saw them (API server included)
	RSSBefore  int64         // bytes, before the single reviews
	ExtraPeak  int64         // peak RSS during the single reviews minus RSSBefore
	Denial     string        // the first denial, abridged

	Concurrency         int
	Window              time.Duration
	WorstSent           int
	WorstNotRefused     int // worst reviews that were not refused by the guard's answer
	ConcurrentPeak      int64
	CorrectN            int
	CorrectErrors       int
	CorrectP50, CorrMax time.Duration
	FirstError          string
	// Half the workers send the ConfigMap reader instead of the worst StatefulSet: its reviews
	// and how many were refused (every refusal is wrong: it is unarmed and correct).
	ReaderSent, ReaderRefused int
	ReaderFirstRefusal        string

	// Hostile clients: Slow connections held open for SlowWindow (SlowOpened in all, as the
	// webhook hangs up on them), while a correct StatefulSet and an armed Pod with the election
	// off and the default ServiceAccount (which fails open if the guard does not answer) are
	// sent in turn every 100 ms.
	Slow, SlowOpened                int
	SlowWindow                      time.Duration
	SlowCorrectN, SlowCorrectErrors int
	SlowCorrectP50, SlowCorrectMax  time.Duration
	SlowPodN, SlowPodAdmitted       int
	SlowPeak                        int64
	SlowFirstError                  string

	// The namespace admin's bindings: Bindings made-up subjects in the writer's namespace, while
	// BindingWorkers send an RBAC review that lists them (a Role update that takes nothing, so
	// every refusal is wrong): BindingN admitted, BindingRefused refused or failed.
	Bindings, BindingWorkers int
	BindingN, BindingRefused int
	BindingP50, BindingMax   time.Duration
	BindingPeak              int64
	BindingFirstError        string

	// The watches' share: Large Deployments (and the ReplicaSet and Pod of each, made by the
	// controllers) each carrying a 1 MB env value; the webhook's peak RSS while its watches take
	// them in, and its RSS once they hold them.
	Large              int
	LargePeak, LargeAt int64

	// The flood of team E: FloodWorkers send, for Window, a dry-run delete of the writer's
	// RoleBinding (refused, each review listing those bindings) while the armed Pod is sent every
	// 100 ms: FloodPodN sent, FloodPodAdmitted admitted (through the Pods entry's Ignore).
	FloodWorkers, FloodSent     int
	FloodPodN, FloodPodAdmitted int
	FloodPeak                   int64
	FloodPodMax                 time.Duration
	FloodFirstOther             string
}

// measureBudget sends the worst review alone, then from 50 workers at once while a correct review
// is timed every 100 ms. Peak RSS is the kernel's VmHWM, reset (clear_refs 5) before each part.
func (b *bench) measureBudget(ctx context.Context, cs kubernetes.Interface, wh *harness.Webhook, correct *appsv1.StatefulSet) (budgetResult, error) {
	res := budgetResult{Replicas: worstReplicas, Single: worstSingleRequests, Concurrency: worstConcurrency, Window: 10 * time.Second}
	if b.opts.quick {
		res.Window = 5 * time.Second
	}
	worst := correct.DeepCopy()
	worst.Spec.Replicas = ptr.To[int32](worstReplicas)
	pid := wh.PID()

	b.step("admission budget: %d worst-case reviews one at a time", res.Single)
	rss, _, err := procMemory(pid)
	if err != nil {
		return res, err
	}
	res.RSSBefore = rss
	if err := resetPeak(pid); err != nil {
		return res, err
	}
	for range res.Single {
		sum0, n0 := decisionTimeOf(wh.MetricsURL, "denied")
		start := time.Now()
		err := dryRun(ctx, cs, worst)
		took := time.Since(start)
		sum1, n1 := decisionTimeOf(wh.MetricsURL, "denied")
		if err == nil || !strings.Contains(err.Error(), "refusing to arm") {
			return res, fmt.Errorf("the worst review was not refused by the guard: %v", err)
		}
		if res.Denial == "" {
			res.Denial = truncateText(err.Error(), 300)
		}
		if n1 == n0+1 {
			res.DecideMax = max(res.DecideMax, time.Duration((sum1-sum0)*float64(time.Second)))
		}
		res.LatencyMax = max(res.LatencyMax, took)
	}
	_, peak, err := procMemory(pid)
	if err != nil {
		return res, err
	}
	res.ExtraPeak = peak - res.RSSBefore

	reader, cleanup, err := b.configMapReader(ctx, cs)
	if err != nil {
		return res, err
	}
	defer cleanup()
	b.step("admission budget: %d workers sending worst-case reviews (the StatefulSet, and a Deployment reading %d ConfigMaps of 1 MB) for %s while a correct review is timed", res.Concurrency, bigConfigMaps, res.Window)
	if err := resetPeak(pid); err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, res.Window)
	defer cancel()
	var sent, notRefused, readerSent, readerRefused atomic.Int64
	var firstRefusal atomic.Value
	var wg sync.WaitGroup
	for i := range res.Concurrency {
		wg.Go(func() {
			for wctx.Err() == nil {
				if i%2 == 1 {
					_, err := cs.AppsV1().Deployments(namespace).Create(wctx, reader, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					if wctx.Err() != nil {
						return
					}
					readerSent.Add(1)
					if err != nil {
						readerRefused.Add(1)
						firstRefusal.CompareAndSwap(nil, truncateText(err.Error(), 300))
					}
					continue
				}
				err := dryRun(wctx, cs, worst)
				if wctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err == nil || !strings.Contains(err.Error(), "refusing to arm") {
					notRefused.Add(1)
				}
			}
		})
	}
	var correctTimes []time.Duration
	for wctx.Err() == nil {
		start := time.Now()
		err := dryRun(ctx, cs, correct)
		took := time.Since(start)
		if err != nil {
			res.CorrectErrors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
		} else {
			correctTimes = append(correctTimes, took)
		}
		sleepCtx(wctx, 100*time.Millisecond)
	}
	wg.Wait()
	_, peak, err = procMemory(pid)
	if err != nil {
		return res, err
	}
	res.ConcurrentPeak = peak
	res.WorstSent, res.WorstNotRefused = int(sent.Load()), int(notRefused.Load())
	res.ReaderSent, res.ReaderRefused = int(readerSent.Load()), int(readerRefused.Load())
	if v, ok := firstRefusal.Load().(string); ok {
		res.ReaderFirstRefusal = v
	}
	slices.Sort(correctTimes)
	res.CorrectN = len(correctTimes)
	if len(correctTimes) > 0 {
		res.CorrectP50, res.CorrMax = correctTimes[len(correctTimes)/2], correctTimes[len(correctTimes)-1]
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := b.measureSlowClients(ctx, cs, wh, correct, &res); err != nil {
		return res, err
	}
	if err := b.measureBindingLists(ctx, cs, wh, &res); err != nil {
		return res, err
	}
	// Last: what the watches keep stays in the process, and Go returns freed memory slowly.
	return res, b.measureLargeWorkloads(ctx, cs, wh, &res)
}

// measureLargeWorkloads creates largeWorkloads unarmed Deployments of one replica, each with an env
// value of largeWorkloadSize (no NOETL variable: no review reaches the webhook), waits until the
// controllers have made their Pods, and reads the webhook's memory: what its watches keep of them.
func (b *bench) measureLargeWorkloads(ctx context.Context, cs kubernetes.Interface, wh *harness.Webhook, res *budgetResult) error {
	b.step("admission budget: %d Deployments with a %s env value in %s (their ReplicaSets and Pods too) in the webhook's watches", largeWorkloads, mibString(largeWorkloadSize), namespace)
	if err := resetPeak(wh.PID()); err != nil {
		return err
	}
	deployments := cs.AppsV1().Deployments(namespace)
	defer func() {
		for i := range largeWorkloads {
			_ = deployments.Delete(context.WithoutCancel(ctx), fmt.Sprintf("ehdb-bench-large-%02d", i), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		}
	}()
	value := strings.Repeat("x", largeWorkloadSize)
	labels := map[string]string{"app": "ehdb-bench-large"}
	for i := range largeWorkloads {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ehdb-bench-large-%02d", i)}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "registry.invalid/app:1", Env: []corev1.EnvVar{{Name: "PAYLOAD", Value: value}}}}}}}}
		if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("Deployment %d of %d: %w", i+1, largeWorkloads, err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ehdb-bench-large"})
		return err == nil && len(pods.Items) >= largeWorkloads, nil
	}); err != nil {
		return fmt.Errorf("waiting for the controllers to make the %d Pods: %w", largeWorkloads, err)
	}
	sleepCtx(ctx, 5*time.Second) // the webhook's watches take in the last of them
	rss, peak, err := procMemory(wh.PID())
	if err != nil {
		return err
	}
	res.Large, res.LargeAt, res.LargePeak = largeWorkloads, rss, peak
	return ctx.Err()
}

// The namespace admin's bindings of the twenty-sixth red team: 16 RoleBindings of 14,000 made-up
// accounts each (a 15.5 MB list), which every RBAC review of the namespace lists fresh; 32 such
// reviews at once held a copy each, 474 MB.
const (
	bigBindings        = 16
	bigBindingSubjects = 14000
	bindingWorkers     = 32
	// floodWorkers is team E's 150 loops of dry-run deletes, in round numbers: four times the
	// slots one webhook process judges at once, twice the connections it keeps open.
	floodWorkers = 128
	// goalBindingRSS is the chart's memory limit: the namespace admin decides how large the lists
	// are (up to kubeapi.MaxBindingListBytes each), the webhook shares them among concurrent
	// reviews, and what matters is that it is never killed for them (a killed webhook fails every
	// Pod open until it restarts).
	goalBindingRSS = 128 << 20
)

// measureBindingLists creates those bindings in the writer's namespace, then sends from
// bindingWorkers at once, for Window, a server-side dry-run update of the writer's Role that adds
// a harmless rule: an RBAC review that lists the namespace's RoleBindings and must be admitted.
func (b *bench) measureBindingLists(ctx context.Context, cs kubernetes.Interface, wh *harness.Webhook, res *budgetResult) error {
	roles, err := cs.RbacV1().Roles(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	i := slices.IndexFunc(roles.Items, func(r rbacv1.Role) bool {
		return slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Verbs, webhook.VerbElect) })
	})
	if i < 0 {
		return errors.New("no writer Role (one granting " + webhook.VerbElect + ") in " + namespace)
	}
	role := roles.Items[i].DeepCopy()
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
	b.step("admission budget: %d RoleBindings of %d made-up accounts each in %s, then %d workers updating Role %s (dry run) for %s", bigBindings, bigBindingSubjects, namespace, bindingWorkers, role.Name, res.Window)
	rbs := cs.RbacV1().RoleBindings(namespace)
	defer func() {
		for j := range bigBindings {
			_ = rbs.Delete(context.WithoutCancel(ctx), fmt.Sprintf("ehdb-bench-big-%02d", j), metav1.DeleteOptions{})
		}
	}()
	for j := range bigBindings {
		subjects := make([]rbacv1.Subject, bigBindingSubjects)
		for k := range subjects {
			subjects[k] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: fmt.Sprintf("made-up-%02d-%05d", j, k)}
		}
		if _, err := rbs.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ehdb-bench-big-%02d", j)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("RoleBinding %d of %d: %w", j+1, bigBindings, err)
		}
	}
	if err := resetPeak(wh.PID()); err != nil {
		return err
	}
	res.Bindings, res.BindingWorkers = bigBindings*bigBindingSubjects, bindingWorkers
	wctx, cancel := context.WithTimeout(ctx, res.Window)
	defer cancel()
	var mu sync.Mutex
	var times []time.Duration
	var wg sync.WaitGroup
	for range bindingWorkers {
		wg.Go(func() {
			for wctx.Err() == nil {
				start := time.Now()
				_, err := cs.RbacV1().Roles(namespace).Update(wctx, role, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				took := time.Since(start)
				mu.Lock()
				switch {
				case wctx.Err() != nil:
				case err != nil:
					res.BindingRefused++
					if res.BindingFirstError == "" {
						res.BindingFirstError = truncateText(err.Error(), 300)
					}
				default:
					times = append(times, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_, peak, err := procMemory(wh.PID())
	if err != nil {
		return err
	}
	res.BindingPeak = peak
	slices.Sort(times)
	res.BindingN = len(times)
	if len(times) > 0 {
		res.BindingP50, res.BindingMax = times[len(times)/2], times[len(times)-1]
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.measureFlood(ctx, cs, wh, role.Name, res)
}

// measureFlood sends, from floodWorkers at once for Window, a dry-run delete of the writer's
// RoleBinding (of role) under those bindings — refused, since an armed writer could use it, after a review
// that lists them all — while the armed Pod is sent every 100 ms.
func (b *bench) measureFlood(ctx context.Context, cs kubernetes.Interface, wh *harness.Webhook, role string, res *budgetResult) error {
	bindings, err := cs.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	i := slices.IndexFunc(bindings.Items, func(rb rbacv1.RoleBinding) bool { return rb.RoleRef.Kind == "Role" && rb.RoleRef.Name == role })
	if i < 0 {
		return fmt.Errorf("no RoleBinding of Role %s in %s", role, namespace)
	}
	target := bindings.Items[i].Name
	armed, err := armedPod(ctx, cs)
	if err != nil {
		return err
	}
	b.step("admission budget: %d workers deleting RoleBinding %s (dry run) for %s while an armed Pod is sent every 100 ms", floodWorkers, target, res.Window)
	if err := resetPeak(wh.PID()); err != nil {
		return err
	}
	res.FloodWorkers = floodWorkers
	wctx, cancel := context.WithTimeout(ctx, res.Window)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Go(func() {
			for wctx.Err() == nil {
				_ = cs.RbacV1().RoleBindings(namespace).Delete(wctx, target, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
				sent.Add(1)
			}
		})
	}
	for wctx.Err() == nil {
		start := time.Now()
		_, err := cs.CoreV1().Pods(namespace).Create(ctx, armed, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		res.FloodPodN++
		res.FloodPodMax = max(res.FloodPodMax, time.Since(start))
		if err == nil {
			res.FloodPodAdmitted++
		} else if !strings.Contains(err.Error(), "refusing to arm") && res.FloodFirstOther == "" {
			res.FloodFirstOther = truncateText(err.Error(), 300)
		}
		sleepCtx(wctx, 100*time.Millisecond)
	}
	wg.Wait()
	_, peak, err := procMemory(wh.PID())
	if err != nil {
		return err
	}
	res.FloodPeak, res.FloodSent = peak, int(sent.Load())
	return ctx.Err()
}

// armedPod is a bare Pod the guard must refuse and that fails open: armed, its election off, the
// default ServiceAccount. It is an error if a dry-run create of it is admitted with no attack.
func armedPod(ctx context.Context, cs kubernetes.Interface) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-bench-armed-pod", Namespace: namespace},
		Spec: webhooktest.ReferenceWriter(namespace, webhooktest.Armed()).Spec.Template.Spec}
	p.Spec.ServiceAccountName = ""
	if _, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		return nil, errors.New("the armed Pod with the election off and the default ServiceAccount was admitted with no attack: the guard is not in its path")
	}
	return p, nil
}

// configMapReader creates the big ConfigMaps and returns the Deployment that reads them all,
// unarmed (its fencing switch, in one of them, is off), and a cleanup.
func (b *bench) configMapReader(ctx context.Context, cs kubernetes.Interface) (*appsv1.Deployment, func(), error) {
	b.step("admission budget: %d ConfigMaps of %s in %s", bigConfigMaps, mibString(bigConfigMapSize), namespace)
	blob := strings.Repeat("x", bigConfigMapSize-64)
	var names []string
	for i := range bigConfigMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ehdb-bench-big-%d", i), Namespace: namespace},
			Data: map[string]string{"blob": blob}}
		if i == bigConfigMaps-1 {
			cm.Data[webhook.EnvFencing] = "shadow"
		}
		if _, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, func() {}, fmt.Errorf("creating ConfigMap %s: %w", cm.Name, err)
		}
		names = append(names, cm.Name)
	}
	cleanup := func() {
		for _, n := range names {
			_ = cs.CoreV1().ConfigMaps(namespace).Delete(context.WithoutCancel(ctx), n, metav1.DeleteOptions{})
		}
	}
	tmpl := webhooktest.ReferenceWriter(namespace).Spec.Template
	c := &tmpl.Spec.Containers[0]
	c.Env = nil
	for _, n := range names {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-bench-reads-big-configmaps", Namespace: namespace},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl}}
	if _, err := cs.AppsV1().Deployments(namespace).Create(ctx, d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		cleanup()
		return nil, func() {}, fmt.Errorf("the unarmed reader of %d ConfigMaps of 1 MB was refused alone: %w", bigConfigMaps, err)
	}
	return d, cleanup, nil
}

// measureSlowClients holds slowClients hostile connections open against the webhook's own
// address for the window while a correct StatefulSet and the armed Pod are sent in turn.
func (b *bench) measureSlowClients(ctx context.Context, cs kubernetes.Interface, wh *harness.Webhook, correct *appsv1.StatefulSet, res *budgetResult) error {
	res.Slow, res.SlowWindow = slowClients, time.Minute
	if b.opts.quick {
		res.SlowWindow = 15 * time.Second
	}
	u, err := url.Parse(wh.URL)
	if err != nil {
		return err
	}
	armed, err := armedPod(ctx, cs)
	if err != nil {
		return err
	}
	b.step("admission budget: %d hostile connections (a POST claiming %s; half send a byte a second, half 32 KiB every 450 ms) for %s while reviews are timed", res.Slow, mibString(slowClaimedBytes), res.SlowWindow)
	if err := resetPeak(wh.PID()); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, res.SlowWindow)
	defer cancel()
	var opened atomic.Int64
	var wg sync.WaitGroup
	for i := range res.Slow {
		chunk, every := 1, time.Second
		if i%2 == 1 {
			chunk, every = 32<<10, 450*time.Millisecond
		}
		wg.Go(func() {
			for wctx.Err() == nil {
				opened.Add(1)
				trickle(wctx, u.Host, u.Path, chunk, every)
			}
		})
	}
	var times []time.Duration
	for turn := 0; wctx.Err() == nil; turn++ {
		start := time.Now()
		if turn%2 == 0 {
			err := dryRun(ctx, cs, correct)
			took := time.Since(start)
			if err != nil {
				res.SlowCorrectErrors++
				if res.SlowFirstError == "" {
					res.SlowFirstError = truncateText(err.Error(), 300)
				}
			} else {
				times = append(times, took)
			}
		} else {
			res.SlowPodN++
			if _, err := cs.CoreV1().Pods(namespace).Create(ctx, armed, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
				res.SlowPodAdmitted++
			}
		}
		sleepCtx(wctx, 100*time.Millisecond)
	}
	wg.Wait()
	_, peak, err := procMemory(wh.PID())
	if err != nil {
		return err
	}
	res.SlowPeak, res.SlowOpened = peak, int(opened.Load())
	slices.Sort(times)
	res.SlowCorrectN = len(times)
	if len(times) > 0 {
		res.SlowCorrectP50, res.SlowCorrectMax = times[len(times)/2], times[len(times)-1]
	}
	return ctx.Err()
}

// trickle is one hostile connection: TLS without a client certificate, headers claiming
// slowClaimedBytes, then chunk bytes every interval until the webhook hangs up or ctx ends.
func trickle(ctx context.Context, addr, path string, chunk int, every time.Duration) {
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // #nosec G402 -- the attacker checks nothing
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		sleepCtx(ctx, time.Second)
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := fmt.Fprintf(conn, "POST %s?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, slowClaimedBytes); err != nil {
		return
	}
	spaces := bytes.Repeat([]byte{' '}, chunk)
	for sent := 0; sent < slowClaimedBytes && ctx.Err() == nil; sent += chunk {
		if _, err := conn.Write(spaces); err != nil {
			return
		}
		sleepCtx(ctx, every)
	}
}

// procMemory reads VmRSS and VmHWM (peak RSS) of pid, in bytes.
func procMemory(pid int) (rss, peak int64, err error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the webhook's memory: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing %s %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, errors.New("no VmRSS/VmHWM in /proc/<pid>/status")
	}
	return rss, peak, nil
}

// resetPeak resets the process's VmHWM to its current RSS (proc(5), clear_refs "5").
func resetPeak(pid int) error {
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the webhook's peak RSS: %w", err)
	}
	return nil
}

// decisionTimeOf reads the sum (seconds) and count of ehdb_webhook_decision_duration_seconds for
// StatefulSets with the given result from the webhook's /metrics; zeros if the scrape fails.
func decisionTimeOf(metricsURL, result string) (float64, uint64) {
	resp, err := scrapeClient.Get(metricsURL)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0
	}
	// Summed over the other labels (dry_run: the bench's reviews may be server-side dry runs).
	var sum float64
	var count uint64
	for _, m := range families["ehdb_webhook_decision_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["kind"] == "StatefulSet" && labels["result"] == result {
			sum, count = sum+m.GetHistogram().GetSampleSum(), count+m.GetHistogram().GetSampleCount()
		}
	}
	return sum, count
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func mibString(b int64) string { return fmt.Sprintf("%.1f MiB", mib(uint64(max(b, 0)))) }

func renderBudget(p func(string, ...any), r *budgetResult, err error) {
	p("")
	p("## Webhook budget: the worst review")
	p("")
	if err != nil {
		p("**Failed:** %v", err)
		p("")
	}
	if r == nil || r.Replicas == 0 {
		return
	}
	p("An armed, otherwise correct reference writer with `replicas: %d` and no `NOETL_EHDB_ELECTION_SHARD` (one shard per ordinal), "+
		"server-side dry-run create as cluster-admin. Memory is the webhook process's VmRSS/VmHWM (peak reset before each part).", r.Replicas)
	p("")
	p("| measure | value | goal |")
	p("| --- | ---: | --- |")
	p("| slowest decision of %d single worst reviews (webhook's own histogram) | %s | %s |", r.Single, dur(r.DecideMax), verdict(r.DecideMax > 0 && r.DecideMax < goalWorstDecide, "< 50 ms"))
	p("| slowest of them as the client saw it (API server included) | %s | |", dur(r.LatencyMax))
	p("| extra peak RSS over %s before them | %s | %s |", mibString(r.RSSBefore), mibString(r.ExtraPeak), verdict(r.ExtraPeak < goalWorstExtraRSS, "< 10 MB"))
	p("| peak RSS with %d workers sending worst reviews for %s (%d sent, %d not refused by the guard) | %s | %s |",
		r.Concurrency, r.Window, r.WorstSent, r.WorstNotRefused, mibString(r.ConcurrentPeak), verdict(r.ConcurrentPeak > 0 && r.ConcurrentPeak < goalConcurrentRSS, "< 64 MiB"))
	p("| a correct review meanwhile: p50 / max of %d (%d errors) | %s / %s | %s |", r.CorrectN, r.CorrectErrors, dur(r.CorrectP50), dur(r.CorrMax),
		verdict(r.CorrectN > 0 && r.CorrectErrors == 0 && r.CorrMax < goalCorrectLatency, "max < 1 s"))
	p("| the unarmed Deployment reading %d ConfigMaps of 1 MB, sent by half of those workers: refused of %d (every refusal is wrong) | %d | %s |",
		bigConfigMaps, r.ReaderSent, r.ReaderRefused, verdict(r.ReaderSent > 0 && r.ReaderRefused == 0, "0"))
	if r.Slow > 0 {
		p("| %d hostile TLS connections (no credentials, a POST claiming %s; half a byte a second, half 32 KiB every 450 ms) held for %s, %d opened in all: peak RSS | %s | %s |",
			r.Slow, mibString(slowClaimedBytes), r.SlowWindow, r.SlowOpened, mibString(r.SlowPeak), verdict(r.SlowPeak > 0 && r.SlowPeak < goalConcurrentRSS, "< 64 MiB"))
		p("| meanwhile a correct StatefulSet: p50 / max of %d (%d errors) | %s / %s | %s |", r.SlowCorrectN, r.SlowCorrectErrors, dur(r.SlowCorrectP50), dur(r.SlowCorrectMax),
			verdict(r.SlowCorrectN > 0 && r.SlowCorrectErrors == 0 && r.SlowCorrectMax < goalCorrectLatency, "max < 1 s"))
		p("| meanwhile an armed Pod, election off, default ServiceAccount (fails open): admitted of %d | %d | %s |", r.SlowPodN, r.SlowPodAdmitted, verdict(r.SlowPodN > 0 && r.SlowPodAdmitted == 0, "0"))
	}
	if r.Large > 0 {
		p("| %d Deployments with a %s env value, their ReplicaSets and Pods, in the webhook's watches: RSS once held / peak while taken in | %s / %s | %s |",
			r.Large, mibString(largeWorkloadSize), mibString(r.LargeAt), mibString(r.LargePeak), verdict(r.LargePeak > 0 && r.LargePeak < goalBindingRSS, "peak < 128 MiB, the chart's limit"))
	}
	if r.BindingWorkers > 0 {
		p("| %d RoleBindings naming %d made-up accounts in all, %d workers sending a Role update the guard must admit for %s: peak RSS | %s | %s |",
			bigBindings, r.Bindings, r.BindingWorkers, r.Window, mibString(r.BindingPeak), verdict(r.BindingPeak > 0 && r.BindingPeak < goalBindingRSS, "< 128 MiB, the chart's limit"))
		p("| those updates: admitted p50 / max of %d, refused or failed (every one is wrong) | %s / %s, %d | %s |", r.BindingN, dur(r.BindingP50), dur(r.BindingMax), r.BindingRefused,
			verdict(r.BindingN > 0 && r.BindingRefused == 0, "0 refused"))
	}
	if r.FloodWorkers > 0 {
		p("| %d workers deleting the writer's RoleBinding (dry run, refused) for %s under those bindings, %d sent: peak RSS | %s | %s |",
			r.FloodWorkers, r.Window, r.FloodSent, mibString(r.FloodPeak), verdict(r.FloodPeak > 0 && r.FloodPeak < goalBindingRSS, "< 128 MiB, the chart's limit"))
		p("| meanwhile the armed Pod (fails open): admitted of %d, slowest answer %s | %d | %s |", r.FloodPodN, dur(r.FloodPodMax), r.FloodPodAdmitted,
			verdict(r.FloodPodN > 0 && r.FloodPodAdmitted == 0, "0"))
	}
	p("")
	p("The denial: `%s`", strings.ReplaceAll(r.Denial, "\n", " "))
	if r.ReaderFirstRefusal != "" {
		p("")
		p("First refusal of the ConfigMap reader: %s", r.ReaderFirstRefusal)
	}
	if r.BindingFirstError != "" {
		p("")
		p("First refusal of the Role update under the bindings: %s", r.BindingFirstError)
	}
	if r.FloodFirstOther != "" {
		p("")
		p("First answer to the armed Pod under the flood that was not the guard's refusal: %s", r.FloodFirstOther)
	}
	if r.SlowFirstError != "" {
		p("")
		p("First error of a correct review under the hostile connections: %s", r.SlowFirstError)
	}
	if r.FirstError != "" {
		p("")
		p("First error of a correct review: %s", r.FirstError)
	}
}
