package webhook_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The eleventh red team (issue 17, class 6, disarming): every writer verifies the API server with
// ca.crt of its namespace's kube-root-ca.crt. A garbage ca.crt written into it, made immutable so
// kube-controller-manager's root-ca-cert-publisher could not put the cluster's CA back, was
// admitted, and so was the armed writer Pod the StatefulSet controller then made. Only the
// publisher may write its content; a delete (which the publisher answers with the cluster's CA)
// and metadata edits pass, and so does anything in a namespace where nothing may be armed.
func TestTheClusterCAOfArmedWritersIsTheirPublishersAlone(t *testing.T) {
	const realCA, garbage = "-----BEGIN CERTIFICATE-----\nreal\n-----END CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n"
	rootCA := func(ca string, immutable bool, labels map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: ns, Labels: labels},
			Data: map[string]string{"ca.crt": ca}}
		if immutable {
			cm.Immutable = ptr.To(true)
		}
		return cm
	}
	const publisher, someone = "system:serviceaccount:kube-system:root-ca-cert-publisher", "alice"
	armed := sts(compliant()...)
	unarmed := sts(unsetEnv("NOETL_EHDB_FENCING")) // no fencing variable, no envFrom: nothing may arm it
	cases := []struct {
		name     string
		objects  []any
		op       admissionv1.Operation
		user     string
		obj, old *corev1.ConfigMap
		allowed  bool
		// publishers configures Handler.RootCAPublishers (nil: the default identities).
		publishers []string
	}{
		{"a garbage ca.crt, immutable", []any{armed}, admissionv1.Update, someone, rootCA(garbage, true, nil), rootCA(realCA, false, nil), false, nil},
		{"a garbage ca.crt", []any{armed}, admissionv1.Update, someone, rootCA(garbage, false, nil), rootCA(realCA, false, nil), false, nil},
		{"the real CA made immutable", []any{armed}, admissionv1.Update, someone, rootCA(realCA, true, nil), rootCA(realCA, false, nil), false, nil},
		{"ca.crt removed", []any{armed}, admissionv1.Update, someone, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: ns}}, rootCA(realCA, false, nil), false, nil},
		{"created by someone else after a delete", []any{armed}, admissionv1.Create, someone, rootCA(garbage, true, nil), nil, false, nil},

		// Red team Q of stop 34, impersonating the publisher: a garbage ca.crt made immutable
		// passed as the publisher's own write, and the publisher's every later sync failed on
		// the immutable field. The publisher never sets immutable (it creates the ConfigMap with
		// ca.crt alone and updates a copy of what it read), so nobody may.
		{"the publisher's name making it immutable", []any{armed}, admissionv1.Update, publisher, rootCA(garbage, true, nil), rootCA(realCA, false, nil), false, nil},
		{"the publisher's name creating it immutable", []any{armed}, admissionv1.Create, publisher, rootCA(realCA, true, nil), nil, false, nil},
		{"the publisher rotates the CA", []any{armed}, admissionv1.Update, publisher, rootCA(garbage, false, nil), rootCA(realCA, false, nil), true, nil},
		{"the publisher creates it", []any{armed}, admissionv1.Create, publisher, rootCA(realCA, false, nil), nil, true, nil},
		{"the controller manager without per-controller credentials", []any{armed}, admissionv1.Update, "system:kube-controller-manager", rootCA(garbage, false, nil), rootCA(realCA, false, nil), true, nil},
		{"deleted, for the publisher to write again", []any{armed}, admissionv1.Delete, someone, nil, rootCA(garbage, true, nil), true, nil},
		{"a label added", []any{armed}, admissionv1.Update, someone, rootCA(realCA, false, map[string]string{"team": "storage"}), rootCA(realCA, false, nil), true, nil},
		{"nothing in the namespace may be armed", []any{unarmed}, admissionv1.Update, someone, rootCA(garbage, true, nil), rootCA(realCA, false, nil), true, nil},
		// A controller manager that authenticates as another identity is named by the operator
		// (--root-ca-publishers), and then the defaults are no longer trusted.
		{"a configured publisher rotates the CA", []any{armed}, admissionv1.Update, "system:ca-sync", rootCA(garbage, false, nil), rootCA(realCA, false, nil), true, []string{"system:ca-sync"}},
		{"the default publisher once others are configured", []any{armed}, admissionv1.Update, publisher, rootCA(garbage, false, nil), rootCA(realCA, false, nil), false, []string{"system:ca-sync"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			readers := fakeReaders(t, tc.objects...)
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Readers: readers, Accounts: readers, Clock: clocktesting.NewFakePassiveClock(now), RootCAPublishers: tc.publishers}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			var obj, old runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			var rv admissionv1.AdmissionReview
			if err := json.Unmarshal(wt.Review(t, tc.op, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, obj, old), &rv); err != nil {
				t.Fatal(err)
			}
			rv.Request.Name, rv.Request.UserInfo = "kube-root-ca.crt", authenticationv1.UserInfo{Username: tc.user}
			body, err := json.Marshal(rv)
			if err != nil {
				t.Fatal(err)
			}
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed {
				for _, want := range []string{"root-ca-cert-publisher", "StatefulSet noetl/" + wt.WriterName, "Delete the ConfigMap instead"} {
					if !strings.Contains(out.Response.Result.Message, want) {
						t.Errorf("the refusal does not say %q:\n%s", want, out.Response.Result.Message)
					}
				}
			}
		})
	}
}
