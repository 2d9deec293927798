package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// kind cannot run on the machines this project is developed on (no Docker engine, no registry),
// so what can be checked statically is checked here: the config parses strictly with kind's own
// types, and `make e2e-kind` runs the commands a user with Docker needs, in the right order.

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestKindConfigParsesStrictlyWithKindsOwnTypes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "kind-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("kind-config.yaml does not parse strictly as kind v1alpha4: %v", err)
	}
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Fatalf("kind/apiVersion = %q/%q", cfg.Kind, cfg.APIVersion)
	}
	kindv1alpha4.SetDefaultsCluster(&cfg)
	var controlPlanes, workers int
	for _, n := range cfg.Nodes {
		switch n.Role {
		case kindv1alpha4.ControlPlaneRole:
			controlPlanes++
		case kindv1alpha4.WorkerRole:
			workers++
		default:
			t.Errorf("unknown node role %q", n.Role)
		}
		// The pinned kind release's own node image, by digest: the v1.37 control plane the
		// libraries are pinned to, and an image that is known to exist for that kind release.
		if n.Image != defaults.Image {
			t.Errorf("node image %q, want kind %s's %q", n.Image, "v0.33.0", defaults.Image)
		}
		if !strings.Contains(n.Image, ":v1.37.") {
			t.Errorf("node image %q is not Kubernetes v1.37", n.Image)
		}
	}
	if controlPlanes != 1 || workers < 2 {
		t.Errorf("want 1 control plane and ≥2 workers (webhook replicas on separate nodes), got %d and %d", controlPlanes, workers)
	}
	if cfg.Networking.APIServerAddress != "127.0.0.1" {
		t.Errorf("apiServerAddress %q: the API server must listen on loopback only", cfg.Networking.APIServerAddress)
	}
}

func TestMakeE2EKindRunsTheSuiteAgainstKind(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	cmd := exec.Command("make", "-n", "e2e-kind")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n e2e-kind: %v\n%s", err, out)
	}
	// In this order: images built (one OCI archive, by the release's builder), cluster created from kind-config.yaml, images loaded, the
	// same e2e suite run in-cluster (E2E_IN_CLUSTER=1) with E2E_KUBECONFIG pointing at the kind cluster.
	want := []string{
		"hack/release images -repo ghcr.io/noetl/ehdb-election -tag dev -out ",
		"create cluster --name ehdb-election --config kind-config.yaml",
		"load image-archive --name ehdb-election",
		".cache/images/images.tar",
		"E2E_IN_CLUSTER=1",
		"E2E_KUBECONFIG=",
		"test -count=1",
		"./test/e2e/...",
	}
	text := string(out)
	pos := 0
	for _, w := range want {
		i := strings.Index(text[pos:], w)
		if i < 0 {
			t.Fatalf("make -n e2e-kind: %q missing (or out of order) in:\n%s", w, text)
		}
		pos += i + len(w)
	}
}
