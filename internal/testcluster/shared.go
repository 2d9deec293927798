package testcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// One control plane per test binary: starting one costs seconds, and tests isolate themselves
// by namespace. This is the package's only mutable state; Main stops what ForTest started.
var shared struct {
	sync.Mutex
	cluster *Cluster
	err     error
}

// RequireEnv, when "1", turns a missing control plane into a failure instead of a skip.
// `make test` sets it, so CI can never pass by skipping the integration tests.
const RequireEnv = "EHDB_REQUIRE_CLUSTER"

// ForTest returns the test binary's shared cluster, starting it on first use. Without
// control-plane binaries and without E2E_KUBECONFIG it skips the test, unless EHDB_REQUIRE_CLUSTER=1.
func ForTest(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster == nil && shared.err == nil {
		if os.Getenv("E2E_KUBECONFIG") == "" {
			if _, err := binDir(); err != nil {
				if os.Getenv(RequireEnv) == "1" {
					t.Fatalf("a real API server is required: %v", err)
				}
				t.Skipf("no API server for integration tests: %v", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		shared.cluster, shared.err = Start(ctx, Options{})
		if shared.err == nil {
			t.Logf("control plane up in %s at %s", time.Since(start).Round(time.Millisecond), shared.cluster.Config.Host)
		}
	}
	if shared.err != nil {
		t.Fatalf("starting the test cluster: %v", shared.err)
	}
	return shared.cluster
}

// Main runs the package's tests and then stops the shared cluster, if one was started:
//
//	func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster != nil {
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testcluster: stopping: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.cluster = nil
	}
	return code
}
