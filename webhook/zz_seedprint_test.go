package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func TestZZSeedPrint(t *testing.T) {
	h, bound := fuzzHandler(t), fuzzBoundHandler(t)
	ans := func(hh http.Handler, body []byte) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/validate?timeout=100ms", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		hh.ServeHTTP(rec, req)
		var out admissionv1.AdmissionReview
		if json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Response == nil {
			return rec.Body.String()
		}
		msg := ""
		if out.Response.Result != nil {
			msg = out.Response.Result.Message
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return map[bool]string{true: "ALLOW", false: "DENY"}[out.Response.Allowed] + " " + msg
	}
	for _, s := range fuzzReviewSeeds {
		body := fuzzBody(s.program)
		t.Logf("== %s (%d bytes)\n%.600s\n empty: %s\n bound: %s\n oracles: armed=%v cmArms=%v disarm=%v cmDisarm=%v", s.name, len(body), body, ans(h, body), ans(bound, body),
			literallyArmed(body), configMapArmsReader(body), disarmsTheBoundWriter(body), configMapDisarmsBoundWriter(body))
	}
}
