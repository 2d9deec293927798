package webhook_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noetl/ehdb-election/webhook"
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
	f := webhook.NewAPIResolver(cs, 2).Resolve(context.Background(), q)

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
