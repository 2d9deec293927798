package webhook_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The seventeenth red team's A5: the kubelet stops watching an immutable ConfigMap once it has it
// and serves its copy to every container it starts on a node where a Pod still references it.
// Deleting it (and re-creating it with shadow) then turning the reader's election off was admitted
// while the kubelet would have started the reader armed with the election off. Deleting an
// immutable ConfigMap a reader reads a key of that matters is refused; before, every row here was
// admitted.
func TestDeletingAnImmutableConfigMapItsReadersHold(t *testing.T) {
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(immutable bool, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "fence", Namespace: ns},
			Immutable: ptr.To(immutable), Data: data}
	}
	armed := sts(append(compliant(), envVar(cmKey("NOETL_EHDB_FENCING", "fence", "NOETL_EHDB_FENCING", false)))...)
	unrelated := deployment(sts(unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("fence", ""))))
	unrelated.Name = "app"
	fencing := map[string]string{"NOETL_EHDB_FENCING": "enforce"}
	// The eighteenth red team's holder: a Pod that only mounts it keeps the kubelet's copy on its node.
	holder := func(node string) *corev1.Pod {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}, Volumes: []corev1.Volume{{Name: "v",
				VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "fence"}}}}}}}}}}
	}
	for _, tc := range []struct {
		name    string
		readers []any
		old     *corev1.ConfigMap
		allowed bool
	}{
		{"an immutable ConfigMap an armed writer reads", []any{armed}, cm(true, fencing), false},
		{"an immutable ConfigMap a shadow writer reads (its copy may be what runs)", []any{sts(append(compliant(), wt.SetEnv("NOETL_EHDB_FENCING", "$(MODE)"),
			envVar(cmKey("MODE", "fence", "NOETL_EHDB_FENCING", false)))...)}, cm(true, map[string]string{"NOETL_EHDB_FENCING": "shadow"}), false},
		{"a mutable one: the kubelet watches it", []any{armed}, cm(false, fencing), true},
		{"an immutable one an unrelated app reads", []any{unrelated}, cm(true, map[string]string{"LOG_LEVEL": "info"}), true},
		{"an immutable one nobody reads", nil, cm(true, fencing), true},
		{"an immutable one a Pod on a node only mounts", []any{holder("node-1")}, cm(true, fencing), false},
		{"an immutable one a Pod not yet on a node mounts", []any{holder("")}, cm(true, fencing), true},
		{"a mutable one a Pod on a node mounts", []any{holder("node-1")}, cm(false, fencing), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := goodCluster()
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, tc.readers...), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			body := wt.Review(t, admissionv1.Delete, cmKind, nil, tc.old)
			body = []byte(strings.Replace(string(body), `"name":"`+wt.WriterName+`"`, `"name":"fence"`, 1))
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("deleting it: allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, "refusing to delete immutable ConfigMap noetl/fence") {
				t.Errorf("the refusal does not say why: %s", out.Response.Result.Message)
			}
		})
	}
	_ = appsv1.StatefulSet{}
}
