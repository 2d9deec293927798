package chartinstall

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/noetl/ehdb-election/internal/repo"
)

// HelmCLI returns the path of the real helm binary: hack/helm/build.sh builds the version its go.mod
// pins into .cache/helm (minutes, once) or reuses that build. Tests that must see what `helm`
// itself prints (`helm template` with its hooks) run it instead of the SDK.
func HelmCLI(ctx context.Context) (string, error) {
	script, err := repo.Path("hack", "helm", "build.sh")
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the helm CLI (%s): %w\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// HelmEnv is the environment for running the helm CLI with its config, cache, data and registry
// credentials in home, so it neither reads nor writes the user's.
func HelmEnv(home string) []string {
	return append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "HELM_REGISTRY_CONFIG="+filepath.Join(home, "registry.json"))
}

// CLI runs the real helm binary (HelmCLI) with its state under Home (HelmEnv): what an operator's
// `helm install oci://...`, `helm upgrade --force`, `helm rollback` do, flags and all.
type CLI struct {
	Bin  string // the helm binary
	Home string // a folder of the caller's (a test's temporary folder)
}

// Run runs helm with args and returns its combined output; a failure carries the output.
func (c CLI) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Bin, args...)
	cmd.Env = HelmEnv(c.Home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
