package charttest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamManySubjectsCannotHoldTheGuard replays the twenty-fifth red team (team B #1) on the
// real API server: a running armed writer whose lease verbs come through ClusterRole edit (its
// own Role grants only the election verb); a namespace admin binds edit to 60,000 made-up
// accounts in two RoleBindings; then a careless cluster admin takes the lease rule from
// system:aggregate-to-edit, which edit aggregates. The webhook took 20 s over that change, the API
// server stopped waiting at 5 s and the clusterrbac entry's Ignore admitted it, and the writer's
// renewals were refused 11 s later. The guard now judges it while the API server waits: refused.
func TestRedTeamManySubjectsCannotHoldTheGuard(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	const account = "edit-writer"
	if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{webhook.VerbElect}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(name, kind, role string, subjects ...rbacv1.Subject) {
		t.Helper()
		if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("RoleBinding %s: %v", name, err)
		}
	}
	bind(account, "Role", account, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account})
	bind(account+"-edit", "ClusterRole", "edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account})
	for j := range 2 {
		subjects := make([]rbacv1.Subject, 30000)
		for i := range subjects {
			subjects[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: fmt.Sprintf("e%d%05d", j, i)}
		}
		bind(fmt.Sprintf("big-edit-%d", j), "ClusterRole", "edit", subjects...)
	}
	spec := rt.writer("w", wt.ServiceAccount(account), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")).Spec.Template.Spec
	spec.NodeName = "node-1"
	var p *corev1.Pod
	err := answerOnce(30*time.Second, func(err error) bool { return err == nil }, func(ctx context.Context) error {
		var err error
		p, err = cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the armed writer as %s (its lease verbs through edit): %v", account, err)
	}
	reportStarted(t, rt, p.Name, &spec.Containers[0], time.Now())

	piece, err := cs.RbacV1().ClusterRoles().Get(ctx, "system:aggregate-to-edit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	narrowed := piece.DeepCopy()
	narrowed.Rules = slices.DeleteFunc(narrowed.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "leases") })
	if len(narrowed.Rules) == len(piece.Rules) {
		t.Fatalf("system:aggregate-to-edit grants nothing on leases: %+v", piece.Rules)
	}
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cs.RbacV1().ClusterRoles().Update(ctx, narrowed, dryUpdate)
		return err
	})
	disarmRefused(t, "the lease rule taken from system:aggregate-to-edit under 60,000 subjects of edit", err, "Pod "+rt.ns+"/w-0")
}
