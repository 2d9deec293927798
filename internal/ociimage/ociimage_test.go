package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/noetl/ehdb-election/internal/ociregistry"
)

func fakeBinary(t *testing.T, payload string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(p, []byte(payload), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustBuild(t *testing.T, s Spec) v1.Image {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("image is not self-consistent: %v", err)
	}
	return img
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// files lists the image's filesystem as the runtime unpacks it.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// The image runs the binary as its entrypoint, as the numeric non-root user (which the kubelet's
// runAsNonRoot check needs), and the same binary gives the same digest however often it is built.
func TestBuildIsScratchNonRootAndReproducible(t *testing.T) {
	bin := fakeBinary(t, "\x7fELF static")
	spec := Spec{Ref: "ghcr.io/noetl/ehdb-election-writer:0.2.0", Binary: bin, Entrypoint: "/ehdb-writer", User: NonRoot,
		Labels: map[string]string{"org.opencontainers.image.version": "0.2.0"}}
	img := mustBuild(t, spec)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/ehdb-writer" ||
		cfg.Config.User != "65532:65532" || cfg.Config.Labels["org.opencontainers.image.version"] != "0.2.0" || !cfg.Created.Time.Equal(Epoch) {
		t.Fatalf("config %+v", cfg)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 (FROM scratch)", len(layers))
	}
	fs := files(t, img)
	if h := fs["ehdb-writer"]; h == nil || h.Mode&0o111 != 0o111 || !h.ModTime.Equal(Epoch) {
		t.Fatalf("entrypoint entry %+v", h)
	}
	if h := fs["tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Fatalf("/tmp entry %+v", h)
	}
	mf, _ := img.Manifest()
	if mf.MediaType != "application/vnd.oci.image.manifest.v1+json" || mf.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Fatalf("media types %s / %s", mf.MediaType, mf.Config.MediaType)
	}

	if again := mustBuild(t, spec); digestOf(t, again) != digestOf(t, img) {
		t.Fatalf("same binary, two digests: %s and %s", digestOf(t, img), digestOf(t, again))
	}
	other := spec
	other.Binary = fakeBinary(t, "\x7fELF static, changed")
	if digestOf(t, mustBuild(t, other)) == digestOf(t, img) {
		t.Fatal("a different binary gave the same digest")
	}
}

func TestBuildRefusesBadSpecs(t *testing.T) {
	bin := fakeBinary(t, "x")
	for name, s := range map[string]Spec{
		"relative entrypoint": {Ref: "r/x:1", Binary: bin, Entrypoint: "x"},
		"root entrypoint":     {Ref: "r/x:1", Binary: bin, Entrypoint: "/"},
		"user by name":        {Ref: "r/x:1", Binary: bin, Entrypoint: "/x", User: "nonroot"},
		"uid only":            {Ref: "r/x:1", Binary: bin, Entrypoint: "/x", User: "65532"},
		"missing binary":      {Ref: "r/x:1", Binary: filepath.Join(t.TempDir(), "absent"), Entrypoint: "/x"},
	} {
		if _, err := Build(s); err == nil {
			t.Errorf("%s: Build accepted %+v", name, s)
		}
	}
}

// The archive is an OCI layout containerd imports (`ctr images import`, `kind load image-archive`):
// each image named by io.containerd.image.name, every blob present and matching its digest, and the
// bytes do not depend on the order the images were listed in.
func TestArchiveIsAReproducibleOCILayout(t *testing.T) {
	dir := t.TempDir()
	a := Named{Ref: "ghcr.io/noetl/ehdb-election-webhook:0.2.0", Image: mustBuild(t, Spec{Ref: "a", Binary: fakeBinary(t, "a"), Entrypoint: "/ehdb-webhook", User: NonRoot})}
	b := Named{Ref: "localhost/ehdb-localnode/pause:1", Image: mustBuild(t, Spec{Ref: "b", Binary: fakeBinary(t, "b"), Entrypoint: "/pause"})}
	one, two := filepath.Join(dir, "1.tar"), filepath.Join(dir, "2.tar")
	if err := WriteArchive(one, []Named{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(two, []Named{b, a}); err != nil {
		t.Fatal(err)
	}
	d1, _ := os.ReadFile(one)
	d2, _ := os.ReadFile(two)
	if !bytes.Equal(d1, d2) {
		t.Fatal("the same images gave two different archives")
	}

	unpacked := filepath.Join(dir, "unpacked")
	untarBytes(t, d1, unpacked)
	idx, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("archive does not validate: %v", err)
	}
	im, _ := idx.IndexManifest()
	got := map[string]v1.Hash{}
	for _, m := range im.Manifests {
		got[m.Annotations["io.containerd.image.name"]] = m.Digest
		if ref := m.Annotations["org.opencontainers.image.ref.name"]; !strings.HasSuffix(m.Annotations["io.containerd.image.name"], ":"+ref) {
			t.Errorf("ref.name %q is not the tag of %q", ref, m.Annotations["io.containerd.image.name"])
		}
	}
	for _, n := range []Named{a, b} {
		if got[n.Ref] != digestOf(t, n.Image) {
			t.Errorf("%s: archive has %s, built %s", n.Ref, got[n.Ref], digestOf(t, n.Image))
		}
	}

	if err := WriteArchive(filepath.Join(dir, "bad.tar"), []Named{{Ref: "no-tag", Image: a.Image}}); err == nil {
		t.Error("WriteArchive accepted a reference without a tag")
	}
}

// Push sends the image to a real registry (Distribution, on loopback) and the registry then serves
// exactly the built manifest under the returned digest reference.
func TestPushServesTheBuiltDigest(t *testing.T) {
	ctx := context.Background()
	reg, err := ociregistry.Start(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	img := mustBuild(t, Spec{Ref: "x", Binary: fakeBinary(t, "pushed"), Entrypoint: "/ehdb-webhook", User: NonRoot})
	ref, err := Push(ctx, Named{Ref: reg.Host + "/noetl/ehdb-election-webhook:0.2.0", Image: img})
	if err != nil {
		t.Fatal(err)
	}
	if ref.DigestStr() != digestOf(t, img).String() || ref.Context().RegistryStr() != reg.Host {
		t.Fatalf("Push returned %s, built %s", ref, digestOf(t, img))
	}
	byDigest, err := name.NewDigest(ref.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(byDigest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(pulled); err != nil {
		t.Fatalf("pulled image: %v", err)
	}
	if digestOf(t, pulled) != digestOf(t, img) {
		t.Fatalf("registry serves %s, pushed %s", digestOf(t, pulled), digestOf(t, img))
	}
	if _, err := Push(ctx, Named{Ref: reg.Host + "/noetl/x@" + digestOf(t, img).String(), Image: img}); err == nil {
		t.Error("Push accepted a digest reference with no tag")
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.8.9.1": true, "[::1]:80": true, "localhost:5000": true, "localhost": true,
		"ghcr.io": false, "10.0.0.1:5000": false, "127.0.0.1.example.com": false, "localhost.example.com:80": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func untarBytes(t *testing.T, data []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
