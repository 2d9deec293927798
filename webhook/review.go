package webhook

import (
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Request is one admission request, as the transport decoded it from an AdmissionReview.
type Request struct{ admissionv1.AdmissionRequest }

// Response is the guard's answer to one Request. The transport sets its UID.
type Response struct{ admissionv1.AdmissionResponse }

// The three answers, with the status codes the API server shows: 200 allowed, 403 refused, and
// an error (400 malformed, 500 internal), which the API server treats as a failed webhook call.
func allowed() Response {
	return Response{admissionv1.AdmissionResponse{Allowed: true, Result: &metav1.Status{Code: http.StatusOK}}}
}

func denied(msg string) Response {
	return Response{admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg}}}
}

func errored(code int32, err error) Response {
	return Response{admissionv1.AdmissionResponse{Result: &metav1.Status{Code: code, Message: err.Error()}}}
}

// WithWarnings adds warnings, which kubectl and the API server's audit show beside the answer.
func (r Response) WithWarnings(warnings ...string) Response {
	r.Warnings = append(r.Warnings, warnings...)
	return r
}
