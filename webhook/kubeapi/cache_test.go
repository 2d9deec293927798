package kubeapi_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
)

// Only positive answers are kept, and only for the TTL: a refusal clears the moment the operator
// fixes it, and Leases and ConfigMaps are read on every review.
func TestCacheAllowedForKeepsOnlyPositiveAnswers(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-00000000", Namespace: ns}},
	)
	allowed := map[string]bool{"get": true, "create": true, "update": false}
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = allowed[sar.Spec.ResourceAttributes.Verb] && !strings.HasSuffix(sar.Spec.User, ":default")
		return true, sar, nil
	})
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	r := webhook.NewAPIResolver(kubeapi.New(cs), 4, webhook.CacheAllowedFor(10*time.Second, clk))
	writer := types.NamespacedName{Namespace: ns, Name: "writer"}
	q := webhook.Query{
		Namespace:       ns,
		ConfigMaps:      []string{"flags"},
		ServiceAccounts: []string{"writer", "missing"},
		Access: []webhook.AccessCheck{{ServiceAccount: writer, Namespace: ns, Verb: "get"},
			{ServiceAccount: writer, Namespace: ns, Verb: "create"}, {ServiceAccount: writer, Namespace: ns, Verb: "update"},
			// The default account's review only feeds a warning: kept whatever it says.
			{ServiceAccount: types.NamespacedName{Namespace: ns, Name: "default"}, Namespace: ns, Verb: "update"}},
		Leases: []types.NamespacedName{{Namespace: ns, Name: "ehdb-shard-00000000"}},
	}
	calls := func() map[string]int {
		n := map[string]int{}
		for _, a := range cs.Actions() {
			n[a.GetVerb()+" "+a.GetResource().Resource]++
		}
		cs.ClearActions()
		return n
	}
	want := func(step string, got, want map[string]int) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %d × %s, want %d (all: %v)", step, got[k], k, v, got)
			}
		}
	}

	f := r.Resolve(context.Background(), q)
	if !f.Access[q.Access[0]].Allowed || f.Access[q.Access[2]].Allowed || !f.ServiceAccounts["missing"].NotFound {
		t.Fatalf("first answers wrong: %+v %+v", f.Access, f.ServiceAccounts)
	}
	want("first review", calls(), map[string]int{"get serviceaccounts": 2, "create subjectaccessreviews": 4, "get configmaps": 1, "get leases": 1})

	clk.SetTime(clk.Now().Add(9 * time.Second))
	f = r.Resolve(context.Background(), q)
	if !f.Access[q.Access[1]].Allowed || f.ServiceAccounts["writer"].NotFound {
		t.Fatalf("cached answers wrong: %+v %+v", f.Access, f.ServiceAccounts)
	}
	// Kept: the existing SA, the two allowed reviews and the default account's. Asked again: the
	// missing SA, the writer's refused review, the ConfigMap and the Lease.
	want("within the TTL", calls(), map[string]int{"get serviceaccounts": 1, "create subjectaccessreviews": 1, "get configmaps": 1, "get leases": 1})

	allowed["update"] = true // the operator fixed the binding: seen at once
	if f = r.Resolve(context.Background(), q); !f.Access[q.Access[2]].Allowed {
		t.Fatal("a fixed binding is still refused: a negative answer was cached")
	}
	calls()

	clk.SetTime(clk.Now().Add(2 * time.Second)) // past the first answers' TTL
	r.Resolve(context.Background(), q)
	want("after the TTL", calls(), map[string]int{"get serviceaccounts": 2, "create subjectaccessreviews": 3})
}

// Leases come from the watch when it has them, and from a GET when it does not (a Lease created a
// moment ago may not have arrived yet): a miss is never taken as "absent".
func TestReadLeasesFromAWatchFallsBackToAGet(t *testing.T) {
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-00000001", Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptrTo[int32](4)},
	})
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := indexer.Add(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-00000000", Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptrTo[int32](7)},
	}); err != nil {
		t.Fatal(err)
	}
	r := webhook.NewAPIResolver(kubeapi.New(cs), 4, webhook.ReadLeasesFrom(coordinationlisters.NewLeaseLister(indexer)))
	watched, fresh, absent := types.NamespacedName{Namespace: ns, Name: "ehdb-shard-00000000"},
		types.NamespacedName{Namespace: ns, Name: "ehdb-shard-00000001"}, types.NamespacedName{Namespace: ns, Name: "ehdb-shard-00000002"}
	f := r.Resolve(context.Background(), webhook.Query{Leases: []types.NamespacedName{watched, fresh, absent}})

	if got := f.Leases[watched]; got.Err != nil || got.NotFound || *got.Spec.LeaseTransitions != 7 {
		t.Errorf("watched Lease: %+v", got)
	}
	if got := f.Leases[fresh]; got.Err != nil || got.NotFound || *got.Spec.LeaseTransitions != 4 {
		t.Errorf("Lease the watch has not delivered yet: %+v", got)
	}
	if got := f.Leases[absent]; !got.NotFound {
		t.Errorf("absent Lease: %+v", got)
	}
	var gets []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
			gets = append(gets, a.(k8stesting.GetAction).GetName())
		}
	}
	slices.Sort(gets)
	if !slices.Equal(gets, []string{fresh.Name, absent.Name}) {
		t.Errorf("GETs = %v, want only the two the watch lacked", gets)
	}
}

// fakeGeneration is a watch of the RBAC objects: gen counts the changes it saw; ok is its health.
type fakeGeneration struct {
	gen uint64
	ok  bool
}

func (g *fakeGeneration) Generation() (uint64, bool) { return g.gen, g.ok }

// Issue 17: an answer cached as allowed is not served once the RBAC or ServiceAccount watch saw a
// change (a binding or ServiceAccount deleted), nor while that watch is not known to work, nor
// after the handler admitted an RBAC change on this replica (Forget).
func TestCachedAnswersDoNotOutliveAnRBACChange(t *testing.T) {
	cs := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns}})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = true
		return true, sar, nil
	})
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	g := &fakeGeneration{ok: true}
	r := webhook.NewAPIResolver(kubeapi.New(cs), 4, webhook.CacheAllowedFor(time.Hour, clk), webhook.ForgetOnChange(g))
	writer := types.NamespacedName{Namespace: ns, Name: "writer"}
	q := webhook.Query{Namespace: ns, ServiceAccounts: []string{"writer"}, Access: []webhook.AccessCheck{{ServiceAccount: writer, Namespace: ns, Verb: "update"}}}
	lookups := func() int {
		n := len(cs.Actions())
		cs.ClearActions()
		return n
	}
	r.Resolve(context.Background(), q)
	if n := lookups(); n != 2 {
		t.Fatalf("first review: %d API calls, want 2", n)
	}
	r.Resolve(context.Background(), q)
	if n := lookups(); n != 0 {
		t.Fatalf("same generation: %d API calls, want 0 (cached)", n)
	}
	g.gen++ // the watch saw a RoleBinding deleted
	r.Resolve(context.Background(), q)
	if n := lookups(); n != 2 {
		t.Errorf("after an RBAC change: %d API calls, want 2 (nothing cached survives it)", n)
	}
	g.ok = false // the watch broke: it could hide a change
	r.Resolve(context.Background(), q)
	r.Resolve(context.Background(), q)
	if n := lookups(); n != 4 {
		t.Errorf("with the RBAC watch broken: %d API calls, want 4 (no caching)", n)
	}
	g.ok = true
	r.Resolve(context.Background(), q)
	lookups()
	r.Forget()
	r.Resolve(context.Background(), q)
	if n := lookups(); n != 2 {
		t.Errorf("after Forget: %d API calls, want 2", n)
	}
}
