package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/noetl/ehdb-election/cmd/ehdb-election/internal/status"
)

// TestRequestTimeoutPrintsNoCancelWarning (issue 18): when --request-timeout expires, net/http
// cancels the request through the transport's CancelRequest, and client-go's wrappers pass that down
// (transport.tryCancelRequest); a round tripper of ours in the chain that neither cancels nor says
// what it wraps made client-go log "Warning: unable to cancel request". The CLI must time out with
// its own error, naming --request-timeout, and no such line.
func TestRequestTimeoutPrintsNoCancelWarning(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // an API server that never answers in time
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })

	var mu sync.Mutex
	var logged []string
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, prefix+" "+args)
	}, funcr.Options{Verbosity: 10}))
	t.Cleanup(klog.ClearLogger)

	code, out, errOut := runCLI(t, "ehdb-election", "status", "-n", "noetl", "--server", srv.URL, "--kubeconfig", "/dev/null", "--request-timeout", "300ms")
	if code != status.ExitError {
		t.Errorf("exit %d, want %d (the list timed out)\nstdout:\n%s\nstderr:\n%s", code, status.ExitError, out, errOut)
	}
	// The message names the flag that bounds the wait (it said "cannot reach the API server …:
	// context deadline exceeded", as if the server were down).
	if want := "did not answer within 300ms (--request-timeout)"; !strings.Contains(errOut, want) {
		t.Errorf("stderr does not say %q:\n%s", want, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range append(logged, strings.Split(errOut, "\n")...) {
		if strings.Contains(l, "unable to cancel request") {
			t.Errorf("client-go warned: %s", l)
		}
	}
}
