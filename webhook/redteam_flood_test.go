package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// slowBindings is r, except that every lookup that lists bindings (an RBAC review's) is held
// until released or its deadline: the heavy reviews of a flood.
type slowBindings struct {
	*wt.Resolver
	release chan struct{}
	mu      sync.Mutex
	held    int
}

func (s *slowBindings) Resolve(ctx context.Context, q webhook.Query) *webhook.Facts {
	if len(q.Bindings) > 0 {
		s.mu.Lock()
		s.held++
		s.mu.Unlock()
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return s.Resolver.Resolve(ctx, q)
}

func (s *slowBindings) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// TestHeavyReviewsLeavePodsTheirSlots (team E #3, team 26 D B1): reviews whose entry fails closed
// (RBAC, workloads, ConfigMaps) cannot take every slot, so a Pod review — which the API server
// admits unjudged when it is not answered — is judged while a flood of heavy RBAC reviews holds
// all the slots they may. Before, the flood's dry-run RoleBinding deletes held all 32 and armed
// Pods were admitted through the Pods entry's Ignore.
func TestHeavyReviewsLeavePodsTheirSlots(t *testing.T) {
	const limit = 4
	cluster := &slowBindings{Resolver: rbacCluster(), release: make(chan struct{})}
	h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, MaxInFlight: limit, LookupTimeout: 10 * time.Second,
		Accounts: fakeReaders(t, sts(compliant()...)), Clock: clocktesting.NewFakePassiveClock(now)}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)

	heavy := rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA)))
	var flood sync.WaitGroup
	codes := make([]int, limit+2)
	for i := range codes {
		flood.Add(1)
		go func() {
			defer flood.Done()
			resp, err := http.Post(srv.URL+"?timeout=10s", "application/json", strings.NewReader(string(heavy)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	t.Cleanup(func() {
		close(cluster.release)
		flood.Wait()
	})
	// Until the flood holds what it can: every slot before, all but the Pods' reserve now.
	for deadline := time.Now().Add(5 * time.Second); cluster.count() < limit-1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for deadline := time.Now().Add(time.Second); cluster.count() < limit && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if cluster.count() < limit-1 {
		t.Fatalf("the flood holds %d slots, want at least %d", cluster.count(), limit-1)
	}

	armed := pod(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION", "false"))...), "noetl-cmdbus-writer-0")
	armed.OwnerReferences = nil
	code, out, raw := post(t, srv.URL+"?timeout=1s", "application/json", wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, armed, nil))
	if code != http.StatusOK || out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "NOETL_EHDB_ELECTION") {
		t.Fatalf("an armed Pod with its election off, beside %d heavy RBAC reviews (%d of them held): HTTP %d %s; want it judged and refused, not left to the entry's Ignore",
			len(codes), cluster.count(), code, raw)
	}
	if held := cluster.count(); held > limit-1 {
		t.Fatalf("heavy reviews hold %d of %d slots, want at most %d", held, limit, limit-1)
	}
}
