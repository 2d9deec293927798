package charttest

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The tenth red team (issue 17, class 6), with the controller manager's aggregation controller
// running: an armed writer's only lease access comes from a ClusterRole that aggregates a piece.
// Deleting, relabelling or narrowing the piece, or pointing the aggregated role's selector
// elsewhere, is refused through the API server, naming the aggregated role; a second piece that
// grants the same lets the first go, and a label that selects nothing new is admitted.
func TestRedTeamAggregatedClusterRole(t *testing.T) {
	sa := "agg-writer"
	rt := newRedTeamAdmitting(t, sa)
	ctx := context.Background()
	cs, rbac := rt.cs, rt.cs.RbacV1()
	rt.liveLease(t, 0)
	label := "ehdb-test.noetl.io/aggregate-to-" + rt.ns
	leaseRule := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}}
	piece := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rt.ns + "-piece", Labels: map[string]string{label: "true"}}, Rules: []rbacv1.PolicyRule{leaseRule}}
	aggregated := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rt.ns + "-aggregated"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: aggregated.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: aggregated.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: rt.ns}}}
	if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cr := range []*rbacv1.ClusterRole{piece, aggregated} {
		if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sts := cs.AppsV1().StatefulSets(rt.ns)
	t.Cleanup(func() {
		// Disarmed first (the removal order), so the cleanup is admitted.
		_ = sts.Delete(context.Background(), "agg", metav1.DeleteOptions{})
		_ = cs.CoreV1().Pods(rt.ns).Delete(context.Background(), "agg-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		waitFor(t, 30*time.Second, "the aggregated role's cleanup", func(ctx context.Context) (bool, error) {
			return rbac.ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) == nil, nil
		})
		for _, name := range []string{aggregated.Name, piece.Name, rt.ns + "-second-piece"} {
			_ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	waitFor(t, 60*time.Second, "the aggregation controller to copy the piece's rule", func(ctx context.Context) (bool, error) {
		got, err := rbac.ClusterRoles().Get(ctx, aggregated.Name, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(got.Rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, leaseRule) }), nil
	})
	waitFor(t, 30*time.Second, "the writer granted through the aggregated role admitted", func(ctx context.Context) (bool, error) {
		_, err := sts.Create(ctx, rt.writer("agg", wt.ServiceAccount(sa)), metav1.CreateOptions{})
		return err == nil, nil
	})
	var err error
	waitFor(t, 30*time.Second, "the writer in the guard's watch", func(ctx context.Context) (bool, error) {
		err = rbac.ClusterRoleBindings().Delete(ctx, crb.Name, dryDelete)
		return err != nil, nil
	})
	disarmRefused(t, "DELETE the aggregated role's ClusterRoleBinding", err, "StatefulSet "+rt.ns+"/agg")

	through := "through the aggregation controller's rewrite of ClusterRole " + aggregated.Name
	disarmRefused(t, "DELETE the piece", rbac.ClusterRoles().Delete(ctx, piece.Name, dryDelete), "StatefulSet "+rt.ns+"/agg", through)
	current, err := rbac.ClusterRoles().Get(ctx, piece.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	relabelled := current.DeepCopy()
	relabelled.Labels[label] = "false"
	_, err = rbac.ClusterRoles().Update(ctx, relabelled, dryUpdate)
	disarmRefused(t, "the piece relabelled out of the selector", err, through)
	narrowed := current.DeepCopy()
	narrowed.Rules = []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}}
	_, err = rbac.ClusterRoles().Update(ctx, narrowed, dryUpdate)
	disarmRefused(t, "the piece narrowed to read-only", err, through, "may not create, update")
	grown := current.DeepCopy()
	grown.Labels["example.com/team"] = "storage"
	_, err = rbac.ClusterRoles().Update(ctx, grown, dryUpdate)
	admitted(t, "a label that selects nothing new added to the piece", err)

	agg, err := rbac.ClusterRoles().Get(ctx, aggregated.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reselected := agg.DeepCopy()
	reselected.AggregationRule.ClusterRoleSelectors[0].MatchLabels = map[string]string{label: "elsewhere"}
	_, err = rbac.ClusterRoles().Update(ctx, reselected, dryUpdate)
	disarmRefused(t, "the aggregated role's selector pointed elsewhere", err, "once the aggregation controller rewrites its rules")

	second := piece.DeepCopy()
	second.Name = rt.ns + "-second-piece"
	if _, err := rbac.ClusterRoles().Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the piece's deletion admitted once a second piece grants the same", func(ctx context.Context) (bool, error) {
		return rbac.ClusterRoles().Delete(ctx, piece.Name, dryDelete) == nil, nil
	})
}
