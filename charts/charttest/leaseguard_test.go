package charttest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/webhook"
)

// The lease guard's second half (issue 11): only the writer's ServiceAccount writes ehdb-shard-*
// Leases. No client-side algorithm survives an outside writer that edits the record (a blanked
// holder reads as a release; a shortened duration as an expiry; a bumped epoch as a takeover), so
// the cluster refuses those writes, whoever sends them — cluster-admins included — unless the
// principal is listed in leaseGuard.breakGlass.

// impersonating returns a client of the cluster's admin acting as user in groups. system:masters is
// always among the groups, so RBAC allows everything and any refusal is the lease guard's.
func impersonating(t *testing.T, r *testRelease, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(r.c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:masters"}, groups...)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// installGuardWithLease installs the writer RBAC and the lease guard (no webhook) with the given
// overrides, creates the shard-0 Lease as the writer would (holder writer-0#1, epoch 1), and waits
// until the guard refuses a rollback of it.
func installGuardWithLease(t *testing.T, overrides map[string]any) (*testRelease, *coordinationv1.Lease) {
	t.Helper()
	r := newRelease(t, nil)
	r.install(t, r.values(mustValuesFile(t, "ci/writer-rbac-only-values.yaml"), overrides))
	ctx := context.Background()
	writer := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
	lease, err := writer.Create(ctx, newLease("ehdb-shard-00000000", "writer-0#1", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the lease guard to take effect", func(ctx context.Context) (bool, error) {
		probe := lease.DeepCopy()
		probe.Spec.LeaseTransitions = ptr.To[int32](0)
		_, err := writer.Update(ctx, probe, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	})
	return r, lease
}

// edit reads the Lease, applies mutate and writes it back through leases.
func edit(ctx context.Context, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
}, name string, mutate func(*coordinationv1.Lease)) error {
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	next := cur.DeepCopy()
	mutate(next)
	_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
	return err
}

// outsideEdits are what an operator's `kubectl edit` (or any other client) can do to a held Lease
// that a client-side election cannot survive, and the harmless-looking ones the guard refuses too.
var outsideEdits = []struct {
	name   string
	mutate func(*coordinationv1.Lease)
}{
	{"holder and epoch (a well-formed takeover)", func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("admin#1"), ptr.To(*l.Spec.LeaseTransitions+1)
	}},
	{"holder blanked (a forged release)", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }},
	{"duration shortened", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](3) }},
	{"epoch raised, same holder", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 1) }},
	{"renewTime moved back", func(l *coordinationv1.Lease) {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
	}},
	{"a label (metadata only)", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"touched": "yes"} }},
}

// TestLeaseGuardRefusesEveryOutsideWriter: a cluster-admin, another ServiceAccount of the namespace
// that RBAC allows to update Leases, and a user in system:masters all try the edits above, and to
// create a shard Lease; the guard refuses each, naming who may write.
func TestLeaseGuardRefusesEveryOutsideWriter(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, nil)
	ctx := context.Background()

	// An account of the same namespace that RBAC allows every verb on leases (a "*" rule, as an
	// operator's Role may have): the guard admits writers by the writer Role's ehdb-elect verb, not
	// by holding everything.
	intruder := "lease-editor"
	if _, err := r.cs.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: intruder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cs.RbacV1().Roles(r.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cs.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-editor"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: intruder, Namespace: r.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	outsiders := []struct {
		who string
		cs  kubernetes.Interface
	}{
		{"the test's cluster-admin", r.cs},
		{"another ServiceAccount, every verb on leases", saClient(t, r, r.ns, intruder)},
		{"a user in system:masters", impersonating(t, r, "alice")},
		{"a node (system:nodes)", impersonating(t, r, "system:node:n1", "system:nodes")},
		{"the writer's name, as a plain user", impersonating(t, r, "noetl-cmdbus-writer")},
	}
	for _, o := range outsiders {
		leases := o.cs.CoordinationV1().Leases(r.ns)
		for _, e := range outsideEdits {
			err := edit(ctx, leases, lease.Name, e.mutate)
			checkGuard(t, o.who+": "+e.name, err, "only the writer's ServiceAccount")
		}
		_, err := leases.Create(ctx, newLease("ehdb-shard-00000007", "admin#1", 9), metav1.CreateOptions{})
		checkGuard(t, o.who+": create", err, "only the writer's ServiceAccount")
		checkGuard(t, o.who+": delete", leases.Delete(ctx, lease.Name, metav1.DeleteOptions{}), "never deleted")
	}

	// The Lease is as the writer left it.
	got, err := r.cs.CoordinationV1().Leases(r.ns).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.HolderIdentity != "writer-0#1" || *got.Spec.LeaseTransitions != 1 || *got.Spec.LeaseDurationSeconds != 15 || got.ResourceVersion != lease.ResourceVersion {
		t.Errorf("an outside write got through: %+v (resourceVersion %s, created %s)", got.Spec, got.ResourceVersion, lease.ResourceVersion)
	}

	// A second account bound to the writer Role (another release's writer, or this one's under a
	// new name) is a writer: the guard admits it by the Role's ehdb-elect verb, with no list of
	// accounts an offline render could narrow; the epoch rules still hold for it.
	second := "second-writer"
	if _, err := r.cs.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: second}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cs.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "second-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: writerRoleName(r.name)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: second, Namespace: r.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secondLeases := saClient(t, r, r.ns, second).CoordinationV1().Leases(r.ns)
	waitFor(t, 30*time.Second, "the second writer's renewal admitted", func(ctx context.Context) (bool, error) {
		err := edit(ctx, secondLeases, lease.Name, func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now())) })
		return err == nil, nil
	})
	checkGuard(t, "the second writer: epoch rolled back", edit(ctx, secondLeases, lease.Name, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) }), "may never decrease")

	// Leases that are not shard Leases stay anyone's (with RBAC).
	other, err := r.cs.CoordinationV1().Leases(r.ns).Create(ctx, newLease("not-a-shard", "a", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating an unguarded Lease: %v", err)
	}
	if err := edit(ctx, r.cs.CoordinationV1().Leases(r.ns), other.Name, outsideEdits[0].mutate); err != nil {
		t.Errorf("editing an unguarded Lease: %v", err)
	}
}

// TestLeaseGuardAdmitsTheWritersElection runs the real election (election/) as the writer's
// ServiceAccount through a whole life — create, renewals, a graceful release taken over at once, a
// crash taken over after the lease — with the guard on: not one of its writes may be refused.
func TestLeaseGuardAdmitsTheWritersElection(t *testing.T) {
	t.Parallel()
	r, _ := installGuardWithLease(t, nil)
	ctx := context.Background()
	writer := saClient(t, r, r.ns, "noetl-cmdbus-writer")
	cfg := election.Config{Enabled: true, LeaseDuration: 3 * time.Second, RenewInterval: time.Second, Shard: 1, HasShard: true, Namespace: r.ns}
	name := election.LeaseName(cfg.Shard)

	type candidate struct {
		e      *election.Election
		reg    *prometheus.Registry
		cancel context.CancelFunc
		mu     sync.Mutex
		events []election.Event
	}
	start := func(host string) *candidate {
		c := &candidate{reg: prometheus.NewRegistry()}
		cctx, cancel := context.WithCancel(ctx)
		c.cancel = cancel
		e, err := election.Start(cctx, election.NewKubeStore(writer, r.ns), cfg, election.Options{
			Identity:   election.NewIdentity(host),
			Registerer: c.reg,
			OnEvent: func(ev election.Event) {
				c.mu.Lock()
				c.events = append(c.events, ev)
				c.mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c.e = e
		t.Cleanup(func() { cancel(); _ = e.Release(context.Background()) })
		return c
	}
	count := func(c *candidate, o election.Outcome) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, ev := range c.events {
			if ev.Outcome == o {
				n++
			}
		}
		return n
	}
	holds := func(c *candidate, epoch uint64) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			tok := c.e.Token()
			return tok.Valid && tok.Epoch == epoch, nil
		}
	}
	noErrors := func(c *candidate) {
		t.Helper()
		mfs, err := c.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "ehdb_election_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v != 0 {
					t.Errorf("%s: ehdb_election_errors_total%v = %v: the guard (or RBAC) refused a writer's request", c.e.Identity(), m.GetLabel(), v)
				}
			}
		}
	}

	// Creates the Lease (epoch 1) and renews it.
	a := start("writer-1")
	waitFor(t, 30*time.Second, "a to acquire epoch 1", holds(a, 1))
	waitFor(t, 30*time.Second, "a to renew twice", func(context.Context) (bool, error) { return count(a, election.Renewed) >= 2, nil })
	noErrors(a)

	// b waits as a standby; a's graceful release hands over at once, at the next epoch.
	b := start("writer-1")
	if err := a.e.Release(ctx); err != nil {
		t.Fatalf("a's release: %v", err)
	}
	waitFor(t, 30*time.Second, "b to take over the released Lease at epoch 2", holds(b, 2))
	noErrors(a)

	// b crashes (no release); c takes over once the lease has run out, at epoch 3.
	c := start("writer-1")
	waitFor(t, 30*time.Second, "b to renew", func(context.Context) (bool, error) { return count(b, election.Renewed) >= 1, nil })
	b.cancel()
	waitFor(t, 60*time.Second, "c to take over the expired Lease at epoch 3", holds(c, 3))
	waitFor(t, 30*time.Second, "c to renew", func(context.Context) (bool, error) { return count(c, election.Renewed) >= 1, nil })
	noErrors(b)
	noErrors(c)

	got, err := r.cs.CoordinationV1().Leases(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.HolderIdentity != c.e.Identity() || *got.Spec.LeaseTransitions != 3 {
		t.Errorf("lease %s: holder %q epoch %d, want %q at 3", name, *got.Spec.HolderIdentity, *got.Spec.LeaseTransitions, c.e.Identity())
	}
	if err := c.e.Release(ctx); err != nil {
		t.Errorf("c's release: %v", err)
	}
	noErrors(c)
}

// TestLeaseGuardBreakGlass: the principals listed in leaseGuard.breakGlass (by user name or by
// group) may write the shard Leases — the epoch rules still hold for them — and nobody else may.
func TestLeaseGuardBreakGlass(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, map[string]any{"leaseGuard": map[string]any{"breakGlass": map[string]any{
		"users": []any{"oncall-admin"}, "groups": []any{"ehdb-oncall"},
	}}})
	ctx := context.Background()
	leases := func(cs kubernetes.Interface) interface {
		Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
		Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
	} {
		return cs.CoordinationV1().Leases(r.ns)
	}

	byUser := impersonating(t, r, "oncall-admin")
	byGroup := impersonating(t, r, "bob", "ehdb-oncall")
	for who, cs := range map[string]kubernetes.Interface{"listed user": byUser, "member of a listed group": byGroup} {
		for _, e := range outsideEdits {
			checkGuard(t, who+": "+e.name, edit(ctx, leases(cs), lease.Name, e.mutate), "")
		}
		// The epoch rules are not waived.
		checkGuard(t, who+": rollback", edit(ctx, leases(cs), lease.Name, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) }), "may never decrease")
		checkGuard(t, who+": delete", cs.CoordinationV1().Leases(r.ns).Delete(ctx, lease.Name, metav1.DeleteOptions{}), "never deleted")
	}
	_, err := byGroup.CoordinationV1().Leases(r.ns).Create(ctx, newLease("ehdb-shard-00000003", "oncall#1", 1), metav1.CreateOptions{})
	checkGuard(t, "break glass: create", err, "")

	// Controls: a similar name, a group that is not listed, and the admin, are still refused.
	for who, cs := range map[string]kubernetes.Interface{
		"a user whose name contains the listed one": impersonating(t, r, "oncall-admin-2"),
		"a group that is not listed":                impersonating(t, r, "bob", "ehdb-oncall-readers"),
		"the test's cluster-admin":                  r.cs,
	} {
		checkGuard(t, who, edit(ctx, leases(cs), lease.Name, outsideEdits[0].mutate), "only the writer's ServiceAccount")
	}
	// The denial names the way out.
	err = edit(ctx, leases(r.cs), lease.Name, outsideEdits[0].mutate)
	if err == nil || !strings.Contains(err.Error(), "leaseGuard.breakGlass") {
		t.Errorf("the denial does not name leaseGuard.breakGlass: %v", err)
	}
}

// TestLeaseGuardNamesTheWriter: the policy's idea of "the writer" follows writer.serviceAccount.name
// and the release namespace, and the break-glass lists reach it as CEL lists, quoted whatever the
// names contain.
func TestLeaseGuardNamesTheWriter(t *testing.T) {
	vars := func(values map[string]any) map[string]string {
		t.Helper()
		vap := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, mustRender(t, values).Find("ValidatingAdmissionPolicy", "ehdb-election-lease-guard.noetl"))
		out := map[string]string{}
		for _, v := range vap.Spec.Variables {
			out[v.Name] = v.Expression
		}
		for _, op := range vap.Spec.MatchConstraints.ResourceRules[0].Operations {
			out["op:"+string(op)] = "yes"
		}
		return out
	}
	v := vars(nil)
	if v["writer"] != "'system:serviceaccount:noetl:noetl-cmdbus-writer'" || v["breakGlassUsers"] != "[]" || v["breakGlassGroups"] != "[]" {
		t.Errorf("defaults: %v", v)
	}
	if v["op:CREATE"] != "yes" || v["op:UPDATE"] != "yes" || v["op:DELETE"] != "yes" {
		t.Errorf("the policy does not see every write: %v", v)
	}
	v = vars(map[string]any{
		"writer":     map[string]any{"serviceAccount": map[string]any{"name": "shard-writer"}},
		"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": []any{`o'brien`, `a"b`}, "groups": []any{"oncall"}}},
	})
	if v["writer"] != "'system:serviceaccount:noetl:shard-writer'" {
		t.Errorf("renamed account: writer = %s", v["writer"])
	}
	if v["breakGlassUsers"] != `["o'brien","a\"b"]` || v["breakGlassGroups"] != `["oncall"]` {
		t.Errorf("break glass lists: users %s groups %s", v["breakGlassUsers"], v["breakGlassGroups"])
	}
	// The schema refuses what cannot be a principal.
	for _, bad := range []any{"", "two words", 7} {
		_, err := Render(Name, testNS, map[string]any{"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": []any{bad}}}})
		if err == nil || !strings.Contains(err.Error(), "/leaseGuard/breakGlass/users/0") {
			t.Errorf("break glass user %q: err = %v, want a schema refusal", bad, err)
		}
	}
}

// TestLeaseGuardLetsATerminatingNamespaceGo: while the namespace is being deleted, an outsider may
// still remove a finalizer from a shard Lease (what unblocks the deletion) but not edit its spec.
func TestLeaseGuardLetsATerminatingNamespaceGo(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, nil)
	ctx := context.Background()
	removePolicyWithTheNamespace(t, r)
	const finalizer = "ehdb-test.noetl.io/hold"
	writer := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
	if err := edit(ctx, writer, lease.Name, func(l *coordinationv1.Lease) { l.Finalizers = []string{finalizer} }); err != nil {
		t.Fatalf("the writer adding a finalizer: %v", err)
	}
	admin := r.cs.CoordinationV1().Leases(r.ns)
	checkGuard(t, "an outsider removing the finalizer before the namespace is deleted",
		edit(ctx, admin, lease.Name, func(l *coordinationv1.Lease) { l.Finalizers = nil }), "only the writer's ServiceAccount")

	if err := r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the namespace controller to delete the Lease (held by its finalizer)", func(ctx context.Context) (bool, error) {
		l, err := admin.Get(ctx, lease.Name, metav1.GetOptions{})
		return err == nil && l.DeletionTimestamp != nil, err
	})
	checkGuard(t, "an outsider editing the spec while the namespace terminates",
		edit(ctx, admin, lease.Name, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }), "only the writer's ServiceAccount")
	checkGuard(t, "an outsider removing the finalizer while the namespace terminates",
		edit(ctx, admin, lease.Name, func(l *coordinationv1.Lease) { l.Finalizers = nil }), "")
	waitFor(t, 2*time.Minute, "namespace "+r.ns+" to be deleted", func(ctx context.Context) (bool, error) {
		_, err := r.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestLeaseGuardBoundsEpochAndDuration (issue 16): even the writer's own account (and so break glass)
// may raise spec.leaseTransitions by at most 1 per write — a jump to 2147483647 would leave no epoch
// to mint — and a new holder raises it by exactly 1; spec.leaseDurationSeconds may shrink or go only
// over a released record, because on a held one a shorter duration reads as an early expiry.
func TestLeaseGuardBoundsEpochAndDuration(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, nil) // holder writer-0#1, epoch 1, duration 15
	ctx := context.Background()
	leases := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
	const limit = int32(1<<31 - 1)
	dur := func(l *coordinationv1.Lease, s int32) { l.Spec.LeaseDurationSeconds = ptr.To(s) }
	steps := []struct {
		name   string
		mutate func(l *coordinationv1.Lease)
		denied string // "" = allowed
	}{
		// The epoch (held: writer-0#1 at 1).
		{"epoch to 2147483647, same holder", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(limit) }, "rises by at most 1 per write (1 -> 2147483647)"},
		{"epoch +2, same holder", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](3) }, "rises by at most 1 per write (1 -> 3)"},
		{"takeover at 2147483647", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#2"), ptr.To(limit)
		}, "rises by at most 1 per write (1 -> 2147483647)"},
		{"takeover +2", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#2"), ptr.To[int32](3)
		}, "rises by at most 1 per write (1 -> 3)"},
		{"takeover without a change of epoch", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("writer-0#2") }, "by exactly 1 (holder \"writer-0#1\" -> \"writer-0#2\", epoch 1 -> 1)"},
		{"release with a jump", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To(""), ptr.To(limit)
		}, "rises by at most 1"},
		// The duration of a held record.
		{"duration shortened, held", func(l *coordinationv1.Lease) { dur(l, 3) }, "may decrease only once the record is released (holder \"writer-0#1\", 15 -> 3)"},
		{"duration removed, held", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }, "(holder \"writer-0#1\", 15 -> unset)"},
		{"takeover with a shorter duration", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#2"), ptr.To[int32](2)
			dur(l, 10)
		}, "may decrease only once the record is released"},
		{"takeover keeping the record's duration", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#2"), ptr.To[int32](2)
		}, ""},
		{"renewal lengthening it", func(l *coordinationv1.Lease) { dur(l, 60) }, ""},
		{"takeover with a longer duration", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#3"), ptr.To[int32](3)
			dur(l, 90)
		}, ""},
		{"release shortening it at once", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To(""); dur(l, 3) }, "may decrease only once the record is released"},
		{"epoch +1, same holder", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](4) }, ""},
		// Released: the duration is free, and the epoch still rises by 1 at most.
		{"release", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, ""},
		{"released: duration shortened", func(l *coordinationv1.Lease) { dur(l, 5) }, ""},
		{"acquiring the released record with a shorter duration", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#4"), ptr.To[int32](5)
			dur(l, 3)
		}, ""},
		{"release by dropping the holder field", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, ""},
		{"released (no holder field): duration removed", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }, ""},
		{"released: epoch to 2147483647", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(limit) }, "rises by at most 1 per write (5 -> 2147483647)"},
		{"acquiring a record with no duration", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-0#5"), ptr.To[int32](6)
			dur(l, 15)
		}, ""},
	}
	for _, s := range steps {
		current, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		next := current.DeepCopy()
		s.mutate(next)
		_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		checkGuard(t, s.name, err, s.denied)
	}
	got, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(got.Spec.HolderIdentity, "") != "writer-0#5" || ptr.Deref(got.Spec.LeaseTransitions, 0) != 6 || ptr.Deref(got.Spec.LeaseDurationSeconds, 0) != 15 {
		t.Errorf("after the steps: %+v, want writer-0#5 at epoch 6 for 15 s", got.Spec)
	}

	// Break glass does not waive the bounds.
	r2, lease2 := installGuardWithLease(t, map[string]any{"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": []any{"oncall-admin"}}}})
	oncall := impersonating(t, r2, "oncall-admin").CoordinationV1().Leases(r2.ns)
	checkGuard(t, "break glass: epoch to 2147483647", edit(ctx, oncall, lease2.Name, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(limit) }), "rises by at most 1")
	checkGuard(t, "break glass: duration removed, held", edit(ctx, oncall, lease2.Name, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }), "may decrease only once the record is released")
}

// TestLeaseGuardOutlivesUninstall (issue 18): `helm uninstall` keeps the writer's RBAC, so writers
// that hold it keep minting; the lease guard stays with it, so an admin still cannot delete a shard
// Lease (an epoch reset) under them. It goes only in the documented removal order: the RBAC first,
// then the guard. With writer.keepOnUninstall=false both go with the release.
func TestLeaseGuardOutlivesUninstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("kept", func(t *testing.T) {
		t.Parallel()
		r, lease := installGuardWithLease(t, nil)
		if err := r.helm.Uninstall(r.name, false); err != nil {
			t.Fatal(err)
		}
		name := leaseGuardName(r.name, r.ns)
		if _, err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the lease guard's policy after uninstall: %v", err)
		}
		if _, err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the lease guard's binding after uninstall: %v", err)
		}
		admin := r.cs.CoordinationV1().Leases(r.ns)
		checkGuard(t, "an admin deleting a shard Lease after uninstall", admin.Delete(ctx, lease.Name, metav1.DeleteOptions{}), "never deleted")
		writer := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
		checkGuard(t, "the writer, still bound, lowering the epoch after uninstall",
			edit(ctx, writer, lease.Name, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) }), "may never decrease")
		checkGuard(t, "an admin editing the holder after uninstall",
			edit(ctx, admin, lease.Name, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }), "only the writer's ServiceAccount")

		// The removal order of the README: the writer's RBAC, then the guard's binding and policy.
		if err := r.cs.RbacV1().RoleBindings(r.ns).Delete(ctx, writerRoleName(r.name), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := r.cs.RbacV1().Roles(r.ns).Delete(ctx, writerRoleName(r.name), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := r.cs.CoreV1().ServiceAccounts(r.ns).Delete(ctx, "noetl-cmdbus-writer", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("the documented removal (binding %s): %v", name, err)
		}
		if err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("the documented removal (policy %s): %v", name, err)
		}
		waitFor(t, 30*time.Second, "the Lease to be deletable once the guard is gone", func(ctx context.Context) (bool, error) {
			err := admin.Delete(ctx, lease.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	})
	t.Run("keepOnUninstall=false", func(t *testing.T) {
		t.Parallel()
		r, lease := installGuardWithLease(t, map[string]any{"writer": map[string]any{"keepOnUninstall": false}})
		if err := r.helm.Uninstall(r.name, false); err != nil {
			t.Fatal(err)
		}
		if _, err := r.cs.RbacV1().RoleBindings(r.ns).Get(ctx, writerRoleName(r.name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("keepOnUninstall=false: the RoleBinding is still there (err %v)", err)
		}
		waitFor(t, 30*time.Second, "the guard to go with the RBAC", func(ctx context.Context) (bool, error) {
			err := r.cs.CoordinationV1().Leases(r.ns).Delete(ctx, lease.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	})
}

// TestTheWebhookReadsTheRenderedLeaseGuard: the webhook reads what the chart's lease guard admits
// off the live policy (webhook.LeaseGuardOf); read off the chart's own render, it is the writer by
// name and every account granted the verb the chart's writer Role grants, so the guard and the
// webhook's prediction of it cannot drift apart.
func TestTheWebhookReadsTheRenderedLeaseGuard(t *testing.T) {
	r, err := Render(Name, testNS, ruleValues(nil))
	if err != nil {
		t.Fatal(err)
	}
	name := Name + "-lease-guard." + testNS
	policy := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, r.Find("ValidatingAdmissionPolicy", name))
	binding := typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r.Find("ValidatingAdmissionPolicyBinding", name))
	g := webhook.LeaseGuardOf(testNS, []admissionregistrationv1.ValidatingAdmissionPolicy{*policy}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{*binding})
	if g.Err != nil || g.Name != name || g.Verb != webhook.VerbElect || !slices.Equal(g.Users, []string{"system:serviceaccount:" + testNS + ":noetl-cmdbus-writer"}) {
		t.Errorf("the webhook reads the rendered lease guard as %+v; want %s admitting the writer by name and others by %s", g, name, webhook.VerbElect)
	}
	role := typed[rbacv1.Role](t, r.Find("Role", writerRoleName(Name)))
	if len(role.Rules) != 1 || !slices.Contains(role.Rules[0].Verbs, webhook.VerbElect) || slices.Contains(role.Rules[0].Verbs, webhook.VerbWildcardProbe) {
		t.Errorf("the writer Role's rules %v: want %s granted (the lease guard admits its accounts by it), never %s", role.Rules, webhook.VerbElect, webhook.VerbWildcardProbe)
	}
}
