package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noetl/ehdb-election/internal/repo"
)

// checkReleasedCLI checks the status CLI a release build wrote into dist: SHA256SUMS matches every
// binary it lists, release.txt lists the same, and the host's binary says the release's version.
func checkReleasedCLI(t *testing.T, dist string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dist, "cli", "SHA256SUMS"))
	if err != nil {
		t.Fatalf("the release has no CLI checksums: %v", err)
	}
	chartDir, _ := repo.Path("charts", "ehdb-election")
	_, version, err := appVersion(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	host := "ehdb-election-" + version + "-" + strings.ReplaceAll(hostPlatform(), "/", "-")
	listed := false
	for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not in sha256sum's format", l)
		}
		got, err := sha256File(filepath.Join(dist, "cli", name))
		if err != nil || got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s (err %v)", name, got, sum, err)
		}
		listed = listed || name == host
	}
	if !listed {
		t.Fatalf("SHA256SUMS lists no %s:\n%s", host, sums)
	}
	if rel, err := os.ReadFile(filepath.Join(dist, "release.txt")); err == nil && !strings.Contains(string(rel), "cli ") {
		t.Errorf("release.txt lists no CLI:\n%s", rel)
	}
	out, err := exec.Command(filepath.Join(dist, "cli", host), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("%s version: %q (err %v), want the release's version %s", host, out, err, version)
	}
}

// TestReleaseBuildsTheStatusCLI (issue 18): `make release` ships the status CLI operators run next
// to kubectl, stamped with the release's version, with checksums. Built here for the host only;
// make release builds every platform of defaultCLIPlatforms.
func TestReleaseBuildsTheStatusCLI(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	chartDir, _ := repo.Path("charts", "ehdb-election")
	_, version, err := appVersion(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := buildCLI(context.Background(), root, dist, version, []string{hostPlatform()}); err != nil {
		t.Fatal(err)
	}
	checkReleasedCLI(t, dist)
}

func TestCLIPlatforms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{defaultCLIPlatforms, 4, false}, {"", 0, false}, {"linux/amd64, darwin/arm64", 2, false},
		{"linux", 0, true}, {"linux/amd64/v2", 0, true}, {"/amd64", 0, true},
	} {
		got, err := parsePlatforms(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && len(got) != tc.want) {
			t.Errorf("parsePlatforms(%q) = %v, %v", tc.in, got, err)
		}
	}
}
