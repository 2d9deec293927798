package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// BenchmarkDecide measures the guard on the reference writer StatefulSet (SPEC.md "Reference
// deployment"), API lookups answered by the in-memory resolver so only the guard's own work is
// measured:
//   - decide: the pure policy with every fact at hand;
//   - evaluate/armed: Needs, the (fake) lookups and Decide for the writer armed and compliant;
//   - evaluate/unarmed: today's writer (fencing off), which needs no lookup;
//   - review/armed: the whole HTTP path, JSON review in, JSON answer out.
func BenchmarkDecide(b *testing.B) {
	policy := webhook.Policy{RequireLiveLease: true}
	armed := webhook.Input{Operation: admissionv1.Create, Object: workload(b, gvkSTS, sts(compliant()...))}
	unarmed := webhook.Input{Operation: admissionv1.Create, Object: workload(b, gvkSTS, sts())}

	b.Run("decide", func(b *testing.B) {
		cluster := goodCluster()
		facts := webhook.NewFacts(now)
		for q := webhook.Needs(armed, facts, policy); !q.Empty(); q = webhook.Needs(armed, facts, policy) {
			facts.Merge(cluster.Resolve(context.Background(), q))
		}
		b.ReportAllocs()
		for b.Loop() {
			if d := webhook.Decide(armed, facts, policy); !d.Allowed {
				b.Fatal(d.Message())
			}
		}
	})
	b.Run("evaluate/armed", func(b *testing.B) {
		cluster := goodCluster()
		b.ReportAllocs()
		for b.Loop() {
			cluster.Queries = cluster.Queries[:0]
			if d, _ := webhook.Evaluate(context.Background(), cluster, armed, policy, now); !d.Allowed {
				b.Fatal(d.Message())
			}
		}
	})
	b.Run("evaluate/unarmed", func(b *testing.B) {
		cluster := goodCluster()
		b.ReportAllocs()
		for b.Loop() {
			if d, n := webhook.Evaluate(context.Background(), cluster, unarmed, policy, now); !d.Allowed || n != 0 {
				b.Fatal(d.Message())
			}
		}
	})
	b.Run("review/armed", func(b *testing.B) {
		cluster := goodCluster()
		h := webhook.NewHTTPHandler(&webhook.Handler{Resolver: cluster, Policy: policy, Clock: clocktesting.NewFakePassiveClock(now), Log: logr.Discard()})
		body := wt.Review(b, admissionv1.Create, stsKind, wt.ReferenceWriter(ns, compliant()...), nil)
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			cluster.Queries = cluster.Queries[:0]
			serveAllowed(b, h, body)
		}
	})
	// A ClusterRole piece deleted in a cluster of 300 ClusterRoles, 8 of them aggregating the
	// others by label (as admin, edit, view and operators' roles do), one bound to an armed writer
	// that a second piece keeps granted: the aggregation controller's rewrite followed to its
	// fixed point on every review.
	b.Run("review/aggregated-clusterrole", func(b *testing.B) {
		cluster := rbacCluster()
		crbWriter := sts(append(compliant(), wt.ServiceAccount("crb-writer"))...)
		crbWriter.Name = "crb"
		cluster.ClusterRoles = nil
		for i := range 8 {
			cluster.ClusterRoles = append(cluster.ClusterRoles, *clusterRole([]string{"leases", "agg-1", "agg-2", "agg-3", "agg-4", "agg-5", "agg-6", "agg-7"}[i], nil,
				selecting("example.com/agg-"+strconv.Itoa(i), "example.com/agg-"+strconv.Itoa((i+1)%8))))
		}
		for i := range 292 {
			rules := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: []string{"get", "list", "watch", strconv.Itoa(i)}},
				{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "pods"}, Verbs: []string{"get", strconv.Itoa(i)}}}
			if i < 2 {
				rules = append(rules, leaseRule)
			}
			cluster.ClusterRoles = append(cluster.ClusterRoles, *clusterRole("piece-"+strconv.Itoa(i), map[string]string{"example.com/agg-" + strconv.Itoa(i%8): "true"}, nil, rules...))
		}
		h := webhook.NewHTTPHandler(&webhook.Handler{Resolver: cluster, Policy: policy, Accounts: fakeReaders(b, crbWriter), Clock: clocktesting.NewFakePassiveClock(now), Log: logr.Discard()})
		// piece-0 and piece-1 both reach "leases" (piece-1 through agg-1, which leases selects).
		body := rbacReview(b, admissionv1.Delete, crKind, "piece-0", nil, &cluster.ClusterRoles[8])
		b.ReportAllocs()
		for b.Loop() {
			cluster.Queries = cluster.Queries[:0]
			serveAllowed(b, h, body)
		}
	})
}

// A ClusterRole that grants lease verbs narrowed while a namespace admin's two RoleBindings name
// 60,000 made-up accounts with it (the twenty-fifth red team's; a quadratic walk of the subjects
// took 20 s, past the API server's wait): judged in linear time, admitted since no writer runs
// as any of them.
func BenchmarkRBACReviewOfManySubjects(b *testing.B) {
	cluster := rbacCluster()
	cluster.ClusterRoleBindings = nil
	cluster.RoleBindings = append(cluster.RoleBindings,
		*roleBinding("big-0", "ClusterRole", "leases", madeUpSubjects("a", 30000)...), *roleBinding("big-1", "ClusterRole", "leases", madeUpSubjects("b", 30000)...))
	old := &cluster.ClusterRoles[0]
	narrowed := old.DeepCopy()
	narrowed.Rules = nil
	h := webhook.NewHTTPHandler(&webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(b, sts(compliant()...)),
		Clock: clocktesting.NewFakePassiveClock(now), Log: logr.Discard(), ClusterRoleScopes: []string{ns}})
	body := rbacReview(b, admissionv1.Update, crKind, old.Name, narrowed, old)
	b.ReportAllocs()
	for b.Loop() {
		cluster.Queries = cluster.Queries[:0]
		serveAllowed(b, h, body)
	}
}

// serveAllowed posts one review body to h and fails b unless it is allowed.
func serveAllowed(b *testing.B, h http.Handler, body []byte) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
		b.Fatal(rec.Body.String())
	}
}

// BenchmarkFuzzAdmissionReviewInput is the work FuzzAdmissionReview does per input, over its
// seeds and stored corpus, with the handlers it fuzzes: the engine keeps fuzzing (it also runs
// every new input's minimization, some thousands of runs) only while this stays well under a
// millisecond.
func BenchmarkFuzzAdmissionReviewInput(b *testing.B) {
	var inputs [][]byte
	for _, s := range fuzzReviewSeeds {
		inputs = append(inputs, s.program)
	}
	entries, _ := os.ReadDir("testdata/fuzz/FuzzAdmissionReview")
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("testdata/fuzz/FuzzAdmissionReview", e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		// The corpus format: "go test fuzz v1" then []byte("...") as a Go literal.
		lines := strings.SplitN(string(raw), "\n", 2)
		if len(lines) < 2 {
			continue
		}
		lit := strings.TrimSuffix(strings.TrimSpace(lines[1]), ")")
		lit = strings.TrimPrefix(lit, "[]byte(")
		if s, err := strconv.Unquote(lit); err == nil {
			inputs = append(inputs, []byte(s))
		}
	}
	h, bound := fuzzHandler(b), fuzzBoundHandler(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		fuzzReviewInput(b, h, bound, inputs[i%len(inputs)])
		i++
	}
	b.ReportMetric(float64(len(inputs)), "inputs")
}
