package charttest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// recorder is a stand-in admission webhook on loopback: it admits everything and records what the
// API server sent it, so a test sees exactly which objects the chart's webhook configuration routes.
type recorder struct {
	mu   sync.Mutex
	seen map[string]string // "Kind/namespace/name" -> operation
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	name := req.Name
	if name == "" { // generateName: the name is assigned after admission
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = json.Unmarshal(req.Object.Raw, &meta)
		name = meta.Metadata.GenerateName
	}
	rec.mu.Lock()
	rec.seen[req.Kind.Kind+"/"+req.Namespace+"/"+name] = string(req.Operation)
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true},
	})
}

func (rec *recorder) get(kind, ns, name string) (string, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	op, ok := rec.seen[kind+"/"+ns+"/"+name]
	return op, ok
}

func (rec *recorder) names() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for k := range rec.seen {
		out = append(out, k)
	}
	return out
}

// pointWebhookAt redirects every entry of the release's webhook configuration to url, trusting ca.
// Everything else (rules, selectors, matchConditions, failure policies) stays as the chart rendered it.
func pointWebhookAt(t *testing.T, r *testRelease, url string, ca []byte) {
	t.Helper()
	ctx := context.Background()
	vwcs := r.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := vwcs.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.Service = nil
		vwc.Webhooks[i].ClientConfig.URL = ptr.To(url)
		vwc.Webhooks[i].ClientConfig.CABundle = ca
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func container(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) corev1.Container {
	return corev1.Container{Name: "writer", Image: "registry.invalid/writer:1", Env: env, EnvFrom: envFrom}
}

func initContainer(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) corev1.Container {
	c := container(env, envFrom)
	c.Name = "init"
	return c
}

var (
	fencing    = []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}
	fencingOff = []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "off"}}
	// A Windows process reads environment names regardless of case (webhook/envnames.go).
	fencingLower = []corev1.EnvVar{{Name: "noetl_ehdb_fencing", Value: "enforce"}}
	fencingMixed = []corev1.EnvVar{{Name: "Noetl_Ehdb_Fencing", Value: "shadow"}}
	otherEnv     = []corev1.EnvVar{{Name: "RUST_LOG", Value: "info"}}
	fromCM       = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "writer-env"}}}}
	fromSecret   = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "writer-env"}}}}
)

func podTemplate(c corev1.Container, init ...corev1.Container) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, InitContainers: init, RestartPolicy: corev1.RestartPolicyAlways},
	}
}

// creator creates one kind of object with a pod template (dry run unless real).
type creator func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error

func dryRun(real bool) metav1.CreateOptions {
	if real {
		return metav1.CreateOptions{}
	}
	return metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
}

var selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}}

var (
	createDeployment creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Selector: selector, Template: tpl}}, dryRun(real))
		return err
	}
	createStatefulSet creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.StatefulSetSpec{Selector: selector, Template: tpl, ServiceName: name}}, dryRun(real))
		return err
	}
	createDaemonSet creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		_, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DaemonSetSpec{Selector: selector, Template: tpl}}, dryRun(real))
		return err
	}
	createReplicaSet creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		_, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.ReplicaSetSpec{Selector: selector, Template: tpl}}, dryRun(real))
		return err
	}
	createJob creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Template: tpl}}, dryRun(real))
		return err
	}
	createCronJob creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := cs.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tpl}}}}, dryRun(real))
		return err
	}
	createPod creator = func(ctx context.Context, cs kubernetes.Interface, ns, name string, tpl corev1.PodTemplateSpec, real bool) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: tpl.Labels, Annotations: tpl.Annotations},
			Spec: tpl.Spec}, dryRun(real))
		return err
	}
)

// TestWebhookRouting checks the chart's webhook configuration as the real API server applies it:
// rules, namespaceSelector and the CEL matchConditions decide what reaches the webhook; when the
// webhook is down, workloads fail closed and Pods fail open. The configuration is redirected to a
// recording webhook on loopback; nothing else about it changes.
func TestWebhookRouting(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	labels := map[string]string{isolationLabel: r.name}
	labelNamespace(t, r.cs, r.ns, labels)
	r.install(t, r.values(nil))
	ctx := context.Background()
	cs := r.cs

	guarded := r.c.NewNamespace(t)
	labelNamespace(t, cs, guarded, labels)
	labelNamespace(t, cs, "kube-system", labels)
	t.Cleanup(func() { labelNamespace(t, cs, "kube-system", map[string]string{isolationLabel: ""}) })

	rec := &recorder{seen: map[string]string{}}
	srv := httptest.NewUnstartedServer(rec)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pointWebhookAt(t, r, srv.URL+"/validate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	// The API server picks up webhook configuration changes asynchronously.
	waitFor(t, 30*time.Second, "the webhook configuration to take effect", func(ctx context.Context) (bool, error) {
		_ = createPod(ctx, cs, guarded, "armed-probe", podTemplate(container(fencing, nil)), false)
		_, ok := rec.get("Pod", guarded, "armed-probe")
		return ok, nil
	})

	// The webhook's own pod template, as rendered (plus the label the test selector needs): it must
	// never reach its own webhook.
	own := *typed[appsv1.Deployment](t, r.rendered.Find("Deployment", r.name+"-webhook")).Spec.Template.DeepCopy()
	own.Labels["app"] = "w"

	cases := []struct {
		name   string
		create creator
		ns     string
		tpl    corev1.PodTemplateSpec
		kind   string
		seen   bool
	}{
		{"quiet-deployment", createDeployment, guarded, podTemplate(container(nil, nil)), "Deployment", false},
		{"quiet-deployment-other-env", createDeployment, guarded, podTemplate(container(otherEnv, nil)), "Deployment", false},
		{"armed-deployment", createDeployment, guarded, podTemplate(container(fencing, nil)), "Deployment", true},
		{"armed-deployment-fencing-off", createDeployment, guarded, podTemplate(container(fencingOff, nil)), "Deployment", true},
		{"armed-statefulset-envfrom", createStatefulSet, guarded, podTemplate(container(nil, fromCM)), "StatefulSet", true},
		{"quiet-statefulset", createStatefulSet, guarded, podTemplate(container(otherEnv, nil)), "StatefulSet", false},
		{"armed-daemonset-init", createDaemonSet, guarded, podTemplate(container(nil, nil), initContainer(fencing, nil)), "DaemonSet", true},
		{"quiet-daemonset", createDaemonSet, guarded, podTemplate(container(nil, nil)), "DaemonSet", false},
		{"armed-replicaset", createReplicaSet, guarded, podTemplate(container(fencing, nil)), "ReplicaSet", true},
		{"quiet-replicaset", createReplicaSet, guarded, podTemplate(container(nil, nil)), "ReplicaSet", false},
		{"armed-job", createJob, guarded, podTemplate(container(fencing, nil)), "Job", true},
		{"quiet-job", createJob, guarded, podTemplate(container(nil, nil)), "Job", false},
		{"armed-cronjob", createCronJob, guarded, podTemplate(container(fencing, nil)), "CronJob", true},
		{"armed-cronjob-init-envfrom", createCronJob, guarded, podTemplate(container(nil, nil), initContainer(nil, fromSecret)), "CronJob", true},
		{"quiet-cronjob", createCronJob, guarded, podTemplate(container(otherEnv, nil)), "CronJob", false},
		{"armed-pod", createPod, guarded, podTemplate(container(fencing, nil)), "Pod", true},
		{"armed-pod-lower-case", createPod, guarded, podTemplate(container(fencingLower, nil)), "Pod", true},
		{"armed-deployment-mixed-case", createDeployment, guarded, podTemplate(container(fencingMixed, nil)), "Deployment", true},
		{"armed-pod-envfrom-secret", createPod, guarded, podTemplate(container(nil, fromSecret)), "Pod", true},
		{"armed-pod-init", createPod, guarded, podTemplate(container(nil, nil), initContainer(fencing, nil)), "Pod", true},
		{"quiet-pod", createPod, guarded, podTemplate(container(otherEnv, nil)), "Pod", false},
		// The release namespace is guarded (the writers run there); kube-system is not.
		{"armed-deployment-release-ns", createDeployment, r.ns, podTemplate(container(fencing, nil)), "Deployment", true},
		{"quiet-webhook-own-template", createDeployment, r.ns, own, "Deployment", false},
		{"quiet-webhook-own-pod", createPod, r.ns, own, "Pod", false},
		{"quiet-armed-kube-system", createDeployment, "kube-system", podTemplate(container(fencing, nil)), "Deployment", false},
	}
	for _, tc := range cases {
		if err := tc.create(ctx, cs, tc.ns, tc.name, tc.tpl, false); err != nil {
			t.Errorf("%s: create: %v", tc.name, err)
			continue
		}
		if op, ok := rec.get(tc.kind, tc.ns, tc.name); ok != tc.seen {
			t.Errorf("%s %s/%s reached the webhook = %v (%s), want %v", tc.kind, tc.ns, tc.name, ok, op, tc.seen)
		}
	}

	// UPDATE: a workload that turns armed reaches the webhook; its unarmed past, and everything the
	// controllers created from it, did not.
	if err := createDeployment(ctx, cs, guarded, "quiet-then-armed", podTemplate(container(nil, nil)), true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the Deployment controller to create a ReplicaSet", func(ctx context.Context) (bool, error) {
		rs, err := cs.AppsV1().ReplicaSets(guarded).List(ctx, metav1.ListOptions{})
		return err == nil && len(rs.Items) > 0, err
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the controller writes its status
		d, err := cs.AppsV1().Deployments(guarded).Get(ctx, "quiet-then-armed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Env = fencing
		_, err = cs.AppsV1().Deployments(guarded).Update(ctx, d, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if op, _ := rec.get("Deployment", guarded, "quiet-then-armed"); op != "UPDATE" {
		t.Errorf("arming update reached the webhook as %q, want UPDATE", op)
	}
	for _, k := range rec.names() {
		name := k[strings.LastIndex(k, "/")+1:]
		if strings.HasPrefix(name, "quiet") && k != "Deployment/"+guarded+"/quiet-then-armed" {
			t.Errorf("%s reached the webhook", k)
		}
	}

	// The webhook goes down: workloads that reach it are refused, Pods admitted, the rest untouched.
	srv.Close()
	down := []struct {
		name      string
		create    creator
		ns        string
		tpl       corev1.PodTemplateSpec
		refusedBy string // "" = admitted
	}{
		{"armed-deployment-down", createDeployment, guarded, podTemplate(container(fencing, nil)), "workloads.ehdb-election.noetl.io"},
		{"armed-cronjob-down", createCronJob, guarded, podTemplate(container(nil, fromCM)), "workloads.ehdb-election.noetl.io"},
		{"armed-deployment-release-ns-down", createDeployment, r.ns, podTemplate(container(fencing, nil)), "workloads.ehdb-election.noetl.io"},
		{"armed-pod-down", createPod, guarded, podTemplate(container(fencing, nil)), ""},
		{"quiet-deployment-down", createDeployment, guarded, podTemplate(container(otherEnv, nil)), ""},
		{"quiet-webhook-own-template-down", createDeployment, r.ns, own, ""},
	}
	for _, tc := range down {
		err := tc.create(ctx, cs, tc.ns, tc.name, tc.tpl, false)
		switch {
		case tc.refusedBy == "" && err != nil:
			t.Errorf("%s: refused while the webhook is down: %v", tc.name, err)
		case tc.refusedBy != "" && err == nil:
			t.Errorf("%s: admitted while the webhook is down; want fail closed", tc.name)
		case tc.refusedBy != "" && !strings.Contains(err.Error(), fmt.Sprintf("failed calling webhook %q", tc.refusedBy)):
			t.Errorf("%s: refused, but not by the unreachable webhook: %v", tc.name, err)
		}
	}
	// And the chart's own Deployment can still be changed (a rollout of the webhook itself).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wd, err := cs.AppsV1().Deployments(r.ns).Get(ctx, r.name+"-webhook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		wd.Spec.Template.Annotations = map[string]string{"restartedAt": time.Now().Format(time.RFC3339)}
		_, err = cs.AppsV1().Deployments(r.ns).Update(ctx, wd, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("updating the webhook's own Deployment while the webhook is down: %v", err)
	}
}

// warnings collects the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// TestWebhookPodsPassRestrictedPodSecurity installs into a namespace that enforces (and warns and
// audits) the restricted Pod Security Standard.
func TestWebhookPodsPassRestrictedPodSecurity(t *testing.T) {
	t.Parallel()
	r := newRelease(t, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	})
	r.install(t, r.values(nil))
	ctx := context.Background()

	w := &warnings{}
	cfg := rest.CopyConfig(r.c.Config)
	cfg.WarningHandler = w
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := typed[appsv1.Deployment](t, r.rendered.Find("Deployment", r.name+"-webhook"))
	tpl := d.Spec.Template

	// The workload and a Pod from its template, server-side dry run: admitted, and without a warning.
	if err := createDeployment(ctx, cs, r.ns, "psa-probe", corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}}, Spec: tpl.Spec}, false); err != nil {
		t.Errorf("Deployment with the webhook's pod template: %v", err)
	}
	if err := createPod(ctx, cs, r.ns, "psa-probe", tpl, false); err != nil {
		t.Errorf("Pod from the webhook's template: %v", err)
	}
	if msgs := w.take(); len(msgs) > 0 {
		t.Errorf("PodSecurity warnings: %q", msgs)
	}

	// The real thing: the ReplicaSet controller's Pods are admitted (they stay Pending: no kubelet).
	waitFor(t, 60*time.Second, "the webhook's Pods to be created", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		return err == nil && len(pods.Items) == int(*d.Spec.Replicas), err
	})

	// Negative control: the same template without its security context is refused here.
	bare := tpl.DeepCopy()
	bare.Spec.SecurityContext = nil
	bare.Spec.Containers[0].SecurityContext = nil
	if err := createPod(ctx, cs, r.ns, "psa-control", *bare, false); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a Pod without the security context: err = %v, want a PodSecurity violation (is the namespace enforcing?)", err)
	}
}
