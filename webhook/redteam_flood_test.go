package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// asUser is body, an AdmissionReview, as sent for user.
func asUser(t testing.TB, body []byte, user string) []byte {
	t.Helper()
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil {
		t.Fatal(err)
	}
	rv.Request.UserInfo.Username = user
	out, err := json.Marshal(rv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHeavyReviewsLeavePodsTheirSlots (team E #3, team 26 D B1): reviews whose entry fails closed
// (RBAC, workloads, ConfigMaps), however many requesters send them, cannot take every slot, so a Pod review — which the API server
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
			resp, err := http.Post(srv.URL+"?timeout=10s", "application/json", strings.NewReader(string(asUser(t, heavy, fmt.Sprintf("flooder-%d", i)))))
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
	code, out, raw := post(t, srv.URL+"?timeout=1s", "application/json",
		asUser(t, wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, armed, nil), "system:serviceaccount:kube-system:statefulset-controller"))
	if code != http.StatusOK || out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "NOETL_EHDB_ELECTION") {
		t.Fatalf("an armed Pod with its election off, beside %d heavy RBAC reviews (%d of them held): HTTP %d %s; want it judged and refused, not left to the entry's Ignore",
			len(codes), cluster.count(), code, raw)
	}
	if held := cluster.count(); held > limit-1 {
		t.Fatalf("heavy reviews hold %d of %d slots, want at most %d", held, limit, limit-1)
	}
}

// slowConfigMaps is r, except that the first hold lookups that read ConfigMaps are held until
// released or their deadline: a flood's heavy Pods, each reading 32 ConfigMaps of 1 MB (team G).
type slowConfigMaps struct {
	*wt.Resolver
	release chan struct{}
	hold    atomic.Int32
}

func (s *slowConfigMaps) Resolve(ctx context.Context, q webhook.Query) *webhook.Facts {
	if len(q.ConfigMaps) > 0 && s.hold.Add(-1) >= 0 {
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return s.Resolver.Resolve(ctx, q)
}

// postNoFatal is post for another goroutine than the test's.
func postNoFatal(url string, body []byte) (int, admissionv1.AdmissionReview, string) {
	var out admissionv1.AdmissionReview
	resp, err := http.Post(url, "application/json", strings.NewReader(string(body)))
	if err != nil {
		return -1, out, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

// TestOneRequestersFloodWaitsBehindItself (team G #3, #4): a namespace admin's flood of heavy Pod
// reviews (each reading ConfigMaps the guard is slow to read) held every slot, so another
// requester's light armed Pod waited until its deadline and the Pods entry's Ignore admitted it.
// Now the first slot the flood frees goes to the other requester, ahead of the flood's own
// waiting reviews, and those that wait past their deadline behind their own are refused, not
// admitted.
func TestOneRequestersFloodWaitsBehindItself(t *testing.T) {
	cluster := &slowConfigMaps{Resolver: goodCluster(), release: make(chan struct{})}
	cluster.hold.Store(33) // the flood's 32, and the first of its waiting reviews to get a slot
	cluster.ConfigMaps = map[string]map[string]string{"flags": {"LOG_LEVEL": "info"}}
	srv := httptest.NewUnstartedServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, LookupTimeout: 10 * time.Second}))
	// Each step waits for the last to be in place, not for a time: CI run 75, its other core
	// busy, sent the excess before the flood held every slot, and they were judged.
	var arrived atomic.Int32 // requests whose headers the server has read
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateActive {
			arrived.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	inPlace := func(what string, done func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return done(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	heavy := barePod(sts(append(compliant(), envFrom(cmEnvFrom("flags", "")))...), "noetl-cmdbus-writer-0")
	heavyBody := asUser(t, wt.Review(t, admissionv1.Create, podKind, heavy, nil), "mallory")

	type answer struct {
		code    int
		allowed bool
		status  int32
	}
	send := func(body []byte, timeout string) answer {
		resp, err := http.Post(srv.URL+"?timeout="+timeout, "application/json", strings.NewReader(string(body)))
		if err != nil {
			return answer{code: -1}
		}
		defer resp.Body.Close()
		var rv admissionv1.AdmissionReview
		_ = json.NewDecoder(resp.Body).Decode(&rv)
		if rv.Response == nil {
			return answer{code: resp.StatusCode}
		}
		return answer{resp.StatusCode, rv.Response.Allowed, rv.Response.Result.Code}
	}
	var flood, over sync.WaitGroup
	excess := make([]answer, 8)
	released := false
	t.Cleanup(func() {
		if !released {
			close(cluster.release)
		}
		flood.Wait()
		over.Wait()
	})
	for range 32 { // every slot, held
		flood.Go(func() { send(heavyBody, "10s") })
	}
	inPlace("the flood holding every slot", func() bool { return cluster.hold.Load() <= 1 })
	for i := range excess {
		over.Go(func() { excess[i] = send(heavyBody, "3s") })
	}
	inPlace("the excess sent", func() bool { return arrived.Load() >= 32+int32(len(excess)) })
	time.Sleep(100 * time.Millisecond) // from its headers to its slot's queue: decoding a small review

	light := barePod(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION", "false"))...), "noetl-cmdbus-writer-1")
	type reply struct {
		code int
		out  admissionv1.AdmissionReview
		raw  string
	}
	lightDone := make(chan reply, 1)
	lightBody := asUser(t, wt.Review(t, admissionv1.Create, podKind, light, nil), "system:serviceaccount:kube-system:statefulset-controller")
	go func() {
		code, out, raw := postNoFatal(srv.URL+"?timeout=2s", lightBody)
		lightDone <- reply{code, out, raw}
	}()
	inPlace("the other requester's Pod sent", func() bool { return arrived.Load() >= 32+int32(len(excess))+1 })
	time.Sleep(100 * time.Millisecond)
	cluster.release <- struct{}{} // one of the flood's reviews ends, freeing one slot
	r := <-lightDone
	code, out, raw := r.code, r.out, r.raw
	if code != http.StatusOK || out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "NOETL_EHDB_ELECTION") {
		t.Fatalf("another requester's armed Pod, its election off, beside mallory's 40 heavy Pods, one of which ended: HTTP %d %.300s; want it judged and refused", code, raw)
	}
	// The excess waits behind mallory's own share until its deadline: refused, none admitted.
	over.Wait()
	close(cluster.release)
	released = true
	flood.Wait()
	// Each is answered in an AdmissionResponse: judged (200, or 403 for one whose lookups met its
	// deadline), or refused for her own load (429) if it waited out its deadline without a slot.
	// Which of them gets a slot is the machine's: the slot freed by the other requester's review
	// passes from one of hers to the next as each meets its deadline, and on a loaded machine
	// (CI run 75) their deadlines, as far apart as they were sent, let every one have it in turn.
	busy := 0
	for _, a := range excess {
		if a.code != http.StatusOK || (a.status != http.StatusOK && a.status != http.StatusForbidden && a.status != http.StatusTooManyRequests) {
			t.Fatalf("mallory's Pods past her share: %+v; want each judged, or refused for her own load (code 429 in the answer), none left to the entry's Ignore", excess)
		}
		if !a.allowed && a.status == http.StatusTooManyRequests {
			busy++
		}
	}
	t.Logf("mallory's Pods past her share: %d refused for her own load, %d judged", busy, len(excess)-busy)
}
