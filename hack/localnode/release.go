package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/noetl/ehdb-election/internal/ociimage"
	"github.com/noetl/ehdb-election/internal/prevrelease"
)

// registryAddr is where the suite's OCI registry listens: the loopback of the node's own network
// namespace (fresh for each run, so the port is always free), which containerd — in the same
// namespace — pulls from over plain HTTP as its hosts.toml says. Nothing outside the namespace
// can reach it, and it reaches nothing.
const registryAddr = "127.0.0.1:5000"

// releaseImageRepo is the release's image prefix for that registry: <repo>-webhook, <repo>-writer.
const releaseImageRepo = registryAddr + "/noetl/ehdb-election"

// releaseArtifacts are what the suite installs from the registry: the current release as
// `make release` builds it, the previous release rebuilt from git history, and the helm CLI.
type releaseArtifacts struct {
	current  string // `hack/release build` output: images.tar, ehdb-election-<version>.tgz, release.txt
	previous string // chart/ (the chart at prevrelease.Commit) and images.tar (its webhook image)
	helm     string // the real helm CLI (hack/helm/build.sh)
}

func (r releaseArtifacts) env() []string {
	return []string{"E2E_REGISTRY=" + registryAddr, "E2E_RELEASE_DIR=" + r.current, "E2E_PREVIOUS_DIR=" + r.previous, "E2E_HELM=" + r.helm}
}

// buildReleases builds the release the suite pushes to the node's registry: `make release`'s own
// command for this registry (the chart pinned to its webhook image by digest), and the previous
// release from its commit — its chart as it was and its webhook binary compiled from that tree,
// packed by today's image builder (the previous release had none). The previous one is kept
// between runs (its commit does not change); the current one is rebuilt (the build cache makes
// that cheap).
func buildReleases(ctx context.Context, l layout) (releaseArtifacts, error) {
	cache := filepath.Dir(l.bin)
	r := releaseArtifacts{current: filepath.Join(cache, "release"), previous: filepath.Join(cache, "previous", prevrelease.Commit[:12])}
	rel := exec.CommandContext(ctx, "go", "run", "./hack/release", "build", "-repo", releaseImageRepo, "-out", r.current, "-cli", "")
	rel.Dir = l.root
	if out, err := rel.CombinedOutput(); err != nil {
		return r, fmt.Errorf("make release for the node's registry: %v\n%s", err, out)
	}
	if err := buildPrevious(ctx, l, r.previous); err != nil {
		return r, err
	}
	helm := exec.CommandContext(ctx, filepath.Join(l.root, "hack", "helm", "build.sh"))
	helm.Stderr = os.Stderr
	out, err := helm.Output()
	if err != nil {
		return r, fmt.Errorf("building the helm CLI: %v", err)
	}
	r.helm = strings.TrimSpace(string(out))
	return r, nil
}

func buildPrevious(ctx context.Context, l layout, dir string) error {
	archive := filepath.Join(dir, "images.tar")
	if _, err := os.Stat(archive); err == nil {
		return nil
	}
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := prevrelease.Extract(ctx, l.root, src); err != nil {
		return err
	}
	if err := ociimage.GoBuild(ctx, src, filepath.Join(dir, "bin"), "./cmd/webhook"); err != nil {
		return fmt.Errorf("the previous release's webhook: %w", err)
	}
	ref := releaseImageRepo + "-webhook:" + prevrelease.Version
	img, err := ociimage.Build(ociimage.Spec{Ref: ref, Binary: filepath.Join(dir, "bin", "webhook"), Entrypoint: "/ehdb-webhook", User: ociimage.NonRoot,
		Labels: map[string]string{"org.opencontainers.image.version": prevrelease.Version, "org.opencontainers.image.revision": prevrelease.Commit}})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dir, "chart")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(src, "charts", "ehdb-election"), filepath.Join(dir, "chart")); err != nil {
		return err
	}
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	tmp := archive + ".tmp"
	if err := ociimage.WriteArchive(tmp, []ociimage.Named{{Ref: ref, Image: img}}); err != nil {
		return err
	}
	return os.Rename(tmp, archive)
}

// writeRegistryHosts is containerd's registry host configuration (config_path) for the node's
// registry: plain HTTP, pull and resolve only. containerd's own default for a loopback host differs
// by version (1.6: plain HTTP without verification — a run without this file pulled too; 2.x: HTTPS
// first, HTTP as a fallback), so the file states it rather than relying on either.
func writeRegistryHosts(certsDir string) error {
	dir := filepath.Join(certsDir, registryAddr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+registryAddr, "http://"+registryAddr)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}
