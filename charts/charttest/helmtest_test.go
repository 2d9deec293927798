package charttest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// testHooks returns the release's `helm test` hooks in Helm's order (hook weight, then as rendered),
// and the Pod among them.
func testHooks(t *testing.T, hooks []*unstructured.Unstructured) (objs []*unstructured.Unstructured, pod *corev1.Pod) {
	t.Helper()
	for _, h := range hooks {
		if h.GetAnnotations()["helm.sh/hook"] == "test" {
			objs = append(objs, h)
		}
	}
	weight := func(o *unstructured.Unstructured) int {
		n, _ := strconv.Atoi(o.GetAnnotations()["helm.sh/hook-weight"])
		return n
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return weight(a) - weight(b) })
	for _, o := range objs {
		if o.GetKind() == "Pod" {
			pod = typed[corev1.Pod](t, o)
		}
	}
	if pod == nil {
		t.Fatalf("the release has no `helm test` Pod (test hooks: %d)", len(objs))
	}
	return objs, pod
}

// runTestPod does what `helm test` makes the kubelet do, on this host: it creates the test hooks
// before the Pod (its ServiceAccount, Role, RoleBinding) and runs the Pod's container command —
// the webhook binary, the image's entrypoint — as the Pod's ServiceAccount. It returns the exit
// code and the output.
func runTestPod(t *testing.T, rt *redTeam) (int, string) {
	t.Helper()
	if err := createTestHooks(t, rt); err != nil {
		t.Fatal(err)
	}
	return runTestCheck(t, rt)
}

// createTestHooks creates the test hooks but the Pod, as `helm test` does (each goes through
// admission, an existing one too).
func createTestHooks(t *testing.T, rt *redTeam) error {
	t.Helper()
	ctx := context.Background()
	objs, _ := testHooks(t, rt.rendered.Hooks)
	o := newObjects(t, rt.c)
	for _, h := range objs {
		if h.GetKind() == "Pod" {
			continue
		}
		ri, err := o.resource(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Create(ctx, h, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("creating the test hook %s %s: %w", h.GetKind(), h.GetName(), err)
		}
	}
	return nil
}

// runTestCheck runs the test Pod's command as its account, its hooks already created.
func runTestCheck(t *testing.T, rt *redTeam) (int, string) {
	t.Helper()
	ctx := context.Background()
	_, pod := testHooks(t, rt.rendered.Hooks)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := rt.c.ServiceAccountKubeconfig(ctx, rt.ns, pod.Spec.ServiceAccountName, kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin, err := webhookBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "check" {
		t.Fatalf("the test Pod runs %q %q: want the image's entrypoint with `check`", c.Command, c.Args)
	}
	cmd := exec.Command(bin, append(slices.Clone(c.Args), "--kubeconfig="+kubeconfig)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestHelmTestChecksTheGuardAndTheWriterRBAC (issue 18): the chart's `helm test` Pod, run against a
// release whose webhook serves: every check passes. Then each thing it checks is broken in turn and
// it fails naming it: a grant beyond SPEC's (delete on leases) to the writer's account, the
// writer's RoleBinding gone, the webhook down.
func TestHelmTestChecksTheGuardAndTheWriterRBAC(t *testing.T) {
	t.Parallel()
	rt := newRedTeam(t)
	ctx := context.Background()
	code, out := runTestPod(t, rt)
	if code != 0 || strings.Count(out, "ok ") != 4 || strings.Contains(out, "FAIL") {
		t.Fatalf("helm test on a working release: exit %d\n%s", code, out)
	}

	// A second grant that lets the writer delete (and patch) its Lease.
	extra := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "too-much", Namespace: rt.ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"delete", "patch"}}}}
	if _, err := rt.cs.RbacV1().Roles(rt.ns).Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "too-much", Namespace: rt.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "too-much"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "noetl-cmdbus-writer", Namespace: rt.ns}, {Kind: "ServiceAccount", Name: "default", Namespace: rt.ns}}}
	if _, err := rt.cs.RbacV1().RoleBindings(rt.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out = runTestPod(t, rt)
	if code != 1 || !strings.Contains(out, "FAIL  writer RBAC: system:serviceaccount:"+rt.ns+":noetl-cmdbus-writer may also patch, delete leases") {
		t.Errorf("an extra grant: exit %d\n%s", code, out)
	}
	rb.Subjects = rb.Subjects[:1]
	_ = rt.cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, "too-much", metav1.DeleteOptions{})
	// The writer's own binding gone (RBAC's answers are eventually consistent: the authorizer's
	// cache follows within moments, and the check asks once; a stale answer would show as "ok").
	roleName := rt.name + "-shard-election"
	if err := rt.cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, roleName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the authorizer to see the RoleBinding go", func(context.Context) (bool, error) {
		code, out = runTestPod(t, rt)
		return code == 1, nil
	})
	if !strings.Contains(out, "may not get, list, watch, create, update leases") {
		t.Errorf("the writer unbound: exit %d\n%s", code, out)
	}

	// The webhook down: the armed Pod is admitted (Pods fail open), the unarmed StatefulSet refused
	// (workloads fail closed). Both say so.
	rt.wh.Stop()
	// Its RoleBinding names a ServiceAccount of a guarded namespace: while the webhook is down its
	// creation fails (the workloads' failure policy), and `helm test` says so before any Pod runs.
	// It is not left out of the review: a RoleBinding of that name, made after its Role was
	// widened to every verb on leases, disarmed an armed writer running as that account (red team
	// P of stop 33).
	if err := createTestHooks(t, rt); err == nil || !strings.Contains(err.Error(), `failed calling webhook "rbac.`) {
		t.Errorf("the test hooks created while the webhook is down: %v; want the rbac entry's failure", err)
	}
	code, out = runTestCheck(t, rt)
	if code != 1 || !strings.Contains(out, "FAIL  webhook: an armed Pod on the default ServiceAccount was admitted") ||
		!strings.Contains(out, "FAIL  webhook: an unarmed StatefulSet was refused") {
		t.Errorf("the webhook down: exit %d\n%s", code, out)
	}
}
