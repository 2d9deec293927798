package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/noetl/ehdb-election/internal/ociimage"
)

// The node imports what the release builder writes: the archive names the image as the node's
// runtime will (io.containerd.image.name), holds the binary at the entrypoint as the spec's user,
// and packing the same binary twice gives the same bytes (the format itself is internal/ociimage's
// to test).
func TestOCIArchiveIsTheReleaseBuildersLayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("\x7fELF not really, but bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec{Ref: "ghcr.io/noetl/ehdb-election-writer:dev", Binary: bin, Entrypoint: "/ehdb-writer", User: "65532:65532"}
	out, out2 := filepath.Join(dir, "img.tar"), filepath.Join(dir, "img2.tar")
	if err := writeOCIArchive(spec, out); err != nil {
		t.Fatal(err)
	}
	if err := writeOCIArchive(spec, out2); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	data2, _ := os.ReadFile(out2)
	if !bytes.Equal(data, data2) {
		t.Fatal("packing the same binary twice gave different archives")
	}
	imgs, closeArchive, err := ociimage.ReadArchive(out)
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	if len(imgs) != 1 || imgs[0].Ref != spec.Ref {
		t.Fatalf("archive names %v, want %s", imgs, spec.Ref)
	}
	cfg, err := imgs[0].Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/ehdb-writer" || cfg.Config.User != "65532:65532" || cfg.OS != "linux" {
		t.Fatalf("config %+v", cfg)
	}
	if len(cfg.Config.Env) != 1 || cfg.Config.Env[0] != "PATH=/" {
		t.Fatalf("env %q, want only PATH", cfg.Config.Env)
	}
}

// An image's own ENV (the armed writer's NOETL_EHDB_FENCING=enforce) lands in its config after PATH,
// under the name exactly as given (no registry added).
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
	imgs, closeArchive, err := ociimage.ReadArchive(out)
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	if len(imgs) != 1 || imgs[0].Ref != "w:dev-armed" {
		t.Fatalf("archive names %v", imgs)
	}
	cfg, err := imgs[0].Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Env) != 2 || cfg.Config.Env[0] != "PATH=/" || cfg.Config.Env[1] != "NOETL_EHDB_FENCING=enforce" {
		t.Fatalf("env %q", cfg.Config.Env)
	}
}

func TestOCIArchiveRefusesAMissingBinary(t *testing.T) {
	err := writeOCIArchive(imageSpec{Ref: "x/y:1", Binary: filepath.Join(t.TempDir(), "absent"), Entrypoint: "/x"}, filepath.Join(t.TempDir(), "x.tar"))
	if err == nil {
		t.Fatal("want an error for a missing binary")
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
