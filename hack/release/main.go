// Command release builds what users install: the webhook and writer images (internal/ociimage:
// FROM scratch, static, non-root, reproducible), the chart package whose default image is the
// release's, pinned by digest, and the status CLI for the platforms operators use. It also checks
// the chart version policy for `make lint`.
//
//	go run ./hack/release images -repo R -tag T -out images.tar   # make images (kind, local node)
//	go run ./hack/release build -repo R -out dist [-cli P,...]     # make release
//	go run ./hack/release push -archive dist/images.tar            # images to their registry
//	go run ./hack/release check-chart | lock-chart                 # make lint | make chart-lock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/noetl/ehdb-election/internal/ociimage"
	"github.com/noetl/ehdb-election/internal/repo"
)

const defaultRepo = "ghcr.io/noetl/ehdb-election"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release images|build|push|check-chart|lock-chart [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	chartDir := filepath.Join(root, "charts", "ehdb-election")
	sumPath := filepath.Join(root, "charts", "ehdb-election.sum")
	fs := flag.NewFlagSet("release "+cmd, flag.ContinueOnError)
	imgRepo := fs.String("repo", defaultRepo, "image repository prefix: <repo>-webhook, <repo>-writer")
	tag := fs.String("tag", "", "image tag (default: the chart's appVersion)")
	out := fs.String("out", "", "output: a tar file (images) or a folder (build)")
	archive := fs.String("archive", "", "push: the OCI-layout archive `build` or `images` wrote")
	cli := fs.String("cli", defaultCLIPlatforms, "build: the platforms (GOOS/GOARCH, comma-separated; \"\" for none) to build the status CLI for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// A flag the command does not read is an error, never ignored: `push -repo <mirror>` must not
	// push to the repository the archive was built for while the user believes otherwise.
	uses := map[string][]string{"images": {"repo", "tag", "out"}, "build": {"repo", "out", "cli"}, "push": {"archive"}}
	var unused []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(uses[cmd], f.Name) {
			unused = append(unused, "-"+f.Name)
		}
	})
	if len(unused) > 0 {
		hint := ""
		if cmd == "push" {
			hint = " (push sends the archive to the repository it was built for: to push to a mirror, build with -repo <mirror>/noetl/ehdb-election, i.e. make release IMAGE_REPO=...)"
		}
		return fmt.Errorf("release %s does not take %s%s", cmd, strings.Join(unused, ", "), hint)
	}
	switch cmd {
	case "images":
		return cmdImages(ctx, root, chartDir, *imgRepo, *tag, *out)
	case "build":
		platforms, err := parsePlatforms(*cli)
		if err != nil {
			return err
		}
		return cmdBuild(ctx, root, chartDir, *imgRepo, *out, platforms)
	case "push":
		return cmdPush(ctx, *archive)
	case "check-chart", "lock-chart":
		cur, err := readChart(chartDir)
		if err != nil {
			return err
		}
		sums, err := readSums(sumPath)
		if err != nil {
			return err
		}
		changelog, err := os.ReadFile(filepath.Join(chartDir, "CHANGELOG.md"))
		if err != nil {
			return fmt.Errorf("the chart needs a CHANGELOG.md: %w", err)
		}
		if cmd == "check-chart" {
			if err := checkChart(cur, sums, changelog); err != nil {
				return err
			}
			fmt.Printf("chart %s: contents match the recorded version\n", cur.Version)
			return nil
		}
		locked, err := lockChart(cur, sums, changelog)
		if err != nil {
			return err
		}
		if err := os.WriteFile(sumPath, locked.bytes(), 0o644); err != nil {
			return err
		}
		fmt.Printf("chart %s recorded as %s\n", cur.Version, cur.Sum)
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// appVersion is the chart's appVersion: the images' tag in a release.
func appVersion(chartDir string) (chartVersion, app string, err error) {
	c, err := loader.LoadDir(chartDir)
	if err != nil {
		return "", "", err
	}
	if c.Metadata.AppVersion == "" {
		return "", "", errors.New("Chart.yaml has no appVersion")
	}
	return c.Metadata.Version, c.Metadata.AppVersion, nil
}

func cmdImages(ctx context.Context, root, chartDir, imgRepo, tag, out string) error {
	if out == "" {
		return errors.New("images: -out FILE.tar is required")
	}
	if tag == "" {
		var err error
		if _, tag, err = appVersion(chartDir); err != nil {
			return err
		}
	}
	imgs, err := buildImages(ctx, root, filepath.Join(filepath.Dir(out), "bin"), imgRepo, tag)
	if err != nil {
		return err
	}
	if err := ociimage.WriteArchive(out, imgs); err != nil {
		return err
	}
	return report(os.Stdout, imgs, out)
}

// cmdBuild is `make release`: <out>/images.tar, <out>/<chart>-<version>.tgz pinned to the images
// by digest, the status CLI for each platform in <out>/cli, and <out>/release.txt listing them.
func cmdBuild(ctx context.Context, root, chartDir, imgRepo, out string, cliPlatforms []string) error {
	if out == "" {
		return errors.New("build: -out DIR is required")
	}
	chartVersion, tag, err := appVersion(chartDir)
	if err != nil {
		return err
	}
	imgs, err := buildImages(ctx, root, filepath.Join(out, "bin"), imgRepo, tag)
	if err != nil {
		return err
	}
	archive := filepath.Join(out, "images.tar")
	if err := ociimage.WriteArchive(archive, imgs); err != nil {
		return err
	}
	var webhook webhookImage
	for _, n := range imgs {
		if strings.HasSuffix(n.Ref, "-webhook:"+tag) {
			d, err := n.Image.Digest()
			if err != nil {
				return err
			}
			webhook = webhookImage{Repository: imgRepo + "-webhook", Tag: tag, Digest: d.String()}
		}
	}
	tgz, err := packageChart(chartDir, out, webhook)
	if err != nil {
		return err
	}
	cliSums, err := buildCLI(ctx, root, out, tag, cliPlatforms)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, "release.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "chart %s %s (webhook.image pinned to %s@%s)\n", chartVersion, filepath.Base(tgz), webhook.Repository, webhook.Digest)
	if err := report(f, imgs, archive); err != nil {
		return err
	}
	for _, l := range cliSums {
		fmt.Fprintf(f, "cli %s\n", l)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	os.Stdout.Write(data)
	return nil
}

func report(w *os.File, imgs []ociimage.Named, archive string) error {
	for _, n := range imgs {
		f, err := factsOf(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "image %s %s compressed=%dB unpacked=%dB\n", f.Ref, f.Digest, f.Compressed, f.Unpacked)
	}
	fmt.Fprintf(w, "archive %s (OCI layout: ctr images import, kind load image-archive)\n", archive)
	return nil
}

// cmdPush pushes every image of an archive to the reference it is named by.
func cmdPush(ctx context.Context, archive string) error {
	if archive == "" {
		return errors.New("push: -archive FILE.tar is required")
	}
	imgs, closeArchive, err := ociimage.ReadArchive(archive)
	if err != nil {
		return err
	}
	defer closeArchive()
	for _, n := range imgs {
		ref, err := ociimage.Push(ctx, n)
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s as %s\n", n.Ref, ref)
	}
	return nil
}
