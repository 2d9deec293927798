package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/noetl/ehdb-election/internal/ociimage"
)

// webhookImage is what the released chart's values pin by default.
type webhookImage struct{ Repository, Tag, Digest string }

// packageChart writes <outDir>/<name>-<version>.tgz with Helm's own packager, with values.yaml's
// webhook.image set to the release's image (repository, tag, digest) and every other byte of
// values.yaml (comments included) left as written. Helm stamps the packaging time on every tar
// entry; the archive is rewritten with fixed times so the same sources give the same package.
func packageChart(chartDir, outDir string, img webhookImage) (string, error) {
	chrt, err := loader.LoadDir(chartDir)
	if err != nil {
		return "", fmt.Errorf("loading chart %s: %w", chartDir, err)
	}
	var raw *chart.File
	for _, f := range chrt.Raw {
		if f.Name == chartutil.ValuesfileName {
			raw = f
		}
	}
	if raw == nil {
		return "", fmt.Errorf("chart %s has no %s", chartDir, chartutil.ValuesfileName)
	}
	stamped, err := setScalars(raw.Data, map[string]string{
		"webhook.image.repository": img.Repository,
		"webhook.image.tag":        img.Tag,
		"webhook.image.digest":     img.Digest,
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", chartutil.ValuesfileName, err)
	}
	raw.Data = stamped
	if chrt.Values, err = chartutil.ReadValues(stamped); err != nil {
		return "", err
	}
	if err := chartutil.ValidateAgainstSchema(chrt, chrt.Values); err != nil {
		return "", fmt.Errorf("the release's values fail the chart's schema: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	tgz, err := chartutil.Save(chrt, outDir)
	if err != nil {
		return "", fmt.Errorf("helm package: %w", err)
	}
	if err := fixTimes(tgz); err != nil {
		return "", fmt.Errorf("%s: %w", tgz, err)
	}
	// Read back what users will get and check the pin took.
	got, err := loader.LoadFile(tgz)
	if err != nil {
		return "", fmt.Errorf("loading %s back: %w", tgz, err)
	}
	w, _ := got.Values["webhook"].(map[string]any)
	gi, _ := w["image"].(map[string]any)
	if gi["repository"] != img.Repository || gi["tag"] != img.Tag || gi["digest"] != img.Digest {
		return "", fmt.Errorf("%s: webhook.image is %v after packaging, want %+v", tgz, gi, img)
	}
	return tgz, nil
}

// setScalars replaces the values of the dotted keys (each must exist, holding a scalar) in a YAML
// document, editing only those lines: the rest of the file, comments and all, keeps its bytes.
func setScalars(doc []byte, set map[string]string) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(doc), "\n")
	for key, value := range set {
		keyNode, valNode := lookup(&root, strings.Split(key, "."))
		if valNode == nil || valNode.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("key %s: not found, or not a scalar", key)
		}
		if valNode.Line != keyNode.Line {
			return nil, fmt.Errorf("key %s: its value is not on the key's line %d", key, keyNode.Line)
		}
		line := lines[keyNode.Line-1]
		prefix := line[:keyNode.Column-1] + keyNode.Value + ":"
		if !strings.HasPrefix(line, prefix) {
			return nil, fmt.Errorf("key %s: line %d is not `%s ...`", key, keyNode.Line, prefix)
		}
		// A Go-quoted ASCII string is a valid YAML double-quoted scalar.
		lines[keyNode.Line-1] = prefix + " " + strconv.Quote(value) + "\n"
	}
	out := []byte(strings.Join(lines, ""))
	// The edited document must still parse and hold exactly the new values.
	var check yaml.Node
	if err := yaml.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("after editing: %w", err)
	}
	for key, value := range set {
		if _, v := lookup(&check, strings.Split(key, ".")); v == nil || v.Value != value {
			return nil, fmt.Errorf("key %s did not take the value %q", key, value)
		}
	}
	return out, nil
}

// lookup finds a dotted path's key and value nodes in a mapping document.
func lookup(n *yaml.Node, path []string) (key, val *yaml.Node) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for i, p := range path {
		if n.Kind != yaml.MappingNode {
			return nil, nil
		}
		found := false
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == p {
				key, val, found = n.Content[j], n.Content[j+1], true
				break
			}
		}
		if !found {
			return nil, nil
		}
		if i < len(path)-1 {
			n = val
		}
	}
	return key, val
}

// fixTimes rewrites a gzipped tar in place with every entry's time at ociimage.Epoch, keeping the
// gzip header Helm writes (its Extra and Comment mark a Helm package).
func fixTimes(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Header.Extra, zw.Header.Comment, zw.Header.Name = zr.Header.Extra, zr.Header.Comment, zr.Header.Name
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = ociimage.Epoch, time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
