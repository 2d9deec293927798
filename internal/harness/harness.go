// Package harness runs the project's real binaries as host processes against an API server: the
// writer (cmd/ehdb-writer) as a ServiceAccount, the webhook (cmd/webhook) with the chart's own
// webhook ServiceAccount and the chart's webhook configuration pointed at it. The system suite,
// the demo and the benchmarks share it, so all three exercise the same RBAC, admission and
// election paths a cluster would, minus the kubelet.
package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/noetl/ehdb-election/internal/childproc"
	"github.com/noetl/ehdb-election/internal/repo"
)

// Build compiles the named commands (./cmd/<name>; none means ehdb-writer, webhook and the
// ehdb-election CLI) into .cache/bin, incrementally (seconds when nothing changed), and returns
// that folder.
func Build(commands ...string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	if len(commands) == 0 {
		commands = []string{"ehdb-writer", "webhook", "ehdb-election"}
	}
	dir := filepath.Join(root, ".cache", "bin")
	args := []string{"build", "-o", dir + "/"}
	for _, c := range commands {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %v: %v\n%s", commands, err, out)
	}
	return dir, nil
}

// FreePort asks the kernel for a free loopback port.
func FreePort() (int, error) {
	ports, err := childproc.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
