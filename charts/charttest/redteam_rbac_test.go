package charttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/repo"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// Issue 17, "disarming is refused wherever it comes from": the writer's ServiceAccount, Role and
// RoleBinding (and a ClusterRole(Binding) that grants an armed writer its Leases) cannot be deleted,
// unbound or narrowed while an armed writer uses them, through the real API server with the chart
// installed and the webhook binary serving; RBAC no armed writer needs is admitted.

var (
	dryDelete = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	dryUpdate = metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
)

// disarmRefused asserts err is the guard's refusal of a disarming change, with the removal order.
func disarmRefused(t *testing.T, what string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted; want the guard to refuse it (it disarms an armed writer)", what)
		return
	}
	msg := err.Error()
	if !strings.Contains(msg, "denied the request") || !strings.Contains(msg, "refusing to disarm") {
		t.Errorf("%s: refused, but not by the guard's disarm refusal: %v", what, err)
		return
	}
	for _, w := range append([]string{"NOETL_EHDB_FENCING=shadow", "then remove the RBAC"}, wants...) {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: the refusal does not say %q:\n%v", what, w, err)
		}
	}
}

// bindLeases creates ServiceAccount sa bound by a Role and RoleBinding named name that grant
// what the chart's Role grants.
func bindLeases(t *testing.T, rt *redTeam, name, sa string) {
	t.Helper()
	ctx := context.Background()
	rbac := rt.cs.RbacV1()
	if _, err := rt.cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: rt.ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRedTeamDisarmByRBAC attacks the armed reference writer (the chart's ServiceAccount, Role and
// RoleBinding) and writers armed through a ConfigMap or bound by a ClusterRoleBinding.
func TestRedTeamDisarmByRBAC(t *testing.T) {
	rt := newRedTeamAdmitting(t, "idle-writer", "shadow-writer", "cm-writer", "crb-writer")
	ctx := context.Background()
	cs, rbac := rt.cs, rt.cs.RbacV1()
	sts := cs.AppsV1().StatefulSets(rt.ns)
	rt.liveLease(t, 0)
	role := rt.name + "-shard-election" // the chart's Role and RoleBinding for this release name
	waitFor(t, 30*time.Second, "the armed writer admitted", func(ctx context.Context) (bool, error) {
		_, err := sts.Create(ctx, rt.writer("armed"), metav1.CreateOptions{})
		return err == nil, nil
	})
	var err error
	waitFor(t, 30*time.Second, "the armed writer in the guard's watch", func(ctx context.Context) (bool, error) {
		err = rbac.RoleBindings(rt.ns).Delete(ctx, role, dryDelete)
		return err != nil, nil
	})
	disarmRefused(t, "DELETE RoleBinding "+role, err, "StatefulSet "+rt.ns+"/armed", "may not get, create, update coordination.k8s.io leases")

	t.Run("the chart's RBAC under the armed writer", func(t *testing.T) {
		rb, err := rbac.RoleBindings(rt.ns).Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unbound := rb.DeepCopy()
		unbound.Subjects = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "someone-else", Namespace: rt.ns}}
		_, err = rbac.RoleBindings(rt.ns).Update(ctx, unbound, dryUpdate)
		disarmRefused(t, "RoleBinding subject replaced", err, "StatefulSet "+rt.ns+"/armed")
		elsewhere := rb.DeepCopy()
		elsewhere.RoleRef.Name = "some-other-role"
		_, err = rbac.RoleBindings(rt.ns).Update(ctx, elsewhere, dryUpdate)
		if err == nil || !strings.Contains(err.Error(), "field is immutable") {
			t.Errorf("RoleBinding roleRef pointed elsewhere: want the API server's own refusal (roleRef is immutable), got %v", err)
		}
		relabelled := rb.DeepCopy()
		relabelled.Labels["example.com/team"] = "storage"
		_, err = rbac.RoleBindings(rt.ns).Update(ctx, relabelled, dryUpdate)
		admitted(t, "a label added to the RoleBinding", err)

		r, err := rbac.Roles(rt.ns).Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = rbac.Roles(rt.ns).Delete(ctx, role, dryDelete)
		disarmRefused(t, "DELETE Role "+role, err, "StatefulSet "+rt.ns+"/armed")
		readOnly := r.DeepCopy()
		readOnly.Rules = []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}}
		_, err = rbac.Roles(rt.ns).Update(ctx, readOnly, dryUpdate)
		disarmRefused(t, "Role edited to drop create and update", err, "may not create, update")
		otherShard := r.DeepCopy()
		otherShard.Rules = []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: []string{"ehdb-shard-00000001"}}}
		_, err = rbac.Roles(rt.ns).Update(ctx, otherShard, dryUpdate)
		disarmRefused(t, "Role edited to name another shard's Lease", err, "ehdb-shard-00000000")
		moreRules := r.DeepCopy()
		moreRules.Rules = append(moreRules.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
		_, err = rbac.Roles(rt.ns).Update(ctx, moreRules, dryUpdate)
		admitted(t, "a rule added to the Role", err)

		err = cs.CoreV1().ServiceAccounts(rt.ns).Delete(ctx, wt.WriterSA, dryDelete)
		disarmRefused(t, "DELETE ServiceAccount "+wt.WriterSA, err, "does not exist")
		sa, err := cs.CoreV1().ServiceAccounts(rt.ns).Get(ctx, wt.WriterSA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sa.AutomountServiceAccountToken = ptr.To(false)
		_, err = cs.CoreV1().ServiceAccounts(rt.ns).Update(ctx, sa, dryUpdate)
		disarmRefused(t, "ServiceAccount automountServiceAccountToken: false", err, "cannot authenticate to the API server")
	})

	t.Run("a redundant binding may go, the last one may not", func(t *testing.T) {
		extra := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: wt.WriterSA, Namespace: rt.ns}}}
		if _, err := rbac.RoleBindings(rt.ns).Create(ctx, extra, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		admitted(t, "DELETE RoleBinding "+role+" while RoleBinding extra grants the same", rbac.RoleBindings(rt.ns).Delete(ctx, role, dryDelete))
		admitted(t, "DELETE RoleBinding extra (for real) while "+role+" grants the same", rbac.RoleBindings(rt.ns).Delete(ctx, "extra", metav1.DeleteOptions{}))
		disarmRefused(t, "DELETE RoleBinding "+role+" once extra is gone", rbac.RoleBindings(rt.ns).Delete(ctx, role, dryDelete))
	})

	t.Run("RBAC no armed writer uses", func(t *testing.T) {
		bindLeases(t, rt, "idle", "idle-writer")
		admitted(t, "DELETE RoleBinding idle (its account runs nothing)", rbac.RoleBindings(rt.ns).Delete(ctx, "idle", dryDelete))
		admitted(t, "DELETE Role idle", rbac.Roles(rt.ns).Delete(ctx, "idle", dryDelete))
		admitted(t, "DELETE ServiceAccount idle-writer", cs.CoreV1().ServiceAccounts(rt.ns).Delete(ctx, "idle-writer", dryDelete))
		// A shadow writer's RBAC is not armed RBAC.
		bindLeases(t, rt, "shadowed", "shadow-writer")
		if _, err := sts.Create(ctx, rt.writer("shadow", wt.ServiceAccount("shadow-writer"), wt.SetEnv("NOETL_EHDB_FENCING", "shadow")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		admitted(t, "DELETE RoleBinding of a shadow writer", rbac.RoleBindings(rt.ns).Delete(ctx, "shadowed", dryDelete))
	})

	t.Run("a writer armed through a ConfigMap", func(t *testing.T) {
		bindLeases(t, rt, "cm-armed", "cm-writer")
		if _, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-flags"},
			Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the writer armed by envFrom admitted", func(ctx context.Context) (bool, error) {
			_, err := sts.Create(ctx, rt.writer("cm-armed", wt.ServiceAccount("cm-writer"), func(s *appsv1.StatefulSet) {
				c := &s.Spec.Template.Spec.Containers[0]
				c.Env = slicesDelete(c.Env, "NOETL_EHDB_FENCING")
				c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-flags"}}}}
			}), metav1.CreateOptions{})
			return err == nil, nil
		})
		var err error
		waitFor(t, 30*time.Second, "the envFrom writer in the guard's watch", func(ctx context.Context) (bool, error) {
			err = rbac.RoleBindings(rt.ns).Delete(ctx, "cm-armed", dryDelete)
			return err != nil, nil
		})
		disarmRefused(t, "DELETE the RoleBinding of a writer armed by envFrom", err, "StatefulSet "+rt.ns+"/cm-armed")
	})

	t.Run("a writer granted by a ClusterRoleBinding", func(t *testing.T) {
		sa := "crb-writer"
		if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := rt.ns + "-leases"
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}}}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: rt.ns}}}
		if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Disarmed first (the removal order), so the cleanup is admitted.
			_ = sts.Delete(context.Background(), "crb", metav1.DeleteOptions{})
			_ = cs.CoreV1().Pods(rt.ns).Delete(context.Background(), "crb-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			waitFor(t, 30*time.Second, "the ClusterRoleBinding's cleanup", func(ctx context.Context) (bool, error) {
				return rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}) == nil, nil
			})
			_ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		waitFor(t, 30*time.Second, "the writer bound by a ClusterRoleBinding admitted", func(ctx context.Context) (bool, error) {
			_, err := sts.Create(ctx, rt.writer("crb", wt.ServiceAccount(sa)), metav1.CreateOptions{})
			return err == nil, nil
		})
		var err error
		waitFor(t, 30*time.Second, "the ClusterRoleBinding writer in the guard's watch", func(ctx context.Context) (bool, error) {
			err = rbac.ClusterRoleBindings().Delete(ctx, name, dryDelete)
			return err != nil, nil
		})
		disarmRefused(t, "DELETE ClusterRoleBinding (the writer's only grant)", err, "StatefulSet "+rt.ns+"/crb")
		disarmRefused(t, "DELETE its ClusterRole", rbac.ClusterRoles().Delete(ctx, name, dryDelete), "StatefulSet "+rt.ns+"/crb")
		edited, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edited.Rules[0].Verbs = []string{"get", "list", "watch"}
		_, err = rbac.ClusterRoles().Update(ctx, edited, dryUpdate)
		disarmRefused(t, "its ClusterRole edited to drop create and update", err)
	})

	t.Run("disarmed first, the RBAC goes", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := sts.Get(ctx, "armed", metav1.GetOptions{})
			if err != nil {
				return err
			}
			wt.SetEnv("NOETL_EHDB_FENCING", "shadow")(s)
			_, err = sts.Update(ctx, s, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// No kubelet here: the old armed Pod is replaced as a rollout would replace it.
		_ = cs.CoreV1().Pods(rt.ns).Delete(ctx, "armed-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		waitFor(t, 30*time.Second, "the RoleBinding delete admitted once the writer is shadow", func(ctx context.Context) (bool, error) {
			err = rbac.RoleBindings(rt.ns).Delete(ctx, role, dryDelete)
			return err == nil, nil
		})
	})
}

func slicesDelete(env []corev1.EnvVar, name string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range env {
		if e.Name != name {
			out = append(out, e)
		}
	}
	return out
}

// TestRedTeamStaleCache: an answer cached as allowed (a ServiceAccount that exists, an access
// review that allowed) must not admit an armed writer once its binding or ServiceAccount is gone
// (wt-rt2's TestRT2Stale: the 10 s cache admitted both).
func TestRedTeamStaleCache(t *testing.T) {
	rt := newRedTeamAdmitting(t, "stale-writer")
	ctx := context.Background()
	sts := rt.cs.AppsV1().StatefulSets(rt.ns)
	rt.liveLease(t, 0)
	bindLeases(t, rt, "stale", "stale-writer")
	waitFor(t, 30*time.Second, "the writer admitted (answers cached)", func(ctx context.Context) (bool, error) {
		_, err := sts.Create(ctx, rt.writer("first", wt.ServiceAccount("stale-writer")), dryRunCreate)
		return err == nil, nil
	})
	if err := rt.cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, "stale", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := sts.Create(ctx, rt.writer("after-unbind", wt.ServiceAccount("stale-writer")), dryRunCreate)
	refused(t, "an armed writer right after its RoleBinding was deleted", err, "may not get, create, update coordination.k8s.io leases")
	if err := rt.cs.CoreV1().ServiceAccounts(rt.ns).Delete(ctx, "stale-writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = sts.Create(ctx, rt.writer("after-sa-delete", wt.ServiceAccount("stale-writer")), dryRunCreate)
	refused(t, "an armed writer right after its ServiceAccount was deleted", err, "does not exist")
}

// TestHelmUpgradeCannotUnbindAnArmedWriter: `helm upgrade --set writer.serviceAccount.name=other`
// with the real helm CLI, under a running writer armed through envFrom (which the removed
// render-time check never saw), is refused by the webhook with the removal order, and the writer
// stays bound. The same upgrade applied from `helm template` output meets the same refusal.
func TestHelmUpgradeCannotUnbindAnArmedWriter(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	lease := rt.liveLease(t, 0)
	if _, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-env"},
		Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the writer armed by envFrom admitted", func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("noetl-cmdbus-writer", func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			c.Env = slicesDelete(c.Env, "NOETL_EHDB_FENCING")
			c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "writer-env"}}}}
		}), metav1.CreateOptions{})
		return err == nil, nil
	})
	waitFor(t, 30*time.Second, "the writer in the guard's watch", func(ctx context.Context) (bool, error) {
		return rt.cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, rt.name+"-shard-election", dryDelete) != nil, nil
	})

	values := filepath.Join(t.TempDir(), "values.yaml")
	b, err := yaml.Marshal(rt.values(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(values, b, 0o600); err != nil {
		t.Fatal(err)
	}
	chart, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmCLIOrSkip(t)
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helm, "upgrade", rt.name, chart, "-n", rt.ns, "--kubeconfig", rt.c.Kubeconfig, "-f", values,
		"--set", "writer.serviceAccount.name=other")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	// (The harness points the webhook configuration at a URL on the host; Helm's patch of it back to
	// the chart's Service fails too, and Helm reports both errors: the RoleBinding's is the one here.)
	out, err := cmd.CombinedOutput()
	t.Logf("helm upgrade --set writer.serviceAccount.name=other:\n%s", out)
	if err == nil {
		t.Error("helm upgrade --set writer.serviceAccount.name=other under an armed writer succeeded; want the webhook's refusal")
	}
	for _, want := range []string{"RoleBinding", "refusing to disarm", "StatefulSet " + rt.ns + "/noetl-cmdbus-writer", "NOETL_EHDB_FENCING=shadow"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helm's error does not say %q", want)
		}
	}
	if exists, bound := writerBound(t, rt.testRelease, wt.WriterSA); !exists || !bound {
		t.Errorf("after the refused upgrade: the armed writer's ServiceAccount exists=%v, bound=%v", exists, bound)
	}
	// Helm goes on after the refused RoleBinding and updates the lease guard too (it collects update
	// errors and applies the rest): the guard must still admit the account the RoleBinding binds, or
	// every armed writer's renewal is refused and every shard's token lapses within a lease. It does,
	// by that account's grant of the writer Role's ehdb-elect verb.
	vaps := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	var guard *admissionregistrationv1.ValidatingAdmissionPolicy
	waitFor(t, 30*time.Second, "the lease guard's type check to observe its generation", func(ctx context.Context) (bool, error) {
		guard, err = vaps.Get(ctx, leaseGuardName(rt.name, rt.ns), metav1.GetOptions{})
		return err == nil && guard.Status.ObservedGeneration == guard.Generation, nil
	})
	renewal, err := cs.CoordinationV1().Leases(rt.ns).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewal.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := saClient(t, rt.testRelease, rt.ns, wt.WriterSA).CoordinationV1().Leases(rt.ns).Update(ctx, renewal, dryUpdate); err != nil {
		t.Errorf("after the refused upgrade, the lease guard refuses the bound writer's renewal (every shard would lapse): %v", err)
	}

	// `helm template` + apply (Argo CD, Flux): the RoleBinding as rendered, sent as an update.
	v := rt.values(nil, map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"name": "other"}},
		"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": []any{"offline-render-marker"}}}})
	r, err := Render(rt.name, rt.ns, v)
	if err != nil {
		t.Fatal(err)
	}
	rendered := typed[rbacv1.RoleBinding](t, r.Find("RoleBinding", rt.name+"-shard-election"))
	live, err := cs.RbacV1().RoleBindings(rt.ns).Get(ctx, rt.name+"-shard-election", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rendered.ResourceVersion = live.ResourceVersion
	_, err = cs.RbacV1().RoleBindings(rt.ns).Update(ctx, rendered, dryUpdate)
	disarmRefused(t, "the rendered RoleBinding for writer.serviceAccount.name=other applied", err, "StatefulSet "+rt.ns+"/noetl-cmdbus-writer")

	// The rendered lease guard applied too (the webhook is never called on a policy's writes, and
	// an offline render sees no RoleBinding): it names only the new account (team C of stop 27 did
	// this for real). The account the refused RoleBinding still binds must keep writing its Lease.
	guardName := leaseGuardName(rt.name, rt.ns)
	offline := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, r.Find("ValidatingAdmissionPolicy", guardName))
	cur, err := vaps.Get(ctx, guardName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	offline.ResourceVersion = cur.ResourceVersion
	if _, err := vaps.Update(ctx, offline, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("applying the offline render's lease guard: %v", err)
	}
	// The applied guard is in force once it admits the break-glass user only the offline render
	// lists (RBAC allows this impersonated client everything; only the guard decides).
	marker := impersonating(t, rt.testRelease, "offline-render-marker").CoordinationV1().Leases(rt.ns)
	waitFor(t, 30*time.Second, "the applied lease guard in force", func(ctx context.Context) (bool, error) {
		_, err := marker.Update(ctx, renewal, dryUpdate)
		return err == nil, nil
	})
	if _, err := saClient(t, rt.testRelease, rt.ns, wt.WriterSA).CoordinationV1().Leases(rt.ns).Update(ctx, renewal, dryUpdate); err != nil {
		t.Errorf("the lease guard of an offline render for writer.serviceAccount.name=other refuses the renewal of the writer its refused RoleBinding still binds (every shard would lapse): %v", err)
	}
}

// helmCLIOrSkip is the helm CLI hack/helm/build.sh builds (cached under .cache/helm).
func helmCLIOrSkip(t *testing.T) string {
	t.Helper()
	p, err := repo.Path(".cache", "helm")
	if err == nil {
		if m, _ := filepath.Glob(filepath.Join(p, "*", "helm")); len(m) > 0 {
			return m[0]
		}
	}
	script, err := repo.Path("hack", "helm", "build.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script).Output()
	if err != nil {
		t.Fatalf("building the helm CLI: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// leaseGuardName is the lease guard policy's (and binding's) name for a release whose objects are
// named fullname, in namespace ns.
func leaseGuardName(fullname, ns string) string { return fullname + "-lease-guard." + ns }
