package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/noetl/ehdb-election/internal/ociimage"
)

// copyChart copies the repository's chart into a temporary folder the test may edit.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ehdb-election")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("..", "..", "charts", "ehdb-election"))); err != nil {
		t.Fatal(err)
	}
	return dst
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustState(t *testing.T, dir string) chartState {
	t.Helper()
	s, err := readChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The repository's own chart passes its version policy: what `make lint` checks on every clone.
func TestRepositoryChartIsRecorded(t *testing.T) {
	sums, err := readSums(filepath.Join("..", "..", "charts", "ehdb-election.sum"))
	if err != nil {
		t.Fatal(err)
	}
	changelog, err := os.ReadFile(filepath.Join("..", "..", "charts", "ehdb-election", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkChart(mustState(t, filepath.Join("..", "..", "charts", "ehdb-election")), sums, changelog); err != nil {
		t.Fatal(err)
	}
}

// Every kind of chart change without a bump fails the check; a bump with a changelog section and
// a lock passes; locking cannot move a recorded version or go backwards.
func TestChartVersionPolicy(t *testing.T) {
	dir := copyChart(t)
	base := mustState(t, dir)
	changelog := []byte("# Changelog\n\n## " + base.Version.String() + "\n\nnotes\n")
	sums, err := lockChart(base, nil, changelog)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkChart(base, sums, changelog); err != nil {
		t.Fatalf("unchanged chart: %v", err)
	}

	for name, change := range map[string]func(dir string){
		"template": func(d string) {
			edit(t, filepath.Join(d, "templates", "_helpers.tpl"), "{{- define", "{{/* x */}}\n{{- define")
		},
		"values":       func(d string) { edit(t, filepath.Join(d, "values.yaml"), "replicaCount: 2", "replicaCount: 3") },
		"schema":       func(d string) { edit(t, filepath.Join(d, "values.schema.json"), `"type"`, ` "type"`) },
		"appVersion":   func(d string) { edit(t, filepath.Join(d, "Chart.yaml"), "appVersion: ", "appVersion: 9") },
		"new file":     func(d string) { os.WriteFile(filepath.Join(d, "templates", "extra.yaml"), []byte("# x\n"), 0o644) },
		"removed file": func(d string) { os.Remove(filepath.Join(d, "templates", "webhook-pdb.yaml")) },
	} {
		d := copyChart(t)
		change(d)
		err := checkChart(mustState(t, d), sums, changelog)
		if err == nil || !strings.Contains(err.Error(), "bump") && !strings.Contains(err.Error(), "raise") {
			t.Errorf("%s changed without a bump: check says %v", name, err)
		}
	}

	// A bump alone is not enough: it needs its CHANGELOG section and a lock.
	edit(t, filepath.Join(dir, "values.yaml"), "replicaCount: 2", "replicaCount: 3")
	edit(t, filepath.Join(dir, "Chart.yaml"), "version: "+base.Version.String(), "version: "+base.Version.IncMinor().String())
	bumped := mustState(t, dir)
	if err := checkChart(bumped, sums, changelog); err == nil || !strings.Contains(err.Error(), "not recorded") {
		t.Errorf("bumped, not locked: %v", err)
	}
	if _, err := lockChart(bumped, sums, changelog); err == nil || !strings.Contains(err.Error(), "CHANGELOG") {
		t.Errorf("lock without a changelog section: %v", err)
	}
	changelog = append(changelog, []byte("\n## "+bumped.Version.String()+"\n\nmore notes\n")...)
	sums2, err := lockChart(bumped, sums, changelog)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkChart(bumped, sums2, changelog); err != nil {
		t.Errorf("bumped and locked: %v", err)
	}
	// The sum file round-trips.
	p := filepath.Join(t.TempDir(), "sum")
	os.WriteFile(p, sums2.bytes(), 0o644)
	if back, err := readSums(p); err != nil || len(back) != 2 || back[1].Sum != bumped.Sum {
		t.Errorf("sum file read back as %v, %v", back, err)
	}

	// Locking refuses to rewrite a recorded version, and to record a lower one.
	if _, err := lockChart(chartState{Version: bumped.Version, Sum: "sha256:00"}, sums2, changelog); err == nil {
		t.Error("lock moved a recorded version's hash")
	}
	old := semver.MustParse("0.0.9")
	if _, err := lockChart(chartState{Version: old, Sum: "sha256:00"}, sums2, []byte("## 0.0.9\n")); err == nil {
		t.Error("lock recorded a version below the highest")
	}
	if err := checkChart(base, sums2, changelog); err == nil {
		t.Error("check accepted the older of two recorded versions as current")
	}
}

func TestReadSumsRefusesMalformedLines(t *testing.T) {
	for _, line := range []string{"0.2.0", "0.2 sha256:ab", "0.2.0 md5:ab", "0.2.0 sha256:ab extra"} {
		p := filepath.Join(t.TempDir(), "sum")
		os.WriteFile(p, []byte(line+"\n"), 0o644)
		if _, err := readSums(p); err == nil {
			t.Errorf("readSums accepted %q", line)
		}
	}
}

// Stamping changes exactly the three image lines; comments and everything else keep their bytes.
func TestSetScalarsEditsOnlyThoseLines(t *testing.T) {
	doc := []byte("# top\nwebhook:\n  # c\n  image:\n    # -- repo\n    repository: ghcr.io/x\n    tag: \"\"\n    digest: \"\"   \n    pullPolicy: IfNotPresent\nother:\n  digest: keep\n")
	out, err := setScalars(doc, map[string]string{"webhook.image.repository": "127.0.0.1:5000/x", "webhook.image.tag": "0.2.0", "webhook.image.digest": "sha256:ab"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# top\nwebhook:\n  # c\n  image:\n    # -- repo\n    repository: \"127.0.0.1:5000/x\"\n    tag: \"0.2.0\"\n    digest: \"sha256:ab\"\n    pullPolicy: IfNotPresent\nother:\n  digest: keep\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	for _, key := range []string{"webhook.image.absent", "webhook.image", "nothing.here"} {
		if _, err := setScalars(doc, map[string]string{key: "v"}); err == nil {
			t.Errorf("setScalars accepted %s", key)
		}
	}
}

// The package is Helm's (loadable), pins the webhook image by digest in its default values, and the
// same chart packed twice gives the same bytes.
func TestPackageChartPinsTheImageReproducibly(t *testing.T) {
	img := webhookImage{Repository: "127.0.0.1:5000/noetl/ehdb-election-webhook", Tag: "0.2.0", Digest: "sha256:" + strings.Repeat("ab", 32)}
	dir := filepath.Join("..", "..", "charts", "ehdb-election")
	one, err := packageChart(dir, filepath.Join(t.TempDir(), "a"), img)
	if err != nil {
		t.Fatal(err)
	}
	two, err := packageChart(dir, filepath.Join(t.TempDir(), "b"), img)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := os.ReadFile(one)
	d2, _ := os.ReadFile(two)
	if !bytes.Equal(d1, d2) {
		t.Fatal("the same chart packaged twice gave different archives")
	}
	// Packaged a second apart the archives would differ unless every entry's time is fixed.
	zr, err := gzip.NewReader(bytes.NewReader(d1))
	if err != nil {
		t.Fatal(err)
	}
	for tr := tar.NewReader(zr); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(ociimage.Epoch) {
			t.Fatalf("%s in the package has time %s, want the fixed %s", h.Name, h.ModTime, ociimage.Epoch)
		}
	}
	c, err := loader.LoadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	src, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != src.Metadata.Version || len(c.Templates) != len(src.Templates) || c.Schema == nil {
		t.Fatalf("package %s: version %s, %d templates, schema %v", one, c.Metadata.Version, len(c.Templates), c.Schema != nil)
	}
	if filepath.Base(one) != "ehdb-election-"+src.Metadata.Version+".tgz" {
		t.Errorf("package named %s", filepath.Base(one))
	}
	if _, err := packageChart(dir, t.TempDir(), webhookImage{Repository: "x", Tag: "1", Digest: "not-a-digest"}); err == nil {
		t.Error("packageChart accepted a digest the chart's schema refuses")
	}
}
