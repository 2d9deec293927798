package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// defaultCLIPlatforms are where operators run the status CLI: the machines they run kubectl on.
const defaultCLIPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64"

// hostPlatform is the platform this build runs on, in GOOS/GOARCH form.
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// parsePlatforms reads a -cli list: comma-separated GOOS/GOARCH pairs, empty for none.
func parsePlatforms(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, fmt.Errorf("-cli %q: want GOOS/GOARCH pairs separated by commas, e.g. %s", s, defaultCLIPlatforms)
		}
		out = append(out, p)
	}
	return out, nil
}

// buildCLI compiles the status CLI (cmd/ehdb-election) for each platform into <out>/cli as
// ehdb-election-<version>-<os>-<arch>, static and -trimpath, stamped with the version and commit
// as `make build` stamps it (so `ehdb-election version` names the release), and writes
// <out>/cli/SHA256SUMS in sha256sum's format. It returns the SHA256SUMS lines for release.txt.
func buildCLI(ctx context.Context, root, out, version string, platforms []string) ([]string, error) {
	if len(platforms) == 0 {
		return nil, nil
	}
	dir := filepath.Join(out, "cli")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	commit := ""
	if b, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(b))
	}
	var sums []string
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		name := fmt.Sprintf("ehdb-election-%s-%s-%s", version, goos, goarch)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
			"-ldflags", fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", version, commit),
			"-o", filepath.Join(dir, name), "./cmd/ehdb-election")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the status CLI for %s: %v\n%s", p, err, b)
		}
		sum, err := sha256File(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		sums = append(sums, sum+"  "+name)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	return sums, nil
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
