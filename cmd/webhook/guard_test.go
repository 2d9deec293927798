package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/noetl/ehdb-election/internal/testcluster"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// TestGuardAgainstTheAPIServer registers the webhook (served in-process on loopback with its own
// CA) with a real API server and walks the reference writer from "armed and nothing else" to
// admitted, one requirement at a time, each step also as a server-side dry run.
func TestGuardAgainstTheAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ns := c.NewNamespace(t)
	ctx := context.Background()

	dir := t.TempDir()
	ca := servingCert(t, dir)
	port := freePort(t)
	probes, metrics := startWebhook(t, []string{
		"--kubeconfig=" + c.Kubeconfig, "--cert-rotation=false", "--cert-dir=" + dir,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--namespace=" + ns,
	}, nil)
	waitReady(t, 30*time.Second, probes)
	if code, _ := get(probes + "/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	registerGuard(t, cs, "ehdb-election-"+ns, fmt.Sprintf("https://127.0.0.1:%d/validate", port), ca, ns)

	// The API server picks the configuration up asynchronously: wait until the guard answers.
	armedBare := wt.ReferenceWriter(ns, wt.Armed())
	eventually(t, 30*time.Second, "the guard in the admission chain", func() error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, armedBare, dryRun)
		if err == nil {
			return errNotYet
		}
		if !strings.Contains(err.Error(), "refusing to arm") {
			return err
		}
		return nil
	})

	lease := fmt.Sprintf("Lease %s/ehdb-shard-00000000 (shard 0) does not exist", ns)
	// attempt creates sts (for real and as a dry run) and returns the denial, or "" if admitted
	// by both; a dry run and a real create must be judged alike.
	attempt := func(what string, sts *appsv1.StatefulSet) string {
		t.Helper()
		_, dryErr := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, dryRun)
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
		if (err == nil) != (dryErr == nil) {
			t.Fatalf("%s: dry run %v, create %v", what, dryErr, err)
		}
		if err == nil {
			return ""
		}
		msg := denial(t, err, what)
		if dmsg := denial(t, dryErr, what+" (dry run)"); dmsg != msg {
			t.Errorf("%s: the dry run was refused differently:\n%s\n%s", what, dmsg, msg)
		}
		return msg
	}

	// 1. Armed and nothing else: every missing piece is named.
	msg := attempt("armed without election", armedBare)
	t.Logf("the client reads:\n%s", msg)
	mustContain(t, msg, `container "noetl-worker": election is not enabled: NOETL_EHDB_ELECTION is not set`,
		"default ServiceAccount", lease, "3 requirement(s) unmet", "Fix: ")

	// 2. Election on, still the default ServiceAccount.
	msg = attempt("election on, default SA", wt.ReferenceWriter(ns, wt.Armed(), wt.ElectionOn()))
	mustContain(t, msg, "default ServiceAccount", lease, "2 requirement(s) unmet")
	mustNotContain(t, msg, "NOETL_EHDB_ELECTION is not set")

	// 3. A dedicated ServiceAccount that does not exist, then exists without a binding.
	writer := wt.ReferenceWriter(ns, wt.Armed(), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA))
	msg = attempt("SA missing", writer)
	mustContain(t, msg, fmt.Sprintf("ServiceAccount %s/%s does not exist", ns, wt.WriterSA))
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg = attempt("SA unbound", writer)
	mustContain(t, msg, fmt.Sprintf("ServiceAccount %s/%s may not get, create, update coordination.k8s.io leases in namespace %s", ns, wt.WriterSA, ns), lease)
	mustNotContain(t, msg, "default ServiceAccount", "does not exist.")

	// 4. Bound (the chart's Role and RoleBinding): only the order check is left.
	bindWriter(t, cs, ns)
	eventually(t, 10*time.Second, "the binding seen by the authorizer", func() error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, writer, dryRun)
		if err != nil && strings.Contains(err.Error(), "may not get") {
			return err
		}
		return nil
	})
	msg = attempt("bound, no Lease", writer)
	mustContain(t, msg, lease, "1 requirement(s) unmet", "NOETL_EHDB_FENCING=shadow")
	mustNotContain(t, msg, "ServiceAccount")

	// 5. A Lease that is held but has never minted (epoch 0) is not enough; epoch 1 is.
	l := wt.LiveLease(ns, 0, time.Now(), 0)
	created, err := cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the webhook's Lease watch has the epoch-0 record", func() error {
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, writer, dryRun); err == nil || !strings.Contains(err.Error(), "epoch (leaseTransitions) 0") {
			return fmt.Errorf("dry run: %v", err)
		}
		return nil
	})
	msg = attempt("Lease at epoch 0", writer)
	mustContain(t, msg, "epoch (leaseTransitions) 0")
	created.Spec.LeaseTransitions = ptrTo[int32](1)
	created.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook reads Leases from its watch, which trails the API server: the epoch-1 record
	// reaches it a moment after the update returns (CI saw the dry run judge epoch 0).
	eventually(t, 10*time.Second, "a dry run with everything in place admitted", func() error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, writer, dryRun)
		return err
	})
	if _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, wt.WriterName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry run persisted the StatefulSet: %v", err)
	}
	if msg := attempt("everything in place", writer); msg != "" {
		t.Fatalf("refused with everything in place:\n%s", msg)
	}

	// 6. Updates: armed to armed passes without the order check; unarmed to armed needs it.
	if err := cs.CoordinationV1().Leases(ns).Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	updateEnv := func(name, value string) error {
		// The StatefulSet controller writes the status meanwhile: retry on conflicts only.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := cs.AppsV1().StatefulSets(ns).Get(ctx, wt.WriterName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			wt.SetEnv(name, value)(s)
			_, err = cs.AppsV1().StatefulSets(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		})
	}
	if err := updateEnv("NOETL_EHDB_ELECTION_LEASE_SECS", "20"); err != nil {
		t.Fatalf("armed to armed update without a Lease: %v", err)
	}
	if err := updateEnv("NOETL_EHDB_FENCING", "shadow"); err != nil {
		t.Fatalf("disarming: %v", err)
	}
	msg = denial(t, updateEnv("NOETL_EHDB_FENCING", "enforce"), "re-arming without a Lease")
	mustContain(t, msg, lease)

	// 7. An unarmed Deployment is admitted (and an armed Pod on the default SA is not).
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "api", Image: "api", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "shadow"}}}}}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("unarmed Deployment: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "w", Image: "w", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}}}}}}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	mustContain(t, denial(t, err, "armed Pod on the default SA"), "default ServiceAccount")

	// The decisions are on /metrics.
	_, body := get(metrics + "/metrics")
	for _, series := range []string{
		`ehdb_webhook_decisions_total{dry_run="false",kind="StatefulSet",reason="election_disabled",result="denied"}`,
		`ehdb_webhook_decisions_total{dry_run="false",kind="StatefulSet",reason="default_service_account",result="denied"}`,
		`ehdb_webhook_decisions_total{dry_run="false",kind="StatefulSet",reason="service_account_unbound",result="denied"}`,
		`ehdb_webhook_decisions_total{dry_run="false",kind="StatefulSet",reason="lease_not_live",result="denied"}`,
		`ehdb_webhook_decisions_total{dry_run="false",kind="Deployment",reason="unarmed",result="allowed"}`,
		`ehdb_webhook_decision_duration_seconds_count{dry_run="false",kind="StatefulSet",result="allowed"}`,
	} {
		if v := sample(body, series); v < 1 {
			t.Errorf("%s = %v, want >= 1", series, v)
		}
	}
}

// bindWriter creates the chart's Role and RoleBinding for the writer ServiceAccount.
func bindWriter(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ehdb-shard-election"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sample returns the value of one series in a Prometheus text exposition, or -1.
func sample(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func ptrTo[T any](v T) *T { return &v }
