package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// containerd names an imported image by this index annotation (`ctr images import`, and so
// `kind load image-archive`, which pipes the archive into it on every node).
const annotationImageName = "io.containerd.image.name"

// WriteArchive writes the images as one OCI image layout in a tar file at out, each named in the
// index by its full reference (containerd) and its tag (the OCI ref.name). The tar's entries are in
// a fixed order with fixed times, so the same images give the same archive.
func WriteArchive(out string, imgs []Named) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	for _, n := range sortedRefs(imgs) {
		tag, err := parseTagged(n.Ref)
		if err != nil {
			return err
		}
		if err := p.AppendImage(n.Image, layout.WithAnnotations(map[string]string{
			annotationImageName:                 tag.Name(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		})); err != nil {
			return fmt.Errorf("oci layout: %s: %w", n.Ref, err)
		}
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}

// tarDir archives dir's tree (WalkDir visits in lexical order) with fixed times and owners.
func tarDir(dir, out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch})
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: info.Size(), ModTime: Epoch}); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
