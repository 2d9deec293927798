package chartinstall

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CLI runs the real helm binary (hack/helm/build.sh builds it) with its configuration, cache,
// data and registry credentials under Home, so a test neither reads nor writes the user's: what
// an operator's `helm install oci://...`, `helm upgrade --force`, `helm rollback` do, flags and all.
type CLI struct {
	Bin  string // the helm binary
	Home string // a folder of the caller's (a test's temporary folder)
}

// Run runs helm with args and returns its combined output; a failure carries the output.
func (c CLI) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(c.Home, "config"), "HELM_CACHE_HOME="+filepath.Join(c.Home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(c.Home, "data"), "HELM_REGISTRY_CONFIG="+filepath.Join(c.Home, "registry.json"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
