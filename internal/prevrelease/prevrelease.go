// Package prevrelease names the chart's previous release and rebuilds it from git history: the
// repository has no release tags or packages of it, so the commit is pinned here, once, for every
// test that upgrades from it (the chart tests and the local node's upgrade under load).
package prevrelease

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Commit is the commit whose tree is the previous release, chart 0.1.0 as main had it before
// 0.2.0's changes (the chart version stayed 0.1.0 through many commits). Move it with each release.
const Commit = "50033a0ebe6f06f1a44dcee0e8eef189cfff2702"

// Version is the chart version (and appVersion) at Commit.
const Version = "0.1.0"

// Extract writes the tree of Commit (its paths, or all of it) from the repository at root into
// dst. It fails when the history is not there (a shallow clone): callers decide to skip.
func Extract(ctx context.Context, root, dst string, paths ...string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	archive := filepath.Join(dst, ".prev.tar")
	defer os.Remove(archive)
	args := append([]string{"-C", root, "archive", "-o", archive, Commit}, paths...)
	if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s (the previous release, %s): %v: %s", Commit[:12], Version, err, out)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", archive, "-C", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking the previous release: %v: %s", err, out)
	}
	return nil
}
