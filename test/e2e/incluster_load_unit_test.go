package e2e

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/harness"
)

// The upgrade test's verdicts, on the answers they must tell apart.
func TestUpgradeLoadVerdicts(t *testing.T) {
	held := shardHolding{pod: "w-0", epoch: 4}
	scrape := func(valid, holds, epoch float64) harness.Metrics {
		return harness.Metrics{"ehdb_election_active": 1, "ehdb_election_holds_lease": holds, "ehdb_election_token_valid": valid, "ehdb_election_epoch": epoch}
	}
	for _, tc := range []struct {
		name string
		m    harness.Metrics
		err  error
		bad  bool
	}{
		{"held, valid, same epoch", scrape(1, 1, 4), nil, false},
		{"token dropped", scrape(0, 1, 4), nil, true},
		{"lease lost", scrape(1, 0, 4), nil, true},
		{"re-acquired at a new epoch", scrape(1, 1, 5), nil, true},
		{"scrape failed", nil, errors.New("proxy: 503"), true},
		{"a series missing", harness.Metrics{"ehdb_election_active": 1}, nil, true},
	} {
		if got := holdingVerdict(tc.m, tc.err, held); (got != "") != tc.bad {
			t.Errorf("holding %s: verdict %q, want bad=%v", tc.name, got, tc.bad)
		}
	}

	denied := errors.New(`admission webhook "workloads.ehdb-election.noetl.io" denied the request: NOETL_EHDB_ELECTION is off`)
	failed := errors.New(`Internal error occurred: failed calling webhook "workloads.ehdb-election.noetl.io": x509: certificate signed by unknown authority`)
	for _, tc := range []struct {
		name  string
		err   error
		wrong bool
		bad   bool
	}{
		{"correct, admitted", nil, false, false},
		{"correct, refused", denied, false, true},
		{"correct, call failed", failed, false, true},
		{"wrong, denied naming why", denied, true, false},
		{"wrong, admitted (fail open)", nil, true, true},
		{"wrong, call failed", failed, true, true},
		{"wrong, denied for another reason", errors.New(`admission webhook "x" denied the request: too_complex`), true, true},
	} {
		if got := reviewVerdict(tc.err, tc.wrong, "NOETL_EHDB_ELECTION"); (got != "") != tc.bad {
			t.Errorf("review %s: verdict %q, want bad=%v", tc.name, got, tc.bad)
		}
	}

	before := admissionMetrics{
		`apiserver_admission_webhook_request_total{code="200",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejected="false",type="validating"}`: 10,
	}
	after := admissionMetrics{
		`apiserver_admission_webhook_request_total{code="200",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejected="false",type="validating"}`:                  20,
		`apiserver_admission_webhook_request_total{code="403",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejected="true",type="validating"}`:                   5,
		`apiserver_admission_webhook_rejection_count{error_type="no_error",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejection_code="403",type="validating"}`: 5,
	}
	if f := after.failedSince(before); len(f) != 0 {
		t.Errorf("decisions counted as failures: %v", f)
	}
	after[`apiserver_admission_webhook_request_total{code="503",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejected="true",type="validating"}`] = 1
	after[`apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="workloads.ehdb-election.noetl.io",operation="UPDATE",rejection_code="500",type="validating"}`] = 1
	after[`apiserver_admission_webhook_fail_open_count{name="pods.ehdb-election.noetl.io",operation="CREATE",type="validating"}`] = 2
	if f := after.failedSince(before); len(f) != 3 {
		t.Errorf("failed calls: %v, want the 503, the calling error and the fail-open", f)
	}
	if got := after.callsSince(before)["workloads.ehdb-election.noetl.io"]; got != 16 {
		t.Errorf("calls since: %v, want 16", got)
	}
}

// pulledByDigest accepts only the pushed repo digest as a container's imageID: an image imported
// by hand reports its config ID, another digest is another image.
func TestPulledByDigest(t *testing.T) {
	want, err := name.NewDigest("127.0.0.1:5000/noetl/ehdb-election-writer@sha256:" + strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	pod := func(imageID string, running bool) corev1.Pod {
		cs := corev1.ContainerStatus{Name: "c", ImageID: imageID}
		if running {
			cs.State.Running = &corev1.ContainerStateRunning{}
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}
	}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		ok   bool
	}{
		{"pulled by that digest", []corev1.Pod{pod(want.String(), true)}, true},
		{"imported (config ID)", []corev1.Pod{pod("sha256:"+strings.Repeat("b", 64), true)}, false},
		{"another digest", []corev1.Pod{pod("127.0.0.1:5000/noetl/ehdb-election-writer@sha256:"+strings.Repeat("c", 64), true)}, false},
		{"not running", []corev1.Pod{pod(want.String(), false)}, false},
		{"no Pods", nil, false},
	} {
		if err := pulledByDigest(tc.pods, "c", want); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
