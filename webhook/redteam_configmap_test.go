package webhook_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// Issue 17, class 1: every ConfigMap change that could change an armed or arming reader's
// resolved fencing value or election configuration is judged as that reader would run after it:
// an edit that arms is a transition (order check), an edit that turns an armed reader's election
// off, or moves its shard or namespace, is refused with the removal order; deletes and removed keys
// included.
func TestConfigMapChangesAreJudgedForEveryReader(t *testing.T) {
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: data}
	}
	// assembled reads its fencing value from two keys: $(P1)$(P2).
	assembled := sts(wt.ServiceAccount(wt.WriterSA), wt.ElectionOn(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "3"), envFrom(cmEnvFrom("flags", "")), wt.SetEnv("NOETL_EHDB_FENCING", "$(P1)$(P2)"))
	assembled.Name = "assembled"
	// electionFromCM is armed literally and takes its election configuration from the ConfigMap.
	electionFromCM := sts(wt.Armed(), wt.ServiceAccount(wt.WriterSA), unsetEnv("NOETL_EHDB_ELECTION"), envFrom(cmEnvFrom("flags", "")))
	electionFromCM.Name = "election-from-cm"
	// barePodReader is a Pod of its own reading the ConfigMap: its containers re-read it at every start.
	barePodReader := barePod(sts(wt.ServiceAccount(wt.WriterSA), wt.ElectionOn(), envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))), "loner-9")

	// many are 40 unarmed readers of the ConfigMap (fencing off in their own env), more than the
	// guard judges in one change: an edit of a key none of them reads under a name the guard reads
	// moves none of them, and must not be refused as too complex.
	var many []runtime.Object
	for i := 0; i < 40; i++ {
		r := sts(wt.SetEnv("NOETL_EHDB_FENCING", "off"), envFrom(cmEnvFrom("flags", "")))
		r.Name = fmt.Sprintf("app-%d", i)
		many = append(many, r)
	}
	// manyUnset are 40 readers whose fencing value the ConfigMap decides.
	var manyUnset []runtime.Object
	for i := 0; i < 40; i++ {
		r := sts(unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", "")))
		r.Name = fmt.Sprintf("reader-%d", i)
		manyUnset = append(manyUnset, r)
	}

	cases := []struct {
		name     string
		readers  []runtime.Object
		op       admissionv1.Operation
		old, now map[string]string // nil: absent
		allowed  bool
		msg      []string
	}{
		{"a value assembled from two keys becomes enforce", []runtime.Object{assembled}, admissionv1.Update,
			map[string]string{"P1": "shadow"}, map[string]string{"P1": "enf", "P2": "orce"}, false, []string{"ehdb-shard-00000003 (shard 3) does not exist"}},
		{"an armed reader's election turned off", []runtime.Object{electionFromCM}, admissionv1.Update,
			map[string]string{"NOETL_EHDB_ELECTION": "true"}, map[string]string{"NOETL_EHDB_ELECTION": "false"}, false, []string{"editing ConfigMap noetl/flags is refused", "election is not enabled", "enforce → shadow"}},
		{"an armed reader's election key removed", []runtime.Object{electionFromCM}, admissionv1.Update,
			map[string]string{"NOETL_EHDB_ELECTION": "true"}, map[string]string{}, false, []string{"election is not enabled", "enforce → shadow"}},
		{"the ConfigMap an armed reader's election comes from deleted", []runtime.Object{electionFromCM}, admissionv1.Delete,
			map[string]string{"NOETL_EHDB_ELECTION": "true"}, nil, false, []string{"deleting ConfigMap noetl/flags is refused", "election is not enabled", "enforce → shadow"}},
		{"an armed reader's shard moved to one whose Lease is not live", []runtime.Object{electionFromCM}, admissionv1.Update,
			map[string]string{"NOETL_EHDB_ELECTION": "true", "NOETL_EHDB_ELECTION_SHARD": "0"}, map[string]string{"NOETL_EHDB_ELECTION": "true", "NOETL_EHDB_ELECTION_SHARD": "4"}, false,
			[]string{"ehdb-shard-00000004 (shard 4) does not exist"}},
		{"an armed reader's election namespace moved", []runtime.Object{electionFromCM}, admissionv1.Update,
			map[string]string{"NOETL_EHDB_ELECTION": "true"}, map[string]string{"NOETL_EHDB_ELECTION": "true", "NOETL_EHDB_ELECTION_NAMESPACE": "elsewhere"}, false,
			[]string{"elsewhere/ehdb-shard-00000000"}},
		{"a bare Pod reading the ConfigMap armed by it", []runtime.Object{barePodReader}, admissionv1.Update,
			map[string]string{"fencing": "shadow"}, map[string]string{"fencing": "enforce"}, false, []string{"Pod noetl/loner-9", "ehdb-shard-00000009 (shard 9) does not exist"}},
		{"an unrelated edit of an armed reader's ConfigMap", []runtime.Object{electionFromCM}, admissionv1.Update,
			map[string]string{"NOETL_EHDB_ELECTION": "true"}, map[string]string{"NOETL_EHDB_ELECTION": "true", "LOG_LEVEL": "debug"}, true, nil},
		{"disarming through the ConfigMap", []runtime.Object{assembled}, admissionv1.Update,
			map[string]string{"P1": "enf", "P2": "orce"}, map[string]string{"P1": "shadow"}, true, nil},
		{"a ConfigMap nobody reads", nil, admissionv1.Delete, map[string]string{"x": "enforce"}, nil, true, nil},
		{"an unrelated edit of a ConfigMap 40 unarmed workloads read", many, admissionv1.Update,
			map[string]string{"LOG_LEVEL": "info"}, map[string]string{"LOG_LEVEL": "debug"}, true, nil},
		{"a new unrelated key in a ConfigMap 40 unarmed workloads read", many, admissionv1.Update,
			map[string]string{"LOG_LEVEL": "info"}, map[string]string{"LOG_LEVEL": "info", "COLOR": "blue"}, true, nil},
		{"an edit that may arm 40 readers: more than the guard judges", manyUnset, admissionv1.Update,
			map[string]string{"LOG_LEVEL": "info"}, map[string]string{"LOG_LEVEL": "info", "NOETL_EHDB_FENCING": "enforce"}, false,
			[]string{"reader-0", "more object(s) reading ConfigMap noetl/flags are refused likewise"}},
		{"the ConfigMap 40 readers need created: each may start, and is judged", manyUnset, admissionv1.Create,
			nil, map[string]string{"LOG_LEVEL": "info"}, false, []string{"40 guarded objects read it"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := goodCluster() // shard 0 live in noetl; SA bound in noetl only
			cluster.Grant(ns, wt.WriterSA, "elsewhere", "get", "list", "watch", "create", "update")
			var objs []any
			for _, o := range tc.readers {
				objs = append(objs, o)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, objs...), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			var obj, old runtime.Object
			if tc.now != nil {
				obj = cm(tc.now)
			}
			if tc.old != nil {
				old = cm(tc.old)
			}
			body := configMapReview(t, tc.op, cmKind, obj, old)
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			for _, m := range tc.msg {
				if !strings.Contains(out.Response.Result.Message, m) {
					t.Errorf("the denial does not say %q:\n%s", m, out.Response.Result.Message)
				}
			}
		})
	}
	_ = appsv1.StatefulSet{}
}

// configMapReview is an AdmissionReview of ConfigMap noetl/flags; obj is nil for a DELETE.
func configMapReview(t *testing.T, op admissionv1.Operation, kind metav1.GroupVersionKind, obj, old runtime.Object) []byte {
	t.Helper()
	body := wt.Review(t, op, kind, obj, old)
	return []byte(strings.Replace(string(body), `"name":"`+wt.WriterName+`"`, `"name":"flags"`, 1))
}

// Issue 17, class 8: a ConfigMap in a namespace the webhook's watches do not cover is not "read
// by no one": the review fails closed.
func TestConfigMapOutsideTheWatchesIsNotVerified(t *testing.T) {
	// Watches on "elsewhere" only: they hold none of noetl's readers.
	readers := webhook.ConfigMapReaders(webhook.ScopedReaders{Readers: fakeReaders(t), Namespaces: []string{"elsewhere"}})
	h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Readers: readers}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: map[string]string{"fencing": "enforce"}}
	_, out, raw := post(t, srv.URL, "application/json", configMapReview(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, cm, nil))
	if out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "could not tell which workloads read") ||
		!strings.Contains(out.Response.Result.Message, "not namespace noetl") {
		t.Fatalf("a ConfigMap outside the watches: %s; want it refused as could not verify", raw)
	}
}
