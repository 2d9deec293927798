package webhook_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The twelfth red team: a Service named kubernetes-service gives every container of its
// namespace KUBERNETES_SERVICE_PORT=tcp://<ip>:443 (its NAME_PORT link variable), in about three
// starts of four (the kubelet merges the links in map order), and client-go then builds no
// configuration: the armed writer's election declined. Every Service whose link variables can
// land on one the election reads is refused, whatever its type (an ExternalName one has none, but
// may become a ClusterIP one by an update); a Service whose names cannot is admitted.
func TestServicesWhoseLinksSetWhatTheElectionReadsAreRefused(t *testing.T) {
	if got, want := webhook.LinkedServiceNames(), []string{"kubernetes", "kubernetes-service"}; !slices.Equal(got, want) {
		t.Fatalf("LinkedServiceNames() = %q, want %q", got, want)
	}
	h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	svc := func(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
	}
	https := corev1.ServicePort{Name: "https", Port: 443}
	cases := []struct {
		name     string
		op       admissionv1.Operation
		obj, old *corev1.Service
		sets     string // "" when admitted
	}{
		{"kubernetes-service, ClusterIP", admissionv1.Create, svc("kubernetes-service", corev1.ServiceTypeClusterIP, https), nil, "KUBERNETES_SERVICE_PORT"},
		{"kubernetes-service, ExternalName", admissionv1.Create, svc("kubernetes-service", corev1.ServiceTypeExternalName), nil, "KUBERNETES_SERVICE_PORT"},
		{"kubernetes-service, ExternalName made ClusterIP", admissionv1.Update, svc("kubernetes-service", corev1.ServiceTypeClusterIP, https), svc("kubernetes-service", corev1.ServiceTypeExternalName), "KUBERNETES_SERVICE_PORT"},
		{"kubernetes-service, a UDP port", admissionv1.Create, svc("kubernetes-service", corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP}), nil, "KUBERNETES_SERVICE_PORT"},
		{"kubernetes", admissionv1.Create, svc("kubernetes", corev1.ServiceTypeClusterIP, https), nil, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"},

		{"kubernetes-services", admissionv1.Create, svc("kubernetes-services", corev1.ServiceTypeClusterIP, https), nil, ""},
		{"kubernetes-api", admissionv1.Create, svc("kubernetes-api", corev1.ServiceTypeClusterIP, https), nil, ""},
		{"pod (POD_NAMESPACE is not a link)", admissionv1.Create, svc("pod", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "namespace", Port: 80}), nil, ""},
		{"noetl-ehdb-election", admissionv1.Create, svc("noetl-ehdb-election", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "shard", Port: 80}), nil, ""},
		{"writer-metrics", admissionv1.Create, svc("writer-metrics", corev1.ServiceTypeClusterIP, https), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var old runtime.Object
			if tc.old != nil {
				old = tc.old
			}
			var rv admissionv1.AdmissionReview
			if err := json.Unmarshal(wt.Review(t, tc.op, metav1.GroupVersionKind{Version: "v1", Kind: "Service"}, tc.obj, old), &rv); err != nil {
				t.Fatal(err)
			}
			rv.Request.Name = tc.obj.Name
			body, err := json.Marshal(rv)
			if err != nil {
				t.Fatal(err)
			}
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != (tc.sets == "") {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.sets == "", raw)
			}
			if tc.sets != "" && !strings.Contains(out.Response.Result.Message, tc.sets+" among them") {
				t.Errorf("the refusal does not name %s:\n%s", tc.sets, out.Response.Result.Message)
			}
		})
	}
}
