package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
			annotationImageName:                 n.Ref, // as given: containerd and the kubelet match the name exactly
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

// ReadArchive opens an archive WriteArchive wrote (or any OCI-layout tar naming its images by
// io.containerd.image.name). The images read from a temporary folder that close removes.
func ReadArchive(archive string) (imgs []Named, closeFn func() error, err error) {
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return nil, nil, err
	}
	closeFn = func() error { return os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			closeFn()
		}
	}()
	if err := untar(archive, dir); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not an OCI layout: %w", archive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range im.Manifests {
		ref := d.Annotations[annotationImageName]
		if ref == "" {
			return nil, nil, fmt.Errorf("%s: manifest %s has no %s annotation", archive, d.Digest, annotationImageName)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", archive, ref, err)
		}
		imgs = append(imgs, Named{Ref: ref, Image: img})
	}
	return imgs, closeFn, nil
}

// untar unpacks regular files and folders only, refusing names that would leave dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		p := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %c is not a file or folder", h.Name, h.Typeflag)
		}
	}
}
