package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// `make e2e-node` must run the same in-cluster suite on the local node that `make e2e-kind` runs on
// kind: the control plane built, the node's packages and binaries set up, then hack/localnode
// building the images and running ./test/e2e in-cluster, with a trap that cleans up whatever happens.
// (The node itself is exercised by running the target: it needs root and takes a minute or two.)
func TestMakeE2ENodeRunsTheInClusterSuiteOnALocalNode(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	cmd := exec.Command("make", "-n", "e2e-node")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n e2e-node: %v\n%s", err, out)
	}
	want := []string{
		"hack/controlplane/build.sh",
		"hack/localnode/setup.sh",
		"trap '",
		"./hack/localnode clean' EXIT",
		"./hack/localnode e2e -image-repo ghcr.io/noetl/ehdb-election -image-tag dev",
	}
	text := string(out)
	pos := 0
	for _, w := range want {
		i := strings.Index(text[pos:], w)
		if i < 0 {
			t.Fatalf("make -n e2e-node: %q missing (or out of order) in:\n%s", w, text)
		}
		pos += i + len(w)
	}
}
