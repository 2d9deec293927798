package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The chart never disarms the writers it protects (issue 12): the writer's ServiceAccount, Role and
// RoleBinding survive `helm uninstall` by default, and the webhook refuses deleting or unbinding
// them while an armed writer runs as the account (issue 17), whatever sends the change.

const keepPolicy = "helm.sh/resource-policy"

func TestWriterRBACIsKeptByDefault(t *testing.T) {
	writerObjects := [][2]string{{"ServiceAccount", "noetl-cmdbus-writer"}, {"Role", "ehdb-shard-election"}, {"RoleBinding", "ehdb-shard-election"}}
	r := mustRender(t, map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"example.com/owner": "storage"}}}})
	for _, id := range writerObjects {
		o := r.Find(id[0], id[1])
		if o == nil {
			t.Fatalf("%s/%s not rendered", id[0], id[1])
		}
		if got := o.GetAnnotations()[keepPolicy]; got != "keep" {
			t.Errorf("%s/%s: %s = %q, want keep", id[0], id[1], keepPolicy, got)
		}
	}
	if got := r.Find("ServiceAccount", "noetl-cmdbus-writer").GetAnnotations()["example.com/owner"]; got != "storage" {
		t.Errorf("the writer ServiceAccount lost its own annotations: %q", got)
	}
	// Nothing else is kept: the webhook and the lease guard go with the release.
	for _, o := range r.Objects {
		if _, kept := o.GetAnnotations()[keepPolicy]; kept && o.GetLabels()["app.kubernetes.io/component"] != "writer-election" {
			t.Errorf("%s/%s is kept on uninstall", o.GetKind(), o.GetName())
		}
	}

	r = mustRender(t, map[string]any{"writer": map[string]any{"keepOnUninstall": false}})
	for _, id := range writerObjects {
		if _, kept := r.Find(id[0], id[1]).GetAnnotations()[keepPolicy]; kept {
			t.Errorf("keepOnUninstall=false: %s/%s still kept", id[0], id[1])
		}
	}
}

// TestObjectSelectorIsGone: webhook.objectSelector was a per-object bypass (an object opts out of
// the guard by its own labels). The schema refuses it, the template refuses it without the schema,
// and both webhook entries render an empty one whatever the values.
func TestObjectSelectorIsGone(t *testing.T) {
	sel := map[string]any{"webhook": map[string]any{"objectSelector": map[string]any{"matchExpressions": []any{
		map[string]any{"key": "ehdb.noetl.io/unguarded", "operator": "DoesNotExist"}}}}}
	_, err := Render(Name, testNS, sel)
	if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), "'objectSelector' not allowed") {
		t.Errorf("schema: err = %v, want a refusal of webhook.objectSelector", err)
	}
	ch, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	ch.Schema = nil
	if _, err := RenderChart(ch, Name, testNS, sel); err == nil || !strings.Contains(err.Error(), "webhook.objectSelector was removed") {
		t.Errorf("without the schema: err = %v, want the template's refusal", err)
	}
	for name, values := range scenarios(t) {
		r := mustRender(t, values)
		for _, o := range append(r.OfKind("ValidatingWebhookConfiguration"), r.Hooks...) {
			if o.GetKind() != "ValidatingWebhookConfiguration" {
				continue
			}
			for _, w := range typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, o).Webhooks {
				if s := w.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
					t.Errorf("%s: %s has objectSelector %+v", name, w.Name, s)
				}
			}
		}
	}
}

// armedWriter is the reference writer, armed: a StatefulSet running as the chart's writer account
// with NOETL_EHDB_FENCING=enforce.
func armedWriter(name, sa, fencing string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: name + "-headless",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: sa,
					Containers: []corev1.Container{{Name: "noetl-worker", Image: "example.invalid/writer:1", Env: []corev1.EnvVar{
						{Name: "NOETL_EHDB_ELECTION", Value: "true"},
						{Name: "NOETL_EHDB_FENCING", Value: fencing},
					}}},
				},
			},
		},
	}
}

// writerBound says whether the account exists and may still update its Leases, as the API server's
// authorizer answers for its token.
func writerBound(t *testing.T, r *testRelease, sa string) (exists, bound bool) {
	t.Helper()
	ctx := context.Background()
	_, err := r.cs.CoreV1().ServiceAccounts(r.ns).Get(ctx, sa, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	default:
		exists = true
	}
	user, groups := serviceAccountUser(r.ns, sa)
	for _, verb := range []string{"get", "create", "update"} {
		sar, err := r.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: r.ns, Name: "ehdb-shard-00000000"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !sar.Status.Allowed {
			return exists, false
		}
	}
	return exists, true
}

// TestChartNeverDisarmsAnArmedWriter: with an armed writer running as the chart's account, every
// values change that used to delete or unbind that account leaves it in place and bound: Helm keeps
// it (keepOnUninstall), or the webhook refuses Helm's request (issue 17: the render-time check that
// saw only a literal enforce, and never ran under `helm template`, is gone; admission refuses the
// change whatever sends it). A renamed account is a RoleBinding update, whose refusal Helm reports
// with the removal order; Helm logs a refused delete and goes on, leaving the object. After the
// writer is disarmed (shadow) the same change goes through. The writer's RBAC comes from a release
// of its own (webhook.enabled=false, a second writer namespace's shape) guarded by the red team's
// webhook, so its upgrades never touch the webhook configuration the harness points at the host.
func TestChartNeverDisarmsAnArmedWriter(t *testing.T) {
	t.Parallel()
	guard := newRedTeamWith(t, map[string]any{"leaseGuard": map[string]any{"enabled": false},
		"writer": map[string]any{"serviceAccount": map[string]any{"create": false}, "rbac": map[string]any{"create": false}}})
	h, err := newHelmClient(guard.c.Kubeconfig, guard.ns, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRelease{c: guard.c, cs: guard.cs, ns: guard.ns, name: Name, helm: h}
	base := mustValuesFile(t, "ci/writer-rbac-only-values.yaml")
	r.install(t, base)
	ctx := context.Background()
	const sa = "noetl-cmdbus-writer"
	guard.liveLease(t, 0)
	var sts *appsv1.StatefulSet
	waitFor(t, 30*time.Second, "the armed writer admitted", func(ctx context.Context) (bool, error) {
		sts, err = r.cs.AppsV1().StatefulSets(r.ns).Create(ctx, armedWriter("noetl-cmdbus-writer", sa, " Enforce "), metav1.CreateOptions{})
		return err == nil, nil
	})
	waitFor(t, 30*time.Second, "the armed writer in the guard's watch", func(ctx context.Context) (bool, error) {
		return r.cs.RbacV1().RoleBindings(r.ns).Delete(ctx, "ehdb-shard-election", dryDelete) != nil, nil
	})
	check := func(step string) {
		t.Helper()
		if exists, bound := writerBound(t, r, sa); !exists || !bound {
			t.Errorf("%s: the armed writer's ServiceAccount exists=%v, may update its Leases=%v: its tokens drop within a lease", step, exists, bound)
		}
	}
	wr := func(v map[string]any) map[string]any { return map[string]any{"writer": v} }
	changes := []struct {
		name    string
		values  map[string]any
		refused bool // Helm reports the refusal (an update); a refused delete it only logs
	}{
		{"writer.rbac.create=false", wr(map[string]any{"rbac": map[string]any{"create": false}}), false},
		{"writer.serviceAccount.name renamed", wr(map[string]any{"serviceAccount": map[string]any{"name": "renamed-writer"}}), true},
		{"writer.serviceAccount.create=false", wr(map[string]any{"serviceAccount": map[string]any{"create": false}}), false},
	}
	for _, keep := range []bool{true, false} {
		start := copyValues(base)
		if !keep {
			mergeValues(start, wr(map[string]any{"keepOnUninstall": false}))
			if _, err := r.helm.Upgrade(ctx, r.name, start); err != nil {
				t.Fatalf("keepOnUninstall=false alone: %v", err)
			}
		}
		for _, c := range changes {
			step := c.name
			values := copyValues(base)
			mergeValues(values, c.values)
			if !keep {
				step += ", keepOnUninstall=false"
				mergeValues(values, wr(map[string]any{"keepOnUninstall": false}))
			}
			_, err := r.helm.Upgrade(ctx, r.name, values)
			switch {
			case c.refused && err == nil:
				t.Errorf("%s: upgrade allowed, want the webhook's refusal", step)
			case c.refused:
				for _, want := range []string{"refusing to disarm", "StatefulSet " + r.ns + "/noetl-cmdbus-writer", "ServiceAccount " + r.ns + "/" + sa, "NOETL_EHDB_FENCING=shadow", "wait for their rollout"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: the refusal does not say %q: %v", step, want, err)
					}
				}
			case err != nil:
				t.Errorf("%s: upgrade failed: %v", step, err)
			}
			check(step)
			if _, err := r.helm.Upgrade(ctx, r.name, start); err != nil {
				t.Fatalf("%s: upgrading back: %v", step, err)
			}
			check(step + ", then back")
		}
	}

	// Disarmed (the removal order: enforce -> shadow, then remove), the change goes through.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := r.cs.AppsV1().StatefulSets(r.ns).Get(ctx, sts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Env[1].Value = "shadow"
		_, err = r.cs.AppsV1().StatefulSets(r.ns).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Its Pod (if the controller made one) still carries the old template: wait until none is armed.
	waitFor(t, 60*time.Second, "the writer's Pods to be disarmed", func(ctx context.Context) (bool, error) {
		pods, err := r.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, e := range p.Spec.Containers[0].Env {
				if e.Name == "NOETL_EHDB_FENCING" && strings.EqualFold(strings.TrimSpace(e.Value), "enforce") {
					// No kubelet here: delete it, as a rollout would replace it.
					_ = r.cs.CoreV1().Pods(r.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					return false, nil
				}
			}
		}
		return true, nil
	})
	removeAll := copyValues(base)
	mergeValues(removeAll, wr(map[string]any{"keepOnUninstall": false, "rbac": map[string]any{"create": false}}))
	// Helm tries a delete once (the next release no longer holds the object): wait until the guard's
	// watch has seen the writer disarmed.
	waitFor(t, 30*time.Second, "the guard to see the writer disarmed", func(ctx context.Context) (bool, error) {
		return r.cs.RbacV1().RoleBindings(r.ns).Delete(ctx, "ehdb-shard-election", dryDelete) == nil, nil
	})
	if _, err := r.helm.Upgrade(ctx, r.name, removeAll); err != nil {
		t.Fatalf("disarmed writer: removing the RBAC: %v", err)
	}
	if _, bound := writerBound(t, r, sa); bound {
		t.Error("keepOnUninstall=false, rbac.create=false, writer disarmed: the RoleBinding is still there (the control shows nothing)")
	}
}

// TestUninstallKeepsTheWritersAccount: `helm uninstall` leaves the writer's account bound (by
// default), and a later install adopts the kept objects instead of failing on them.
func TestUninstallKeepsTheWritersAccount(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	values := r.values(mustValuesFile(t, "ci/writer-rbac-only-values.yaml"))
	r.install(t, values)
	const sa = "noetl-cmdbus-writer"
	if err := r.helm.Uninstall(r.name, false); err != nil {
		t.Fatal(err)
	}
	if exists, bound := writerBound(t, r, sa); !exists || !bound {
		t.Fatalf("after helm uninstall: the writer's ServiceAccount exists=%v, may update its Leases=%v", exists, bound)
	}
	objs := newObjects(t, r.c)
	ctx := context.Background()
	for _, o := range r.rendered.Objects {
		_, err := objs.get(ctx, o)
		kept := o.GetAnnotations()[keepPolicy] == "keep"
		if kept != (err == nil) {
			t.Errorf("after helm uninstall: %s/%s kept=%v, present err=%v", o.GetKind(), o.GetName(), kept, err)
		}
	}
	// Reinstalling the release adopts what was kept.
	if _, err := r.helm.Install(ctx, r.name, values); err != nil {
		t.Fatalf("reinstall over the kept objects: %v", err)
	}
	if exists, bound := writerBound(t, r, sa); !exists || !bound {
		t.Errorf("after the reinstall: exists=%v bound=%v", exists, bound)
	}
}

// TestNotesGiveTheRemovalOrder: NOTES.txt says how to remove the chart without disarming a writer:
// enforce -> shadow, wait for the rollout, then remove — and what uninstall leaves behind.
func TestNotesGiveTheRemovalOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"kept", nil, []string{"REVERSE order", "NOETL_EHDB_FENCING=shadow", "rollout status statefulset/noetl-cmdbus-writer", "Only then remove", "are KEPT",
			"delete rolebinding,role ehdb-shard-election", "delete serviceaccount noetl-cmdbus-writer",
			"lease guard stays", "delete validatingadmissionpolicybinding,validatingadmissionpolicy ehdb-election-lease-guard.noetl"}},
		{"not kept", map[string]any{"writer": map[string]any{"keepOnUninstall": false}}, []string{"REVERSE order", "NOETL_EHDB_FENCING=shadow",
			"rollout status statefulset/noetl-cmdbus-writer", "Only then remove", "DELETES the writer's ServiceAccount"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notes := mustRender(t, tc.values).Notes
			inOrder(t, notes, strings.Index(notes, "4. Only then enforce"), tc.want...)
		})
	}
}

// splitKept separates the objects `helm uninstall` deletes from those it keeps
// (helm.sh/resource-policy: keep).
func splitKept(objs []*unstructured.Unstructured) (gone, kept []*unstructured.Unstructured) {
	for _, o := range objs {
		if o.GetAnnotations()[keepPolicy] == "keep" {
			kept = append(kept, o)
		} else {
			gone = append(gone, o)
		}
	}
	return gone, kept
}
