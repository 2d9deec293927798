package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// `ehdb-webhook check` is what the chart's `helm test` Pod runs (templates/tests/check.yaml), in the
// webhook's own image: it asks the API server, as an operator would, whether the installed release
// works. The guard answers (a server-side dry run of an armed Pod is refused by it, of an unarmed
// StatefulSet, whose webhook fails closed, admitted), and the writer's account has exactly the
// Lease access SPEC gives it, no more, no less, as the API server's authorizer decides it.

// writerLeaseVerbs is SPEC's grant: the election reads, watches, creates and compare-and-swap
// updates its Lease. Never delete (a recreated Lease restarts the epoch) and never patch.
var writerLeaseVerbs = []string{"get", "list", "watch", "create", "update"}

// leaseVerbs are the verbs judged: the grant and every other verb on leases.
var leaseVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

type checkOptions struct {
	kubeconfig, namespace, writerSA string
	webhook                         bool
	timeout                         time.Duration
}

// runCheck parses the check's flags, runs every check and prints one line per check; the exit code
// is 0 when all passed, 1 when one failed, 2 on bad flags.
func runCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o checkOptions
	fs := flag.NewFlagSet("ehdb-webhook check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; in-cluster configuration when empty")
	fs.StringVar(&o.namespace, "namespace", getenv("POD_NAMESPACE"), "the release namespace (default: $POD_NAMESPACE)")
	fs.StringVar(&o.writerSA, "writer-service-account", "noetl-cmdbus-writer", "the writer's ServiceAccount")
	fs.BoolVar(&o.webhook, "webhook", true, "also check that the admission webhook answers")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "bound of all checks")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.namespace == "" || o.writerSA == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "ehdb-webhook check: needs --namespace and --writer-service-account, and no arguments")
		return 2
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		fmt.Fprintln(stderr, "ehdb-webhook check:", err)
		return 1
	}
	cfg.UserAgent = "ehdb-webhook-check"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "ehdb-webhook check:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	failed := false
	report := func(name string, problems []string, passed string) {
		if len(problems) == 0 {
			fmt.Fprintf(stdout, "ok    %s: %s\n", name, passed)
			return
		}
		failed = true
		for _, p := range problems {
			fmt.Fprintf(stdout, "FAIL  %s: %s\n", name, p)
		}
	}
	if o.webhook {
		report("webhook", checkGuardRefusesArmedPod(ctx, cs, o.namespace), "an armed Pod (default ServiceAccount) is refused by the guard")
		report("webhook", checkGuardAdmitsUnarmed(ctx, cs, o.namespace), "an unarmed StatefulSet is admitted through the fail-closed workloads webhook")
	}
	writer := "system:serviceaccount:" + o.namespace + ":" + o.writerSA
	allowed, err := leaseAccess(ctx, cs, o.namespace, o.writerSA)
	if err != nil {
		report("writer RBAC", []string{err.Error()}, "")
	} else {
		report("writer RBAC", writerRBACProblems(writer, allowed), writer+" may "+strings.Join(writerLeaseVerbs, ", ")+" leases, nothing else on them")
	}
	if o.writerSA != "default" {
		allowed, err := leaseAccess(ctx, cs, o.namespace, "default")
		if err != nil {
			report("writer RBAC", []string{err.Error()}, "")
		} else {
			report("writer RBAC", defaultSAProblems(o.namespace, allowed), "the namespace's default ServiceAccount may not create or update leases")
		}
	}
	if failed {
		return 1
	}
	return 0
}

// writerRBACProblems compares the writer's access to leases with SPEC's grant: each missing verb
// and each extra one is a problem.
func writerRBACProblems(writer string, allowed map[string]bool) []string {
	var missing, extra []string
	for _, v := range leaseVerbs {
		want := slices.Contains(writerLeaseVerbs, v)
		switch {
		case want && !allowed[v]:
			missing = append(missing, v)
		case !want && allowed[v]:
			extra = append(extra, v)
		}
	}
	var out []string
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%s may not %s leases: the election cannot run (writer.rbac.create, the RoleBinding's subject)", writer, strings.Join(missing, ", ")))
	}
	if len(extra) > 0 {
		out = append(out, fmt.Sprintf("%s may also %s leases: SPEC grants only %s (a delete restarts a shard's epoch; every write must be a compare-and-swap update); find the binding that grants it", writer, strings.Join(extra, ", "), strings.Join(writerLeaseVerbs, ", ")))
	}
	return out
}

// defaultSAProblems: the writer's grant must be bound to the writer's account only; the
// namespace's default account (every pod that names none) must not write Leases.
func defaultSAProblems(ns string, allowed map[string]bool) []string {
	var bad []string
	for _, v := range []string{"create", "update"} {
		if allowed[v] {
			bad = append(bad, v)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("system:serviceaccount:%s:default may %s leases: every pod that names no ServiceAccount could take a shard", ns, strings.Join(bad, ", "))}
}

// leaseAccess asks the API server's authorizer (LocalSubjectAccessReview) which lease verbs the
// account has in the namespace, with the groups its token carries.
func leaseAccess(ctx context.Context, cs kubernetes.Interface, ns, sa string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, v := range leaseVerbs {
		r, err := cs.AuthorizationV1().LocalSubjectAccessReviews(ns).Create(ctx, &authorizationv1.LocalSubjectAccessReview{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns},
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + ns + ":" + sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: v, Group: "coordination.k8s.io", Resource: "leases",
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("asking whether %s may %s leases in %s: %w", sa, v, ns, err)
		}
		out[v] = r.Status.Allowed
	}
	return out, nil
}

var checkDryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// checkPodSpec is a restricted-compliant pod (a namespace enforcing Pod Security admits it) with env.
func checkPodSpec(sa string, env ...corev1.EnvVar) corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: sa,
		SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{
			Name: "writer", Image: "ehdb-election-check.invalid/never-pulled", Env: env,
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		}},
	}
}

// checkGuardRefusesArmedPod: an armed Pod on the default ServiceAccount, created as a server-side
// dry run (nothing is stored), must be refused by the guard itself. Pods fail open, so an admitted
// Pod means the webhook did not answer.
func checkGuardRefusesArmedPod(ctx context.Context, cs kubernetes.Interface, ns string) []string {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ehdb-election-check-", Namespace: ns},
		Spec:       checkPodSpec("default", corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", Value: "true"}),
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, checkDryRun)
	switch {
	case err == nil:
		return []string{"an armed Pod on the default ServiceAccount was admitted: the guard did not answer (Pods fail open), or does not guard " + ns}
	case !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "refusing to arm"):
		return []string{"an armed Pod was refused, but not by the guard: " + err.Error()}
	}
	return nil
}

// checkGuardAdmitsUnarmed: a StatefulSet that sets NOETL_EHDB_FENCING=shadow reaches the workloads
// webhook, which fails closed: admitted means the guard answered and judged it unarmed.
func checkGuardAdmitsUnarmed(ctx context.Context, cs kubernetes.Interface, ns string) []string {
	labels := map[string]string{"app.kubernetes.io/name": "ehdb-election-check"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ehdb-election-check-", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: checkPodSpec("default", corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "shadow"})},
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, checkDryRun); err != nil {
		return []string{"an unarmed StatefulSet was refused (the workloads webhook fails closed: is the webhook up?): " + err.Error()}
	}
	return nil
}
