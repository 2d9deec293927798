package webhooktest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"runtime/metrics"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Review is an admission.k8s.io/v1 AdmissionReview of obj (and old, for an UPDATE or DELETE) in
// Namespace, as the API server sends it: a request UID, the writer's name, dryRun false.
func Review(t testing.TB, op admissionv1.Operation, kind metav1.GroupVersionKind, obj, old runtime.Object) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID: "8f8a0c4c-0000-4000-8000-000000000001", Kind: kind, Operation: op, Namespace: Namespace, Name: WriterName,
		DryRun: ptr.To(false),
	}
	if obj != nil {
		req.Object = runtime.RawExtension{Object: obj}
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Object: old}
	}
	raw, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Decide sends a review as the API server does (its ?timeout= in the URL) and says what it got.
func Decide(client *http.Client, url string, body []byte) (code int, allowed bool, raw string) {
	resp, err := client.Post(url+"?timeout=5s", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if json.Unmarshal(b, &out) != nil || out.Response == nil {
		return resp.StatusCode, false, string(b)
	}
	return resp.StatusCode, out.Response.Allowed, string(b)
}

// HeapObjects is the bytes of live and not yet swept heap objects, as the runtime counts them.
func HeapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
