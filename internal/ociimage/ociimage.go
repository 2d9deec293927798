// Package ociimage is the project's one image builder: it packs a static Go binary into an OCI
// image FROM scratch with go-containerregistry, writes OCI-layout archives that containerd
// (`ctr images import`, `kind load image-archive`) reads, and pushes to registries. `make release`,
// `make images`, kind and the local node all go through it, so they run the same bytes and digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch fixes every timestamp in an image (layer entries, config, history), so the same binary
// always gives the same digest.
var Epoch = time.Unix(0, 0).UTC()

// NonRoot is the user the project's images run as (distroless's "nonroot").
const NonRoot = "65532:65532"

// Spec is one single-binary image.
type Spec struct {
	Ref        string            // repository:tag the image is known by, e.g. ghcr.io/noetl/ehdb-election-webhook:0.2.0
	Binary     string            // path of the static binary on this machine
	Entrypoint string            // its absolute path inside the image, e.g. /ehdb-webhook
	User       string            // "uid:gid" in the image config; "" runs as root
	Env        []string          // the image's ENV after PATH=/
	Labels     map[string]string // image config labels (org.opencontainers.image.*)
}

// Build makes the image: one layer with the binary (mode 0755), an /etc/passwd and /etc/group
// naming the user, and /tmp; OCI media types; every time at Epoch. No base image is pulled.
func Build(spec Spec) (v1.Image, error) {
	if !path.IsAbs(spec.Entrypoint) || path.Clean(spec.Entrypoint) == "/" {
		return nil, fmt.Errorf("image %s: entrypoint %q must be an absolute file path", spec.Ref, spec.Entrypoint)
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	layerTar, err := rootFS(spec, bin)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	// plainLayer hides the tarball layer's own descriptor (an empty, non-nil annotations map), so
	// the in-memory manifest equals the one pushed and parsed back (validate.Image checks that).
	layer = plainLayer{layer}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: Epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{spec.Entrypoint},
			User:       spec.User,
			Env:        append([]string{"PATH=/"}, spec.Env...),
			WorkingDir: "/",
			Labels:     spec.Labels,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", spec.Ref, err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "ehdb-election ociimage: " + spec.Entrypoint},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return img, nil
}

type plainLayer struct{ v1.Layer }

// rootFS is the image's only layer, entries in a fixed order with fixed times and owners.
func rootFS(spec Spec, bin []byte) ([]byte, error) {
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n"
	group := "root:x:0:\n"
	if uid != "0" {
		passwd += fmt.Sprintf("nonroot:x:%s:%s:nonroot:/tmp:/sbin/nologin\n", uid, gid)
		group += fmt.Sprintf("nonroot:x:%s:\n", gid)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, ModTime: Epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, step := range []func() error{
		func() error { return dir("etc/", 0o755) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("tmp/", 0o1777) },
		func() error { return file(strings.TrimPrefix(path.Clean(spec.Entrypoint), "/"), 0o755, bin) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseUser splits "uid:gid" (numeric, so the kubelet's runAsNonRoot check can read it); "" is root.
func parseUser(user string) (uid, gid string, err error) {
	if user == "" {
		return "0", "0", nil
	}
	uid, gid, ok := strings.Cut(user, ":")
	if !ok || uid == "" || gid == "" || strings.Trim(uid+gid, "0123456789") != "" {
		return "", "", fmt.Errorf("user %q must be numeric uid:gid", user)
	}
	return uid, gid, nil
}

// Named is an image with the reference an archive or a registry knows it by.
type Named struct {
	Ref   string
	Image v1.Image
}

// GoBuild builds static (CGO_ENABLED=0) linux binaries of the packages into outDir, the way every
// image of the project is built: -trimpath, stripped, so the same commit gives the same bytes.
func GoBuild(ctx context.Context, moduleDir, outDir string, pkgs ...string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", outDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// sortedRefs keeps archive indexes in a fixed order whatever order callers list images in.
func sortedRefs(imgs []Named) []Named {
	out := append([]Named(nil), imgs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// parseTagged checks that ref names a repository and an explicit tag (no digest): what an archive
// entry is called. A registry may be left out (the local node's short names).
func parseTagged(ref string) (name.Tag, error) {
	t, err := name.NewTag(ref)
	if err != nil || !strings.HasSuffix(ref, ":"+t.TagStr()) {
		return name.Tag{}, fmt.Errorf("image reference %q: want [registry/]repository:tag (%v)", ref, err)
	}
	return t, nil
}
