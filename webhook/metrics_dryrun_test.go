package webhook_test

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestDecisionsAreLabelledDryRun (issue 18): a server-side dry run (kubectl diff, Argo CD's diff) is
// judged like the real request, but counted under dry_run="true", so the denials alert can leave
// it out. Each path a review can take records the label: a judged workload, a kind the guard does
// not judge, a malformed review.
func TestDecisionsAreLabelledDryRun(t *testing.T) {
	other := metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Secret"}
	for _, tc := range []struct {
		name   string
		review func(dry bool) []byte
		labels map[string]string
	}{
		{"an armed writer refused", func(dry bool) []byte {
			return withDryRun(t, wt.Review(t, admissionv1.Create, stsKind, sts(wt.Armed()), nil), dry)
		}, map[string]string{"kind": "StatefulSet", "result": "denied", "reason": "election_disabled"}},
		{"a kind the guard does not judge", func(dry bool) []byte {
			return withDryRun(t, wt.Review(t, admissionv1.Create, other, sts(), nil), dry)
		}, map[string]string{"kind": "other", "result": "allowed", "reason": "no_opinion"}},
		{"a malformed StatefulSet", func(dry bool) []byte {
			raw := withDryRun(t, wt.Review(t, admissionv1.Create, stsKind, nil, nil), dry)
			var ar map[string]any
			_ = json.Unmarshal(raw, &ar)
			ar["request"].(map[string]any)["object"] = map[string]any{"spec": "not an object"}
			raw, _ = json.Marshal(ar)
			return raw
		}, map[string]string{"kind": "StatefulSet", "result": "denied", "reason": "malformed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, reg := newServer(t, goodCluster())
			post(t, srv.URL, "application/json", tc.review(true))
			post(t, srv.URL, "application/json", tc.review(true))
			post(t, srv.URL, "application/json", tc.review(false))
			if got := reg.Count(merge(tc.labels, "dry_run", "true")); got != 2 {
				t.Errorf("dry_run=true: %v, want 2", got)
			}
			if got := reg.Count(merge(tc.labels, "dry_run", "false")); got != 1 {
				t.Errorf("dry_run=false: %v, want 1", got)
			}
		})
	}
}

func withDryRun(t *testing.T, raw []byte, dry bool) []byte {
	t.Helper()
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &ar); err != nil {
		t.Fatal(err)
	}
	ar.Request.DryRun = ptr.To(dry)
	out, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func merge(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}
