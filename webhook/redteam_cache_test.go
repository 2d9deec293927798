package webhook_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The webhook's watches hold every workload and Pod of the guarded namespaces, and their size is a
// namespace admin's to choose: 60 Deployments carrying a 1 MB env value took the webhook to
// 297 MB, past the chart's 128 Mi limit (a webhook killed for its memory leaves every guarded
// namespace's Pods failing open). An object over 64 KiB is now cached without its long literals
// and the annotations no env reads; on the previous code each row's cached copy kept its
// megabyte. The judgment of a ConfigMap change by the cached reader stays what it was.
func TestTheWatchKeepsLargeObjectsSmall(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	withBig := func(s *appsv1.StatefulSet) { wt.SetEnv("PAYLOAD", big)(s) }
	longArgs := func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Args = []string{"--kubeconfig=/etc/" + big, big}
	}
	notes := func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations = map[string]string{"unread": big[:200<<10], "read": "enforce"}
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": big[:200<<10]}
		wt.SetEnv("ANNOTATED", "")(s)
		c := &s.Spec.Template.Spec.Containers[0]
		c.Env[len(c.Env)-1] = corev1.EnvVar{Name: "ANNOTATED", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['read']"}}}
	}
	probes := func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", big}}}}
	}
	fromFlags := envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))
	for _, tc := range []struct {
		name string
		obj  *appsv1.StatefulSet
	}{
		{"a 1 MB env value", sts(append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), fromFlags, withBig)...)},
		{"1 MB arguments", sts(append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), fromFlags, longArgs)...)},
		{"200 KiB annotations", sts(append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), fromFlags, notes)...)},
		{"a 1 MB probe", sts(append(compliant(), unsetEnv("NOETL_EHDB_FENCING"), fromFlags, probes)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached, err := webhook.StripForReaders(tc.obj.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if n := cached.(*appsv1.StatefulSet).Size(); n > 16<<10 {
				t.Fatalf("the watch keeps %d bytes of the object (%d sent), want at most 16 KiB", n, tc.obj.Size())
			}
			for _, obj := range []any{tc.obj, cached} {
				if got := flagsChange(t, obj, "enforce", "shadow"); got.Allowed || !strings.Contains(got.Result.Message, "through ConfigMap noetl/flags") {
					t.Errorf("shadow -> enforce with no Lease, the reader cached as %T: %+v", obj, got.Result)
				}
				if got := flagsChange(t, obj, "shadow", "enforce"); !got.Allowed {
					t.Errorf("enforce -> shadow refused: %+v", got.Result)
				}
			}
		})
	}
}

// flagsChange is the answer to a ConfigMap "flags" update from old to value of its fencing key,
// judged with reader as the watch holds it and no Lease in the cluster.
func flagsChange(t *testing.T, reader any, value, old string) *admissionv1.AdmissionResponse {
	t.Helper()
	cluster := goodCluster()
	clear(cluster.Leases)
	h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, reader)}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	defer srv.Close()
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
			Data: map[string]string{"fencing": v}}
	}
	body := wt.Review(t, admissionv1.Update, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, cm(value), cm(old))
	body = []byte(strings.Replace(string(body), `"name":"`+wt.WriterName+`"`, `"name":"flags"`, 1))
	_, out, raw := post(t, srv.URL, "application/json", body)
	if out.Response == nil {
		t.Fatalf("no response: %s", raw)
	}
	return out.Response
}

// What an elided object leaves out is unknowable, never a guess: a switch that refers to a value
// the watch did not keep is armed as far as the guard can tell, an annotation an env reads is
// kept, and a --kubeconfig flag is still seen. An ordinary object is kept whole.
func TestWhatTheWatchLeavesOutIsUnknowable(t *testing.T) {
	big := strings.Repeat("y", 100<<10)
	s := sts(compliant()...)
	c := &s.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "BIG", Value: big}, corev1.EnvVar{Name: "REFERS", Value: "$(BIG)"},
		corev1.EnvVar{Name: "NOTE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['read']"}}})
	c.Args = []string{"--kubeconfig=/etc/kube/config", big}
	s.Spec.Template.Annotations = map[string]string{"read": "kept", "unread": "dropped"}

	small := sts(compliant()...)
	small.Spec.Template.Annotations = map[string]string{"unread": "kept"}
	cachedSmall, _ := webhook.StripForReaders(small.DeepCopy())
	if !equality.Semantic.DeepEqual(cachedSmall.(*appsv1.StatefulSet).Spec, small.Spec) {
		t.Errorf("an ordinary object's template was not kept whole")
	}

	cached, _ := webhook.StripForReaders(s.DeepCopy())
	w, err := webhook.WorkloadOf(cached.(*appsv1.StatefulSet), ns)
	if err != nil {
		t.Fatal(err)
	}
	kept := cached.(*appsv1.StatefulSet).Spec.Template
	env := webhook.ResolveEnv(&kept.Spec.Containers[0], &w.Pod, func(string) (webhook.ConfigMapFact, bool) { return webhook.ConfigMapFact{NotFound: true}, true })
	if v, _ := env.Lookup("REFERS"); v.Known() || !strings.Contains(v.Unknown.String(), "does not keep") {
		t.Errorf("a value referring to one left out: known %v (%d bytes), want unknowable, saying why", v.Known(), len(v.Text))
	}
	if v, _ := env.Lookup("NOETL_EHDB_FENCING"); !v.Known() || v.Text != "enforce" {
		t.Errorf("the fencing switch, a short literal: %+v, want enforce", v)
	}
	if v, _ := env.Lookup("NOTE"); !v.Known() || v.Text != "kept" {
		t.Errorf("an annotation an env reads: %+v, want kept", v)
	}
	if _, ok := kept.Annotations["unread"]; ok {
		t.Errorf("an annotation no env reads was kept")
	}
	if a := kept.Spec.Containers[0].Args; a[0] != "--kubeconfig=/etc/kube/config" || len(a[1]) > 1<<10 {
		t.Errorf("arguments kept: %q… (%d bytes)", a[0], len(a[1]))
	}
}
