package charttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/harness"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// webhookBinary is the webhook the red-team suite attacks: the one built from this tree, or
// $EHDB_WEBHOOK_BIN (to run the same attacks against an older build and watch them succeed).
var webhookBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("EHDB_WEBHOOK_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := harness.Build("webhook")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "webhook"), nil
})

// redTeam is the chart installed with the real webhook binary serving its configuration, as the
// chart's webhook ServiceAccount: what an attacker in a guarded namespace faces.
type redTeam struct {
	*testRelease
	wh *harness.Webhook
}

func newRedTeam(t *testing.T) *redTeam {
	t.Helper()
	return newRedTeamWith(t, nil)
}

// newRedTeamWith is newRedTeam with values over the test release's.
func newRedTeamWith(t *testing.T, values map[string]any) *redTeam {
	t.Helper()
	return newRedTeamOf(t, func(string) map[string]any { return values })
}

// newRedTeamAdmitting is newRedTeam whose lease guard also admits the writers the test runs as
// accounts of its own (as break-glass users): the webhook requires an armed writer's account to be
// one its namespace's lease guard admits, as the lease guard refuses every other's Lease writes.
func newRedTeamAdmitting(t *testing.T, accounts ...string) *redTeam {
	t.Helper()
	return newRedTeamOf(t, func(ns string) map[string]any {
		var users []any
		for _, a := range accounts {
			users = append(users, "system:serviceaccount:"+ns+":"+a)
		}
		return map[string]any{"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": users}}}
	})
}

// newRedTeamOf installs the test release with the values valuesFor gives for its namespace.
func newRedTeamOf(t *testing.T, valuesFor func(ns string) map[string]any) *redTeam {
	t.Helper()
	r := newRelease(t, nil)
	labelNamespace(t, r.cs, r.ns, map[string]string{isolationLabel: r.name})
	r.install(t, r.values(valuesFor(r.ns)))
	bin, err := webhookBinary()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--guarded-namespaces=*"} // as the chart passes webhook.guardedNamespaces ["*"]
	if os.Getenv("EHDB_WEBHOOK_BIN") != "" {
		args = nil // an older build may not know the flag
	}
	wh, err := harness.StartWebhook(context.Background(), r.c, bin, r.ns, r.name, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		wh.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(wh.LogPath); err == nil {
				t.Logf("webhook log (last 4 KiB):\n%s", tail(string(b), 4096))
			}
		}
	})
	rt := &redTeam{testRelease: r, wh: wh}
	// The API server picks the configuration up asynchronously: wait until the guard answers.
	waitFor(t, 30*time.Second, "the guard in the admission chain", func(ctx context.Context) (bool, error) {
		_, err := r.cs.AppsV1().StatefulSets(r.ns).Create(ctx, rt.writer("probe"), dryRunCreate)
		return err != nil && strings.Contains(err.Error(), "refusing to arm"), nil
	})
	return rt
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

var dryRunCreate = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// writer is the reference writer, armed, election on, as the chart's writer ServiceAccount.
func (rt *redTeam) writer(name string, opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := wt.ReferenceWriter(rt.ns, append([]func(*appsv1.StatefulSet){wt.Armed(), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA)}, opts...)...)
	s.Name = name
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	s.Spec.Template.Labels = map[string]string{"app": name}
	return s
}

// liveLease makes shard's Lease live, held and minted for the next five minutes. It is written as
// the writer's ServiceAccount: the chart's lease guard refuses anyone else.
func (rt *redTeam) liveLease(t *testing.T, shard uint32) *coordinationv1.Lease {
	t.Helper()
	l := wt.LiveLease(rt.ns, shard, time.Now(), 1)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](300)
	writer := saClient(t, rt.testRelease, rt.ns, "noetl-cmdbus-writer")
	got, err := writer.CoordinationV1().Leases(rt.ns).Create(context.Background(), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// liveShard0 makes shard 0's Lease live (liveLease) and waits until the guard sees it so: an
// armed writer of shard 0 is admitted.
func (rt *redTeam) liveShard0(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l := rt.liveLease(t, 0)
	waitFor(t, 30*time.Second, "shard 0's Lease in the webhook's watch", func(ctx context.Context) (bool, error) {
		_, err := rt.cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("control"), dryRunCreate)
		return err == nil, nil
	})
	return l
}

// briefLease makes shard's Lease live, held and minted for 3 s (as the writer's ServiceAccount),
// and returns when it will have lapsed for certain: an attack that needs the Lease live at one
// step and dead at the next.
func (rt *redTeam) briefLease(t *testing.T, shard uint32) (lapsed time.Time) {
	t.Helper()
	l := wt.LiveLease(rt.ns, shard, time.Now(), 1)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](3)
	if _, err := saClient(t, rt.testRelease, rt.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(rt.ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return time.Now().Add(4 * time.Second)
}

// refused asserts err is the guard's denial and says every want.
func refused(t *testing.T, what string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted; want the guard to refuse it", what)
		return
	}
	if !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "refusing to arm") {
		t.Errorf("%s: refused, but not by the guard's answer: %v", what, err)
		return
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the denial does not say %q:\n%v", what, w, err)
		}
	}
}

func admitted(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: refused; want admitted: %v", what, err)
	}
}

// TestRedTeam attacks the guard as issue 12 found it attacked: the chart installed, the webhook
// binary serving, crafted objects sent to the real API server. Every subtest is an attack that
// got through (or a right answer that came out wrong) before.
func TestRedTeam(t *testing.T) {
	rt := newRedTeamAdmitting(t, "lp-writer", "lp-other")
	ctx := context.Background()
	cs := rt.cs
	sts := cs.AppsV1().StatefulSets(rt.ns)
	rt.liveLease(t, 0)

	// Control: the reference writer, correct in every way, with shard 0's Lease live, is admitted.
	// (Also waits until the Lease has reached the webhook's watch.)
	waitFor(t, 30*time.Second, "the correct writer admitted", func(ctx context.Context) (bool, error) {
		_, err := sts.Create(ctx, rt.writer("control"), dryRunCreate)
		return err == nil, nil
	})

	t.Run("one review cannot exhaust the webhook", func(t *testing.T) {
		for _, n := range []int32{20000000, 2147483647} {
			_, err := sts.Create(ctx, rt.writer(fmt.Sprintf("huge-%d", n), wt.Replicas(n)), dryRunCreate)
			refused(t, fmt.Sprintf("replicas %d", n), err, fmt.Sprintf("%d replicas", n), "at most 128 shards")
		}
		// And the guard still answers a correct review right after.
		_, err := sts.Create(ctx, rt.writer("after-huge"), dryRunCreate)
		admitted(t, "a correct writer after the worst-case reviews", err)
	})

	t.Run("a controller ownerReference to a ConfigMap exempts nothing", func(t *testing.T) {
		anchor, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "anchor"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := rt.writer("owned", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7")) // no Lease for shard 7
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: anchor.Name, UID: anchor.UID, Controller: ptr.To(true)}}
		_, err = sts.Create(ctx, s, dryRunCreate)
		refused(t, "armed StatefulSet controlled by a ConfigMap, no Lease", err, "ehdb-shard-00000007 (shard 7) does not exist")
	})

	t.Run("a forged Deployment owner exempts no ReplicaSet", func(t *testing.T) {
		s := rt.writer("forged", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7")) // no Lease for shard 7
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "forged-rs", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: "no-such-deployment", UID: "00000000-0000-0000-0000-00000000f0f0", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Selector: s.Spec.Selector, Template: s.Spec.Template}}
		_, err := cs.AppsV1().ReplicaSets(rt.ns).Create(ctx, rs, dryRunCreate)
		refused(t, "armed ReplicaSet naming a Deployment that does not exist", err, "ehdb-shard-00000007 (shard 7) does not exist")
	})

	t.Run("an old value that cannot be known is not armed", func(t *testing.T) {
		l := rt.liveLease(t, 5)
		fromSecret := func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_FENCING" {
					c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "writer-env"}, Key: "fencing"}}}
				}
			}
		}
		// Created while shard 5's Lease is live: admitted (it counts as armed, and passes).
		var err error
		waitFor(t, 30*time.Second, "the unknowable writer admitted while its Lease is live", func(ctx context.Context) (bool, error) {
			_, err = sts.Create(ctx, rt.writer("unknowable", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "5"), fromSecret), metav1.CreateOptions{})
			return err == nil, nil
		})
		// The election of shard 5 stops: the writer releases the Lease.
		l.Spec.HolderIdentity = ptr.To("")
		writer := saClient(t, rt.testRelease, rt.ns, "noetl-cmdbus-writer")
		if _, err := writer.CoordinationV1().Leases(rt.ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Turning the unknowable value into a literal enforce must face the order check.
		waitFor(t, 30*time.Second, "the update judged", func(ctx context.Context) (bool, error) {
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				s, err := sts.Get(ctx, "unknowable", metav1.GetOptions{})
				if err != nil {
					return err
				}
				wt.Armed()(s)
				_, err = sts.Update(ctx, s, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			})
			return err != nil, nil
		})
		refused(t, "unknowable -> literal enforce with the Lease released", err, "ehdb-shard-00000005 (shard 5) is not held")
	})

	t.Run("a pod that cannot authenticate is refused", func(t *testing.T) {
		_, err := sts.Create(ctx, rt.writer("no-token", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(false)
		}), dryRunCreate)
		refused(t, "automountServiceAccountToken false", err, "cannot authenticate to the API server", "Fix: remove automountServiceAccountToken: false")
	})

	t.Run("a least-privilege Role by resourceNames is bound", func(t *testing.T) {
		leastPrivilege(t, cs, rt.ns, "lp-writer", "ehdb-shard-00000000")
		var err error
		waitFor(t, 30*time.Second, "a writer whose Role names its shard's Lease admitted", func(ctx context.Context) (bool, error) {
			_, err = sts.Create(ctx, rt.writer("least-privilege", wt.ServiceAccount("lp-writer")), dryRunCreate)
			return err == nil, nil
		})
		// Negative control: the same Role naming another shard's Lease does not bind shard 0.
		leastPrivilege(t, cs, rt.ns, "lp-other", "ehdb-shard-00000001")
		waitFor(t, 30*time.Second, "the other binding seen by the authorizer", func(ctx context.Context) (bool, error) {
			_, err = sts.Create(ctx, rt.writer("least-privilege-other", wt.ServiceAccount("lp-other")), dryRunCreate)
			return err != nil && !strings.Contains(err.Error(), "may not get, create, update"), nil
		})
		refused(t, "a writer whose Role names another Lease", err, "may not get, update coordination.k8s.io leases")
	})

	t.Run("the shard from the pod-index label is known per ordinal", func(t *testing.T) {
		_, err := sts.Create(ctx, rt.writer("pod-index", func(s *appsv1.StatefulSet) {
			wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "")(s)
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_ELECTION_SHARD" {
					c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
						FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}}
				}
			}
		}), dryRunCreate)
		admitted(t, "shard 0 from the pod-index label, its Lease live", err)
		_, err = sts.Create(ctx, rt.writer("pod-index-2", wt.Replicas(2), func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Env = append(s.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "HOSTNAME",
				ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
		}), dryRunCreate)
		refused(t, "HOSTNAME from metadata.name, two replicas, shard 1 has no Lease", err, "ehdb-shard-00000001 (shard 1) does not exist")
	})

	t.Run("arming through a ConfigMap faces the order check", func(t *testing.T) {
		cms := cs.CoreV1().ConfigMaps(rt.ns)
		flags, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-flags"}, Data: map[string]string{"fencing": "shadow"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A writer of shard 9 (no Lease) that reads its fencing value from the ConfigMap: unarmed.
		_, err = sts.Create(ctx, rt.writer("cm-reader", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "9"), func(s *appsv1.StatefulSet) {
			c := &s.Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "NOETL_EHDB_FENCING" {
					c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "writer-flags"}, Key: "fencing"}}}
				}
			}
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the unarmed reader: %v", err)
		}
		// Arming it by editing the ConfigMap: refused (once the reader has reached the webhook's watch).
		armed := flags.DeepCopy()
		armed.Data["fencing"] = " Enforce"
		waitFor(t, 30*time.Second, "the ConfigMap edit judged", func(ctx context.Context) (bool, error) {
			_, err = cms.Update(ctx, armed, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil, nil
		})
		refused(t, "ConfigMap fencing shadow -> enforce read by a writer without a Lease", err,
			"through ConfigMap "+rt.ns+"/writer-flags", "ehdb-shard-00000009 (shard 9) does not exist")
		// Unrelated ConfigMap edits pass, and so does arming once the Lease is live.
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "notes"}, Data: map[string]string{"x": "enforce the rules"}}, dryRunCreate)
		admitted(t, "a ConfigMap nobody reads", err)
		rt.liveLease(t, 9)
		waitFor(t, 30*time.Second, "the ConfigMap edit admitted with the Lease live", func(ctx context.Context) (bool, error) {
			_, err = cms.Update(ctx, armed, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	})
}

// leastPrivilege creates ServiceAccount name bound to a Role that grants create, list and watch
// on leases, and get and update only on the Lease named lease.
func leastPrivilege(t *testing.T, cs kubernetes.Interface, ns, name, lease string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: []string{lease}},
	}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
