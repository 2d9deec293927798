package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/noetl/ehdb-election/internal/repo"
)

func TestReadBuildInfo(t *testing.T) {
	info := func(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/noetl/ehdb-election", Version: mainVersion}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	for _, tc := range []struct {
		name            string
		read            func() (*debug.BuildInfo, bool)
		stamped, commit string
		want            []string
	}{
		{"make build: stamped version and commit", info("(devel)"), "0.2.0", "abc123", []string{"ehdb-election 0.2.0\n", "commit    abc123\n", "go        go1.26.8 "}},
		{"go install @version", info("v0.2.0"), "", "", []string{"ehdb-election v0.2.0\n"}},
		{"a checkout with changes", info("(devel)", "vcs.revision", "def456", "vcs.time", "2026-12-01T12:00:00Z", "vcs.modified", "true"), "", "",
			[]string{"ehdb-election dev\n", "commit    def456 (modified)\n", "committed 2026-12-01T12:00:00Z\n"}},
		{"no build information", func() (*debug.BuildInfo, bool) { return nil, false }, "", "", []string{"ehdb-election dev\n", "  go        go"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			readBuildInfo(tc.read, tc.stamped, tc.commit).write(&b, "ehdb-election")
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("version output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestVersionOfABuiltBinary builds the CLI as `make build` does (the version and commit stamped
// by -ldflags -X) and runs `version`: the stamp reaches the output.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ehdb-election")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=9.8.7 -X main.commit=0123abcd", "-o", bin, "./cmd/ehdb-election")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	for _, want := range []string{"ehdb-election 9.8.7\n", "module    github.com/noetl/ehdb-election\n", "commit    "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := runCLI(t, "ehdb-election", "version", "extra"); code != 2 || !strings.Contains(errOut, "no arguments") {
		t.Errorf("version extra: exit %d, %s", code, errOut)
	}
}
