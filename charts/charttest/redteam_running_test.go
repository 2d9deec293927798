package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamDisarmUnderARunningProcess is the disarm class through the real API server: a writer
// armed by its ConfigMap runs; the ConfigMap is set to shadow (admitted: nothing restarts, and the
// next start reads shadow); then the writer's RoleBinding is deleted. The running process read
// enforce at its start and keeps it, so that delete fails its shard: refused, with the restart as
// the way out. The kubelet's report of the container's start is written as the kubelet writes it
// (there is no kubelet here); the ConfigMap's change time is the API server's own. Before the rule,
// the delete was admitted.
func TestRedTeamDisarmUnderARunningProcess(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	role := rt.name + "-shard-election"

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-flags"}, Data: map[string]string{"NOETL_EHDB_FENCING": "enforce"}}
	if _, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := rt.writer("w", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")).Spec.Template.Spec
	c := &spec.Containers[0]
	for i := range c.Env {
		if c.Env[i].Name == "NOETL_EHDB_FENCING" {
			c.Env = append(c.Env[:i], c.Env[i+1:]...)
			break
		}
	}
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}
	spec.OS = &corev1.PodOS{Name: corev1.Linux}
	spec.NodeName = "node-1" // bound, as the scheduler leaves it
	p, err := cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the writer armed by its ConfigMap, shard 0 live: %v", err)
	}
	reportStart := func(at time.Time) { t.Helper(); reportStarted(t, rt, p.Name, c, at) }
	reportStart(time.Now().Add(-time.Hour))

	// The eighteenth red team's undated changes under the running process: a removed key stamps
	// no managedFields time. Refused (before the rule: admitted, and the delete below with it).
	cms := cs.CoreV1().ConfigMaps(rt.ns)
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cms.Patch(ctx, cm.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/data/NOETL_EHDB_FENCING"}]`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "refusing to remove keys") {
		t.Errorf("removing the key the running writer's fencing came from: %v; want it refused", err)
	}

	// Disarmed for its next start: admitted (the order is kept, nothing restarts).
	cm.Data["NOETL_EHDB_FENCING"] = "shadow"
	shadowed, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the writer's ConfigMap set to shadow: %v", err)
	}
	changed := lastChanged(shadowed.ObjectMeta)
	deleteRB := func(ctx context.Context) error { return cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, role, dryDelete) }
	// The guard's watch sees the Pod's status within moments: the answer once it has.
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, deleteRB)
	disarmRefused(t, "DELETE RoleBinding "+role+" under the process that read enforce", err,
		"Pod "+rt.ns+"/w-0", `ConfigMap "writer-flags" changed at`, "restart it")

	// The container restarted more than the guard's margin (a minute) after the change: what it
	// read is what the guard reads, shadow, and the RoleBinding is its to lose. (The start is
	// reported a little ahead of this clock, as a kubelet would report it a minute from now; a
	// start further ahead than the margin dates nothing.)
	reportStart(changed.Add(62 * time.Second))
	err = answerOnce(10*time.Second, func(err error) bool { return err == nil }, deleteRB)
	admitted(t, "DELETE RoleBinding "+role+" once the writer restarted onto shadow", err)
}

// reportStarted writes the Pod's status as the kubelet would on the container's start at at
// (there is no kubelet here).
func reportStarted(t *testing.T, rt *redTeam, pod string, c *corev1.Container, at time.Time) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := rt.cs.CoreV1().Pods(rt.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Status.Phase = corev1.PodRunning
		got.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
		_, err = rt.cs.CoreV1().Pods(rt.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lastChanged is when the API server last recorded a change of the object (its managedFields).
func lastChanged(meta metav1.ObjectMeta) time.Time {
	at := meta.CreationTimestamp.Time
	for _, m := range meta.ManagedFields {
		if m.Time != nil && m.Time.After(at) {
			at = m.Time.Time
		}
	}
	return at
}

// TestRedTeamShardMovedUnderARunningProcess is the same class for where the election runs: a
// writer takes its shard from a ConfigMap key and runs on shard 0; its Role grants the Leases by
// name. The key is set to 1 (admitted: shard 1 is live, and the next start elects there); then the
// Role is narrowed to shard 1's Lease. The running process read 0 at its start and holds shard 0's
// Lease, so that edit fails its shard: refused, with the restart as the way out. Before the rule
// the edit was admitted (the guard judged the writer on shard 1).
func TestRedTeamShardMovedUnderARunningProcess(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	rt.liveLease(t, 1)
	roleName := rt.name + "-shard-election"

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer-election"}, Data: map[string]string{"shard": "0"}}
	created, err := cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := rt.writer("w").Spec.Template.Spec
	c := &spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, Key: "shard"}}})
	spec.OS = &corev1.PodOS{Name: corev1.Linux}
	spec.NodeName = "node-1"
	p, err := cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the writer on shard 0 by its ConfigMap: %v", err)
	}
	// The writer started (as a kubelet reports it) after its ConfigMap was created, by more than
	// the guard's margin (a minute): it read shard 0. The API server's times are whole seconds,
	// and a start further ahead of the webhook's clock than the margin dates nothing, so the test
	// waits two seconds past the creation before anything is judged.
	reportStarted(t, rt, p.Name, c, lastChanged(created.ObjectMeta).Add(61*time.Second))
	time.Sleep(time.Until(lastChanged(created.ObjectMeta).Add(2 * time.Second)))

	// The writer Role grants get and update on each shard's Lease by name (admitted: the writer
	// keeps shard 0's).
	byName := func(shards ...uint32) []rbacv1.PolicyRule {
		var names []string
		for _, s := range shards {
			names = append(names, electionenv.LeaseName(s))
		}
		return []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update", webhook.VerbElect}, ResourceNames: names},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch", "create"}},
		}
	}
	roles := cs.RbacV1().Roles(rt.ns)
	role, err := roles.Get(ctx, roleName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = byName(0, 1)
	if role, err = roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the writer Role by Lease name, shards 0 and 1: %v", err)
	}

	// The key moved to shard 1: admitted (shard 1 is live; nothing restarts).
	cm.Data["shard"] = "1"
	moved, err := cs.CoreV1().ConfigMaps(rt.ns).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the writer's shard key set to 1: %v", err)
	}
	narrowed := role.DeepCopy()
	narrowed.Rules = byName(1)
	narrow := func(ctx context.Context) error { _, err := roles.Update(ctx, narrowed, dryUpdate); return err }
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, narrow)
	disarmRefused(t, "the writer Role narrowed to shard 1's Lease under the process that read shard 0", err,
		"Pod "+rt.ns+"/w-0", "NOETL_EHDB_ELECTION_SHARD as its process read it at its start cannot be known", `ConfigMap "writer-election" changed at`,
		"Lease "+rt.ns+"/"+electionenv.LeaseName(0), "restart it")

	// Restarted more than a minute after the move: it elects on shard 1, and shard 0's Lease is
	// not its to keep.
	reportStarted(t, rt, p.Name, c, lastChanged(moved.ObjectMeta).Add(62*time.Second))
	err = answerOnce(10*time.Second, func(err error) bool { return err == nil }, narrow)
	admitted(t, "the writer Role narrowed to shard 1's Lease once the writer restarted onto shard 1", err)
}

// answerOnce asks until the answer is settled (or within has passed) and returns the last answer:
// for a request whose answer follows from what the guard's watch has seen a moment later.
func answerOnce(within time.Duration, settled func(error) bool, ask func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := ask(ctx)
		cancel()
		if settled(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRedTeamGrantThatTheLeaseGuardRefuses: the chart's lease guard admits the Lease writes of a
// namespace's account that holds ehdb-elect, unless it holds every verb on leases. So widening a
// running armed writer's Role to "*" stops its renewals as surely as deleting it: refused (the
// twenty-first red team's Role update was admitted, and its Lease writes refused from then on).
func TestRedTeamGrantThatTheLeaseGuardRefuses(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	const account = "second-writer"
	leases := func(verbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}}
	}
	if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role, err := cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account},
		Rules: leases("get", "list", "watch", "create", "update", webhook.VerbElect)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: account},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: account},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := rt.writer("w", wt.ServiceAccount(account), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")).Spec.Template.Spec
	spec.NodeName = "node-1"
	var p *corev1.Pod
	err = answerOnce(10*time.Second, func(err error) bool { return err == nil }, func(ctx context.Context) error {
		var err error
		p, err = cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the armed writer as %s: %v", account, err)
	}
	reportStarted(t, rt, p.Name, &spec.Containers[0], time.Now())

	wide := role.DeepCopy()
	wide.Rules = leases("*")
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cs.RbacV1().Roles(rt.ns).Update(ctx, wide, dryUpdate)
		return err
	})
	disarmRefused(t, "the running writer's Role widened to every verb on leases", err, "Pod "+rt.ns+"/w-0", "lease guard")

	more := role.DeepCopy()
	more.Rules = append(more.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
	_, err = cs.RbacV1().Roles(rt.ns).Update(ctx, more, dryUpdate)
	admitted(t, "the running writer's Role given a rule that is not about leases", err)

	// The twenty-second red team: a role bound to it that granted nothing on leases, widened to
	// leases "*", was never sent to the webhook (its matchConditions looked at the old rules).
	extra, err := cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account + "-extra"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: extra.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: extra.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	extra.Rules = append(extra.Rules, leases("*")...)
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cs.RbacV1().Roles(rt.ns).Update(ctx, extra, dryUpdate)
		return err
	})
	disarmRefused(t, "a role of the running writer that granted nothing on leases widened to leases \"*\"", err, "Pod "+rt.ns+"/w-0", "lease guard")

	// Red team N of stop 33: grants were judged only as role UPDATEs adding "*". A new binding
	// of such a role, a subject added to one, the probe verb named, and a ClusterRoleBinding of
	// cluster-admin were each admitted (never sent, or judged by the subjects a binding lost), and
	// the writer's renewals were refused from then on.
	dryCreate := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	refusedSoon := func(name string, ask func(context.Context) error) {
		t.Helper()
		disarmRefused(t, name, answerOnce(10*time.Second, func(err error) bool { return err != nil }, ask), "Pod "+rt.ns+"/w-0", "lease guard")
	}
	if _, err := cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "wide"}, Rules: leases("*")}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a Role of every verb on leases that nothing binds: %v", err)
	}
	bindWide := func(subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "wide"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "wide"}, Subjects: subjects}
	}
	writerSubject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: rt.ns}
	bob := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}
	refusedSoon("a new RoleBinding of every verb on leases to the running writer", func(ctx context.Context) error {
		_, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, bindWide(writerSubject), dryCreate)
		return err
	})
	users, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, bindWide(bob), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a RoleBinding of every verb on leases to a user: %v", err)
	}
	users.Subjects = append(users.Subjects, writerSubject)
	refusedSoon("the running writer added to a RoleBinding of every verb on leases", func(ctx context.Context) error {
		_, err := cs.RbacV1().RoleBindings(rt.ns).Update(ctx, users, dryUpdate)
		return err
	})
	probe := extra.DeepCopy()
	probe.Rules = append(probe.Rules[:1:1], leases(webhook.VerbWildcardProbe)...)
	refusedSoon("a role of the running writer that granted nothing on leases given the lease guard's probe verb", func(ctx context.Context) error {
		_, err := cs.RbacV1().Roles(rt.ns).Update(ctx, probe, dryUpdate)
		return err
	})
	refusedSoon("a new ClusterRoleBinding of cluster-admin to the running writer", func(ctx context.Context) error {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-debug"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}, Subjects: []rbacv1.Subject{writerSubject}}, dryCreate)
		return err
	})
	_, err = cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: account + "-again"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: account}, Subjects: []rbacv1.Subject{writerSubject}}, dryCreate)
	admitted(t, "a new RoleBinding granting the running writer what it has", err)

	// Red team Q of stop 34: a ClusterRole bound to the writer that granted nothing on leases,
	// given an aggregationRule selecting a piece of every verb on leases, was never sent (the
	// entry looked at its rules alone); nor was one created so under a binding that named it.
	// The aggregation controller's rewrite, refused, was retried until an answer was missed.
	const wildLabel = "example.com/aggregate-to-ehdb-redteam-wild"
	clusterRoles := cs.RbacV1().ClusterRoles()
	for _, cr := range []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-wild-piece", Labels: map[string]string{wildLabel: "true"}}, Rules: leases("*")},
		{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-agg"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}},
	} {
		if _, err := clusterRoles.Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatalf("ClusterRole %s: %v", cr.Name, err)
		}
		t.Cleanup(func() { _ = clusterRoles.Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
	}
	for _, role := range []string{"ehdb-redteam-agg", "ehdb-redteam-pending"} {
		if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{writerSubject}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a RoleBinding of ClusterRole %s: %v", role, err)
		}
	}
	selector := &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{wildLabel: "true"}}}}
	refusedSoon("an aggregationRule selecting a piece of every verb on leases given to a ClusterRole of the running writer", func(ctx context.Context) error {
		cr, err := clusterRoles.Get(ctx, "ehdb-redteam-agg", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		cr.AggregationRule = selector
		_, err = clusterRoles.Update(ctx, cr, dryUpdate)
		return err
	})
	refusedSoon("a ClusterRole a binding of the running writer names created aggregating a piece of every verb on leases", func(ctx context.Context) error {
		_, err := clusterRoles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-pending"}, AggregationRule: selector}, dryCreate)
		return err
	})

	// Red team R of stop 34: an aggregated role created with the writer's lease rules and a
	// selector that matches nothing keeps them (the controller applies an empty union as no
	// rules); the writer's own binding then goes, and a harmless piece created with the label, or
	// a harmless role labelled so, was never sent, while the controller's rewrite to it took the
	// writer's access.
	const staleLabel = "example.com/aggregate-to-ehdb-redteam-stale"
	stale := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-stale"}, Rules: role.Rules,
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{staleLabel: "true"}}}}}
	if _, err := clusterRoles.Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the aggregated role of the writer's lease rules: %v", err)
	}
	t.Cleanup(func() { _ = clusterRoles.Delete(context.Background(), stale.Name, metav1.DeleteOptions{}) })
	if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: stale.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: stale.Name}, Subjects: []rbacv1.Subject{writerSubject}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Only now is the stale role the writer's access: its own Role's binding goes (admitted).
	if err := answerOnce(10*time.Second, func(err error) bool { return err == nil }, func(ctx context.Context) error {
		return cs.RbacV1().RoleBindings(rt.ns).Delete(ctx, account, metav1.DeleteOptions{})
	}); err != nil {
		t.Fatalf("the writer's own RoleBinding deleted while the stale role grants the same: %v", err)
	}
	harmless := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}
	refusedSoon("a harmless piece created with the label the writer's stale aggregated role selects", func(ctx context.Context) error {
		_, err := clusterRoles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-stale-piece", Labels: map[string]string{staleLabel: "true"}},
			Rules: []rbacv1.PolicyRule{harmless}}, dryCreate)
		return err
	})
	plain, err := clusterRoles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-plain"}, Rules: []rbacv1.PolicyRule{harmless}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clusterRoles.Delete(context.Background(), plain.Name, metav1.DeleteOptions{}) })
	plain.Labels = map[string]string{staleLabel: "true"}
	refusedSoon("a harmless ClusterRole given the label the writer's stale aggregated role selects", func(ctx context.Context) error {
		_, err := clusterRoles.Update(ctx, plain, dryUpdate)
		return err
	})
}

// Red team R of stop 34: with leaseGuard.validationActions=[Warn] (the values file's dry run of
// the policy) the webhook saw no lease guard and admitted a grant of every verb on leases to an
// armed writer's account; `helm upgrade` back to Deny changed a binding no admission reviews, and
// the writer's renewals were refused. A binding that warns is a guard a value away.
func TestRedTeamAWarningLeaseGuardIsAGuard(t *testing.T) {
	rt := newRedTeamWith(t, map[string]any{"leaseGuard": map[string]any{"validationActions": []any{"Warn"}}})
	ctx := context.Background()
	rt.liveShard0(t)
	// A second writer account, admitted by its grant of ehdb-elect (the chart's writer is
	// admitted by its name too).
	const account = "second-writer"
	if _, err := rt.cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"},
		Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", webhook.VerbElect}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: account},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: account}, Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := answerOnce(30*time.Second, func(err error) bool { return err == nil }, func(ctx context.Context) error {
		_, err := rt.cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("named", wt.ServiceAccount(account)), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the armed writer as %s: %v", account, err)
	}
	wide := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-redteam-wide"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}}}
	if _, err := rt.cs.RbacV1().Roles(rt.ns).Create(ctx, wide, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = answerOnce(30*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := rt.cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: wide.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: wide.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: rt.ns}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	disarmRefused(t, "every verb on leases bound to the armed writer under a warning lease guard", err, "StatefulSet "+rt.ns+"/named", "holds every verb")
}
