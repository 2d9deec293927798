package charttest

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// git runs git in dir (the chart tests read earlier releases of the chart from the history). The
// chart's version policy itself is `make lint`'s (hack/release check-chart).
func git(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}
