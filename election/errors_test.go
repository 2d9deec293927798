package election

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// statusServer answers every request with a metav1.Status of the given code, as the API server does.
func statusServer(t *testing.T, code int, reason metav1.StatusReason) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: "test",
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// kubeGet performs a real client-go Get of the Lease against host and returns its error.
func kubeGet(t *testing.T, host string, timeout time.Duration) error {
	t.Helper()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err = NewKubeStore(client, "ns").Get(ctx, testLease)
	if err == nil {
		t.Fatal("want an error")
	}
	return err
}

func TestErrorReasonsFromRealClientGoErrors(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedHost := "http://" + closed.Addr().String()
	closed.Close()

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)

	for _, tc := range []struct {
		name string
		err  func(t *testing.T) error
		want string
	}{
		{"403 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 403, metav1.StatusReasonForbidden).URL, 5*time.Second)
		}, "forbidden"},
		{"401 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 401, metav1.StatusReasonUnauthorized).URL, 5*time.Second)
		}, "unauthorized"},
		{"500 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 500, metav1.StatusReasonInternalError).URL, 5*time.Second)
		}, "unreachable"},
		{"503 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 503, metav1.StatusReasonServiceUnavailable).URL, 5*time.Second)
		}, "unreachable"},
		{"504 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 504, metav1.StatusReasonTimeout).URL, 5*time.Second)
		}, "unreachable"},
		{"connection refused", func(t *testing.T) error { return kubeGet(t, refusedHost, 5*time.Second) }, "unreachable"},
		{"timeout", func(t *testing.T) error { return kubeGet(t, hang.URL, 50*time.Millisecond) }, "unreachable"},
		{"422 from the server", func(t *testing.T) error {
			return kubeGet(t, statusServer(t, 422, metav1.StatusReasonInvalid).URL, 5*time.Second)
		}, "other"},
		{"apierrors.NewForbidden", func(*testing.T) error {
			return apierrors.NewForbidden(leaseResource, testLease, errors.New("no RBAC"))
		}, "forbidden"},
		{"apierrors.NewUnauthorized", func(*testing.T) error { return apierrors.NewUnauthorized("no token") }, "unauthorized"},
		{"apierrors.NewInternalError", func(*testing.T) error { return apierrors.NewInternalError(errors.New("etcd")) }, "unreachable"},
		{"apierrors.NewServerTimeout", func(*testing.T) error { return apierrors.NewServerTimeout(leaseResource, "get", 1) }, "unreachable"},
		{"wrapped deadline", func(*testing.T) error { return fmt.Errorf("get: %w", context.DeadlineExceeded) }, "unreachable"},
		{"apierrors.NewBadRequest", func(*testing.T) error { return apierrors.NewBadRequest("bad") }, "other"},
		{"a plain error", func(*testing.T) error { return errors.New("something") }, "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if got := classify(err).String(); got != tc.want {
				t.Fatalf("classify(%T %v) = %s, want %s", err, err, got, tc.want)
			}
		})
	}
}

// A store error is logged on its first occurrence and then every 60th, per reason, and counted
// every time; context.Canceled (shutdown) is neither.
func TestErrorLogsAreThrottled(t *testing.T) {
	var buf bytes.Buffer
	e := newElection(fake.NewLeaseStore(), testConfig(lease, renew), Options{Identity: "w#1",
		Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Clock: clocktesting.NewFakeClock(t0)})
	forbidden := apierrors.NewForbidden(leaseResource, testLease, errors.New("no RBAC"))
	for i := 0; i < 121; i++ {
		e.countError("get", forbidden)
	}
	for i := 0; i < 2; i++ {
		e.countError("get", apierrors.NewInternalError(errors.New("etcd")))
	}
	e.countError("get", fmt.Errorf("stopping: %w", context.Canceled))

	var counts []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Reason string `json:"reason"`
			Count  int    `json:"count"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		counts = append(counts, fmt.Sprintf("%s#%d", rec.Reason, rec.Count))
	}
	if got, want := strings.Join(counts, " "), "forbidden#1 forbidden#61 forbidden#121 unreachable#1"; got != want {
		t.Fatalf("logged %q, want %q", got, want)
	}
	if got := errorsByReason(e); got["forbidden"] != 121 || got["unreachable"] != 2 || got["other"] != 0 {
		t.Fatalf("counted %v", got)
	}
}
