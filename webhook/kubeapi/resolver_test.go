package kubeapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
)

func TestAPIResolverMapsAnswers(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: map[string]string{"k": "v"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns, Annotations: map[string]string{"a": "b"}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-00000000", Namespace: ns}, Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptrTo[int32](3)}},
	)
	cs.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "broken" {
			return true, nil, apierrors.NewInternalError(errors.New("etcd down"))
		}
		return false, nil, nil
	})
	var reviews []authorizationv1.SubjectAccessReview
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		reviews = append(reviews, *sar)
		switch sar.Spec.ResourceAttributes.Verb {
		case "get":
			sar.Status.Allowed = true
		case "update":
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
		}
		return true, sar, nil
	})
	writer := types.NamespacedName{Namespace: ns, Name: "writer"}
	q := webhook.Query{
		Namespace:       ns,
		ConfigMaps:      []string{"flags", "absent", "broken"},
		ServiceAccounts: []string{"writer", "absent"},
		Access: []webhook.AccessCheck{{ServiceAccount: writer, Namespace: "leases", Verb: "get"},
			{ServiceAccount: writer, Namespace: "leases", Verb: "create"}, {ServiceAccount: writer, Namespace: "leases", Verb: "update"}},
		Leases: []types.NamespacedName{{Namespace: ns, Name: "ehdb-shard-00000000"}, {Namespace: ns, Name: "ehdb-shard-00000001"}},
	}
	f := webhook.NewAPIResolver(kubeapi.New(cs), 2).Resolve(context.Background(), q)

	if got := f.ConfigMaps["flags"]; got.Err != nil || got.NotFound || got.Data["k"] != "v" {
		t.Errorf("flags: %+v", got)
	}
	if got := f.ConfigMaps["absent"]; !got.NotFound || got.Err != nil {
		t.Errorf("absent: %+v", got)
	}
	if got := f.ConfigMaps["broken"]; got.Err == nil || got.NotFound {
		t.Errorf("broken: %+v", got)
	}
	if got := f.ServiceAccounts["writer"]; got.NotFound || got.Annotations["a"] != "b" {
		t.Errorf("writer SA: %+v", got)
	}
	if got := f.ServiceAccounts["absent"]; !got.NotFound {
		t.Errorf("absent SA: %+v", got)
	}
	if got := f.Access[q.Access[0]]; !got.Allowed || got.Err != nil {
		t.Errorf("get: %+v", got)
	}
	if got := f.Access[q.Access[1]]; got.Allowed || got.Err != nil {
		t.Errorf("create: %+v", got)
	}
	if got := f.Access[q.Access[2]]; got.Err == nil {
		t.Errorf("update: a failed review must be an error, got %+v", got)
	}
	if got := f.Leases[q.Leases[0]]; got.NotFound || got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != 3 {
		t.Errorf("lease 0: %+v", got)
	}
	if got := f.Leases[q.Leases[1]]; !got.NotFound {
		t.Errorf("lease 1: %+v", got)
	}
	// The review asks for the ServiceAccount's real identity.
	if len(reviews) != 3 {
		t.Fatalf("%d reviews", len(reviews))
	}
	for _, r := range reviews {
		want := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
		ra := r.Spec.ResourceAttributes
		if r.Spec.User != "system:serviceaccount:"+ns+":writer" || !slices.Equal(r.Spec.Groups, want) ||
			ra.Group != "coordination.k8s.io" || ra.Resource != "leases" || ra.Namespace != "leases" {
			t.Errorf("review %+v", r.Spec)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestAPIResolverRedTeam: a review's SubjectAccessReview names the Lease when asked to, an
// evaluation error is kept apart from a refusal, no more than the limit of lookups run at once
// (the slot is taken before a goroutine starts), and nothing starts after the deadline.
func TestAPIResolverRedTeam(t *testing.T) {
	cs := fake.NewClientset()
	var mu sync.Mutex
	inFlight, peak, sent := 0, 0, 0
	var names []string
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		mu.Lock()
		inFlight++
		sent++
		peak = max(peak, inFlight)
		names = append(names, sar.Spec.ResourceAttributes.Name)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		sar.Status.EvaluationError = "webhook authorizer unreachable"
		return true, sar, nil
	})
	writer := types.NamespacedName{Namespace: ns, Name: "writer"}
	var q webhook.Query
	for i := range 40 {
		q.Access = append(q.Access, webhook.AccessCheck{ServiceAccount: writer, Namespace: ns, Verb: "get", Name: fmt.Sprintf("ehdb-shard-%08x", i)})
	}
	f := webhook.NewAPIResolver(kubeapi.New(cs), 3).Resolve(context.Background(), q)
	if peak > 3 {
		t.Errorf("%d lookups in flight at once, want at most 3", peak)
	}
	if got := f.Access[q.Access[7]]; got.Allowed || got.EvaluationError != "webhook authorizer unreachable" || got.Err != nil {
		t.Errorf("evaluation error: %+v", got)
	}
	if !slices.Contains(names, "ehdb-shard-00000007") {
		t.Errorf("the SubjectAccessReviews carry no Lease name: %q", names)
	}

	// A deadline already passed: nothing is sent, every answer is the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := sent
	f = webhook.NewAPIResolver(kubeapi.New(cs), 3).Resolve(ctx, q)
	if sent != before {
		t.Errorf("%d reviews sent after the deadline", sent-before)
	}
	if got := f.Access[q.Access[0]]; got.Err == nil || !errors.Is(got.Err, context.Canceled) {
		t.Errorf("after the deadline: %+v", got)
	}
}

// TestAPIResolverTellsANarrowedRoleFromAnOlderChart: the twenty-third red team, as a careless
// cluster admin, dropped `list validatingadmissionpolicies` from the webhook's ClusterRole; the
// resolver took it for an older chart's (which grants neither that nor the ClusterRoles list)
// and the armed Pod's lease guard check was skipped with a warning. Only both reads denied
// together are an older chart's; one denied alone is a narrowed role, and what it hides cannot
// be verified.
func TestAPIResolverTellsANarrowedRoleFromAnOlderChart(t *testing.T) {
	forbid := func(resource string) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC: not allowed"))
		}
	}
	for _, tc := range []struct {
		name                string
		denyVAP, denyRoles  bool
		guardOlder, roleOld bool
	}{
		{"both granted", false, false, false, false},
		{"both denied: an older chart's", true, true, true, true},
		{"only the lease guards denied: narrowed", true, false, false, false},
		{"only the ClusterRoles denied: narrowed", false, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.denyVAP {
				cs.PrependReactor("list", "validatingadmissionpolicies", forbid("validatingadmissionpolicies"))
			}
			if tc.denyRoles {
				cs.PrependReactor("list", "clusterroles", forbid("clusterroles"))
			}
			f := webhook.NewAPIResolver(kubeapi.New(cs), 2).Resolve(context.Background(), webhook.Query{LeaseGuards: []string{ns}, ClusterRoles: true})
			g := f.LeaseGuards[ns]
			if older := g.Unread != ""; older != tc.guardOlder {
				t.Errorf("lease guard taken for an older chart's: %v, want %v (%+v)", older, tc.guardOlder, g)
			}
			if tc.denyVAP && !tc.guardOlder && g.Err == nil {
				t.Errorf("a narrowed role's lease guard read must be an error: %+v", g)
			}
			r := f.ClusterRoles
			if older := r.Unread != ""; older != tc.roleOld {
				t.Errorf("ClusterRoles taken for an older chart's: %v, want %v (%+v)", older, tc.roleOld, r)
			}
			if tc.denyRoles && r.Err == nil {
				t.Errorf("a denied ClusterRoles list must be an error: %+v", r)
			}
		})
	}
}

// TestAPIResolverSharesBindingLists: each list of bindings is read whole and decoded, and a
// namespace admin decides how large it is, so reviews that ask at once share lists rather than each
// hold a copy (the twenty-sixth red team's 32 copies of a 15.5 MB list took the webhook to 474 MB):
// per scope one list runs at a time, and every review asking meanwhile shares the next one.
func TestAPIResolverSharesBindingLists(t *testing.T) {
	c := &countingLists{APIClient: kubeapi.New(fake.NewClientset()), calls: map[string]int{}}
	r := webhook.NewAPIResolver(c, 4)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			f := r.Resolve(context.Background(), webhook.Query{Namespace: ns, Bindings: []string{ns}})
			if b := f.Bindings[ns]; b.Err != nil {
				t.Errorf("list: %v", b.Err)
			}
		})
	}
	wg.Wait()
	// Twelve asking within microseconds share two lists (three if one asks late); six would mean
	// no sharing at all on any but a machine stalled for the whole test.
	if c.most != 1 || c.calls[ns] >= 6 {
		t.Fatalf("%d lists of %s for 12 reviews asking at once, %d of them at once; want a few, one at a time", c.calls[ns], ns, c.most)
	}
}

// countingLists is an APIClient whose RoleBinding lists take a while, counting them and how many
// run at once.
type countingLists struct {
	webhook.APIClient
	mu             sync.Mutex
	inFlight, most int
	calls          map[string]int
}

func (c *countingLists) ListRoleBindings(ctx context.Context, namespace string) (*rbacv1.RoleBindingList, error) {
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.calls[namespace]++
	c.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return c.APIClient.ListRoleBindings(ctx, namespace)
}
