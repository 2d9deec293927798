package webhook_test

import (
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

// The kubelet sets its own annotations on the copy of a Pod it runs, and the downward API reads
// that copy (pkg/kubelet/config: config.source is "api" for every Pod from the API server,
// config.seen the instant it first saw it). Red team I wrote config.source: "0" on a bare Pod
// whose shard came from it: the guard judged shard 0, whose Lease is live, and admitted it; the
// process would read "api", no shard, election declined, fence armed. The same through a
// StatefulSet ("true$(SRC)" for the election switch), a Deployment (the election's namespace) and
// a CronJob (the shard). Each row marked refused was admitted on the previous code.
func TestTheKubeletsOwnAnnotationsAreItsToSet(t *testing.T) {
	fromAnnotation := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + key + "']"}}}
	}
	annotate := func(k, v string) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) { s.Spec.Template.Annotations = map[string]string{k: v} }
	}
	source, seen := "kubernetes.io/config.source", "kubernetes.io/config.seen"
	podKind, setKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	onPod := func(s *appsv1.StatefulSet, name, k, v string) *corev1.Pod {
		p := barePod(s, name)
		p.Annotations = map[string]string{k: v}
		return p
	}
	cases := []struct {
		name    string
		kind    metav1.GroupVersionKind
		obj     runtime.Object
		allowed bool
		msg     string
	}{
		{"a bare Pod's shard from config.source", podKind,
			onPod(sts(append(compliant(), envVar(fromAnnotation("NOETL_EHDB_ELECTION_SHARD", source)))...), "rti-a1", source, "0"), false, "no shard"},
		{"a set's election switch made of config.source", setKind,
			sts(append(compliant(), unsetEnv("NOETL_EHDB_ELECTION"), appendEnv(fromAnnotation("SRC", source)), appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", Value: "true$(SRC)"}), annotate(source, ""))...),
			false, `"trueapi" is not a boolean`},
		{"a set's election namespace from config.source", setKind,
			sts(append(compliant(), envVar(fromAnnotation("NOETL_EHDB_ELECTION_NAMESPACE", source)), annotate(source, ns))...), false, "namespace api"},
		{"a bare Pod's election switch from config.seen", podKind,
			onPod(sts(append(compliant(), envVar(fromAnnotation("NOETL_EHDB_ELECTION", seen)))...), wt.WriterName+"-0", seen, "true"), false, "the time it first sees the pod"},
		{"config.source read by a variable the election does not read", podKind,
			onPod(sts(append(compliant(), envVar(fromAnnotation("SOURCE", source)))...), wt.WriterName+"-0", source, "0"), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Owners: fakeOwners{}, Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			obj := tc.obj
			if p, ok := obj.(*corev1.Pod); ok {
				obj = saAdmitted(p)
			}
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, tc.kind, obj, nil))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Errorf("the refusal does not say %q: %s", tc.msg, out.Response.Result.Message)

			}
		})
	}
}
