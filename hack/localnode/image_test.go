package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// readTar returns a tar's regular files by name.
func readTar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// The archive is what `ctr images import` reads: an OCI layout whose index names the image by
// io.containerd.image.name, whose blobs match their digests, and whose one layer holds the binary
// at the entrypoint, executable, under the config's diff ID.
func TestOCIArchiveIsAConsistentImageLayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	payload := []byte("\x7fELF not really, but bytes")
	if err := os.WriteFile(bin, payload, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	spec := imageSpec{Ref: "ghcr.io/noetl/ehdb-election-writer:dev", Binary: bin, Entrypoint: "/ehdb-writer", User: "65532:65532"}
	if err := writeOCIArchive(spec, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, data)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files[blobPath(d)]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		sum := sha256.Sum256(b)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: content does not match its descriptor", d.Digest)
		}
		return b
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("%d manifests in the index", len(idx.Manifests))
	}
	md := idx.Manifests[0]
	if md.Annotations["io.containerd.image.name"] != spec.Ref || md.Annotations["org.opencontainers.image.ref.name"] != "dev" {
		t.Fatalf("annotations %v", md.Annotations)
	}
	var man manifest
	if err := json.Unmarshal(blob(md), &man); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/ehdb-writer" || cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Fatalf("config %+v", cfg)
	}
	if len(cfg.Config.Env) != 1 || cfg.Config.Env[0] != "PATH=/" {
		t.Fatalf("env %q, want only PATH", cfg.Config.Env)
	}
	if len(man.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != man.Layers[0].Digest {
		t.Fatalf("layers %v, diff IDs %v", man.Layers, cfg.RootFS.DiffIDs)
	}
	layer := blob(man.Layers[0])
	tr := tar.NewReader(bytes.NewReader(layer))
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(tr)
	if h.Name != "ehdb-writer" || h.Mode&0o111 != 0o111 || !bytes.Equal(got, payload) {
		t.Fatalf("layer entry %q mode %o, %d bytes", h.Name, h.Mode, len(got))
	}

	// Same binary, same image: the digest does not depend on when it was packed.
	out2 := filepath.Join(dir, "img2.tar")
	if err := writeOCIArchive(spec, out2); err != nil {
		t.Fatal(err)
	}
	data2, _ := os.ReadFile(out2)
	if !bytes.Equal(data, data2) {
		t.Fatal("packing the same binary twice gave different archives")
	}
}

// An image's own ENV (the armed writer's NOETL_EHDB_FENCING=enforce) lands in its config after PATH.
func TestOCIArchiveCarriesTheImagesEnv(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	if err := writeOCIArchive(imageSpec{Ref: "w:dev-armed", Binary: bin, Entrypoint: "/w", Env: []string{"NOETL_EHDB_FENCING=enforce"}}, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, data)
	var idx index
	var man manifest
	var cfg imageConfig
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files[blobPath(idx.Manifests[0])], &man); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files[blobPath(man.Config)], &cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Env; len(got) != 2 || got[0] != "PATH=/" || got[1] != "NOETL_EHDB_FENCING=enforce" {
		t.Fatalf("env %q", got)
	}
}

func TestOCIArchiveRefusesAMissingBinary(t *testing.T) {
	err := writeOCIArchive(imageSpec{Ref: "x:1", Binary: filepath.Join(t.TempDir(), "absent"), Entrypoint: "/x"}, filepath.Join(t.TempDir(), "x.tar"))
	if err == nil {
		t.Fatal("want an error for a missing binary")
	}
}

func TestRefTag(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/noetl/ehdb-election-webhook:dev": "dev",
		"localhost:5000/pause":                    "latest",
		"localhost/ehdb-localnode/pause:1":        "1",
		"pause":                                   "latest",
	} {
		if got := refTag(ref); got != want {
			t.Errorf("refTag(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestSnapshotDiffNamesWhatChanged(t *testing.T) {
	before := hostSnapshot{"ip rule": "0: from all lookup local\n32766: from all lookup main", "sysctls": "net/ipv4/ip_forward = 0"}
	after := hostSnapshot{"ip rule": "0: from all lookup local\n1000: from all iif ehdbpod0 prohibit\n32766: from all lookup main", "sysctls": "net/ipv4/ip_forward = 1"}
	got := before.diff(after)
	want := []string{
		"ip rule: + 1000: from all iif ehdbpod0 prohibit",
		"sysctls: + net/ipv4/ip_forward = 1",
		"sysctls: - net/ipv4/ip_forward = 0",
	}
	if len(got) != len(want) {
		t.Fatalf("diff = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("diff = %q, want %q", got, want)
		}
	}
	if d := before.diff(before); len(d) != 0 {
		t.Fatalf("a snapshot differs from itself: %q", d)
	}
}
