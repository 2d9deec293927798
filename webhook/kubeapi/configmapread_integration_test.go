package kubeapi_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/testcluster"
	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestConfigMapReadsAgainstTheAPIServer: the streamed, filtered read and the metadata check work
// against the real API server, a change is seen by the next review, and a missing ConfigMap is
// missing.
func TestConfigMapReadsAgainstTheAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ctx := context.Background()
	ns := c.NewNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
		Data: map[string]string{"blob": strings.Repeat("x", 512<<10), webhook.EnvFencing: "shadow"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := wt.ReferenceWriter(ns)
	ctr := &s.Spec.Template.Spec.Containers[0]
	ctr.Env = nil
	ctr.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "flags"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptrTrue()}}}
	w, err := webhook.DecodeWorkload(gvkSTS, ns, mustJSON(t, s))
	if err != nil {
		t.Fatal(err)
	}
	h := &webhook.Handler{Resolver: webhook.NewAPIResolver(kubeapi.New(cs), 0), Policy: webhook.Policy{RequireLiveLease: true}}
	judge := func() webhook.Decision {
		t.Helper()
		return h.Judge(ctx, webhook.Input{Operation: "CREATE", Object: w})
	}
	if d := judge(); !d.Allowed || d.Reason != webhook.ReasonUnarmed {
		t.Fatalf("fencing shadow in a ConfigMap of 512 KiB: %v %s %s", d.Allowed, d.Reason, d.Message())
	}
	cm.Data[webhook.EnvFencing] = "enforce"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := judge(); d.Allowed {
		t.Fatalf("fencing enforce (just updated) in the ConfigMap, nothing else in order: admitted")
	}
}

func ptrTrue() *bool { b := true; return &b }
