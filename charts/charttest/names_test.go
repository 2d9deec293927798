package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// writerRoleName is the name the chart gives the writer's Role and RoleBinding in release.
func writerRoleName(release string) string {
	if release == Name {
		return "ehdb-shard-election"
	}
	if strings.Contains(release, Name) {
		return release + "-shard-election"
	}
	return release + "-" + Name + "-shard-election"
}

// TestWriterRoleIsNamedFromTheRelease (issue 18): the Role and RoleBinding are named from the release
// (the release named like the chart keeps the specification's ehdb-shard-election), and every
// reference follows: the RoleBinding's roleRef, the NOTES' removal commands, the alert's text.
func TestWriterRoleIsNamedFromTheRelease(t *testing.T) {
	for _, release := range []string{Name, "ehdb-election-b", "other"} {
		r, err := Render(release, testNS, ruleValues(nil))
		if err != nil {
			t.Fatal(err)
		}
		want := writerRoleName(release)
		if r.Find("Role", want) == nil {
			t.Errorf("release %s: no Role %s", release, want)
			continue
		}
		rb := r.Find("RoleBinding", want)
		if rb == nil {
			t.Errorf("release %s: no RoleBinding %s", release, want)
			continue
		}
		if ref := typed[rbacv1.RoleBinding](t, rb).RoleRef.Name; ref != want {
			t.Errorf("release %s: the RoleBinding refers to Role %s, want %s", release, ref, want)
		}
		if !strings.Contains(r.Notes, "delete rolebinding,role "+want) {
			t.Errorf("release %s: NOTES do not name %s", release, want)
		}
		if d := renderedAlerts(t, ruleValues(nil)); release == Name && !strings.Contains(d["EhdbElectionForbidden"].Annotations["description"], want) {
			t.Errorf("the Forbidden alert does not name the RoleBinding %s", want)
		}
		if release != Name && strings.Contains(r.Manifest+r.Notes, "ehdb-shard-election") {
			t.Errorf("release %s still names ehdb-shard-election somewhere", release)
		}
	}
}

// TestTwoReleasesInOneNamespaceAndTheViewRole (issue 18): a second release in the namespace of the
// first (its own writer account, no second lease guard or webhook) installs beside it; and a user
// with nothing but the built-in `view` role there can read the shard Leases, not write them.
func TestTwoReleasesInOneNamespaceAndTheViewRole(t *testing.T) {
	t.Parallel()
	r, lease := installGuardWithLease(t, nil)
	ctx := context.Background()
	second := &testRelease{c: r.c, cs: r.cs, ns: r.ns, name: "second-" + r.name, helm: r.helm}
	// With its own lease guard (the default): each release's guard admits the other's writer by
	// the writer Role's ehdb-elect verb, so the two guards admit the same writers. The first
	// chart's guards named their accounts, and a second guard refused the first's writers.
	second.install(t, second.values(mustValuesFile(t, "ci/writer-rbac-only-values.yaml"), map[string]any{
		"writer": map[string]any{"serviceAccount": map[string]any{"name": "second-writer"}},
	}))
	for _, rel := range []*testRelease{r, second} {
		name := writerRoleName(rel.name)
		if _, err := r.cs.RbacV1().Roles(r.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("release %s: Role %s: %v", rel.name, name, err)
		}
	}
	for _, sa := range []string{"noetl-cmdbus-writer", "second-writer"} {
		leases := saClient(t, r, r.ns, sa).CoordinationV1().Leases(r.ns)
		waitFor(t, 30*time.Second, sa+"'s renewal admitted by both lease guards", func(ctx context.Context) (bool, error) {
			err := edit(ctx, leases, lease.Name, func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now())) })
			return err == nil, nil
		})
	}

	// The guard Helm renders against the cluster is the one an offline render (helm template,
	// Argo CD, Flux) gives: it looks nothing up.
	firstValues := r.values(mustValuesFile(t, "ci/writer-rbac-only-values.yaml"))
	if _, err := r.helm.Upgrade(ctx, r.name, firstValues); err != nil {
		t.Fatalf("an upgrade of the first release: %v", err)
	}
	live, err := r.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, leaseGuardName(r.name, r.ns), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := Render(r.name, r.ns, firstValues)
	if err != nil {
		t.Fatal(err)
	}
	var offline admissionregistrationv1.ValidatingAdmissionPolicy
	if u := rendered.Find("ValidatingAdmissionPolicy", live.Name); u == nil {
		t.Fatalf("the offline render has no ValidatingAdmissionPolicy %s", live.Name)
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &offline); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(live.Spec.Variables, offline.Spec.Variables) || !equality.Semantic.DeepEqual(live.Spec.Validations, offline.Spec.Validations) {
		t.Errorf("the lease guard as Helm rendered it against the cluster differs from the offline render:\nlive:    %v\noffline: %v", live.Spec.Variables, offline.Spec.Variables)
	}

	if _, err := r.cs.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "olivia-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "olivia"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	may := func(ctx context.Context, verb string) (bool, error) {
		sar, err := r.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "olivia", Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: r.ns, Name: lease.Name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	// The controller manager aggregates the chart's ClusterRole into view asynchronously.
	waitFor(t, 60*time.Second, "view to grant reading the shard Leases", func(ctx context.Context) (bool, error) { return may(ctx, "get") })
	for _, verb := range []string{"list", "watch"} {
		if ok, err := may(ctx, verb); err != nil || !ok {
			t.Errorf("view: %s leases = %v (%v), want allowed", verb, ok, err)
		}
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		if ok, err := may(ctx, verb); err != nil || ok {
			t.Errorf("view: %s leases = %v (%v), want refused", verb, ok, err)
		}
	}
}

// TestRenamedReleaseKeepsTheWritersAdmitted (issue 18, cold adoption): an upgrade that renames the
// release's objects (fullnameOverride) and the writer's account at once renders a new lease guard
// and a new RoleBinding name; the new guard must still admit the account the live writer
// RoleBinding binds (found by label, not by name), or every armed writer's renewal is refused.
func TestRenamedReleaseKeepsTheWritersAdmitted(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	r.install(t, r.values(nil))
	ctx := context.Background()
	if _, err := r.helm.Upgrade(ctx, r.name, r.values(nil, map[string]any{
		"fullnameOverride": "renamed-" + r.name,
		"writer":           map[string]any{"serviceAccount": map[string]any{"name": "writer2"}},
	})); err != nil {
		t.Fatal(err)
	}
	// The webhook keeps the old RoleBinding under armed writers (it refuses its delete); here,
	// with no webhook, bind the old account again by hand. The renamed release's guard admits it:
	// it admits every account bound to the writer Role, found by the authorizer, not by name.
	if _, err := r.cs.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kept-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: writerRoleName("renamed-" + r.name)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "noetl-cmdbus-writer", Namespace: r.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := saClient(t, r, r.ns, "noetl-cmdbus-writer").CoordinationV1().Leases(r.ns)
	waitFor(t, 30*time.Second, "the renamed release's lease guard to admit the old account", func(ctx context.Context) (bool, error) {
		_, err := leases.Create(ctx, newLease("ehdb-shard-00000000", "writer-0#1", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
}

// TestUpgradeFromThePreviousChartKeepsTheWritersAccount (issue 18, cold adoption): the upgrade from
// 0.1.0 runs while 0.1.0's webhook, which has no RBAC entry, still serves; a rename of the writer's
// account in it would move the RoleBinding off armed writers unreviewed. The chart refuses it.
func TestUpgradeFromThePreviousChartKeepsTheWritersAccount(t *testing.T) {
	t.Parallel()
	r, prev := installPrevious(t)
	ctx := context.Background()
	_, err := r.helm.Upgrade(ctx, r.name, r.values(nil, map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"name": "writer2"}}}))
	if err == nil || !strings.Contains(err.Error(), "upgrading from chart 0.1.0") {
		t.Fatalf("a rename in the upgrade from %s: err = %v, want the chart's refusal", prev.Metadata.Version, err)
	}
	if _, err := r.helm.Upgrade(ctx, r.name, r.values(nil)); err != nil {
		t.Fatalf("the upgrade without a rename: %v", err)
	}
}
