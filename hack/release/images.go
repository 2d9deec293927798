package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/noetl/ehdb-election/internal/ociimage"
)

// image is one of the project's images: which command it runs and where.
type image struct {
	suffix     string // appended to the repository prefix: <repo>-webhook
	pkg        string // the Go package of its binary
	binary     string // the binary's name as go build writes it
	entrypoint string
}

// projectImages are every image a release ships; kind, the local node and users run these.
var projectImages = []image{
	{suffix: "-webhook", pkg: "./cmd/webhook", binary: "webhook", entrypoint: "/ehdb-webhook"},
	{suffix: "-writer", pkg: "./cmd/ehdb-writer", binary: "ehdb-writer", entrypoint: "/ehdb-writer"},
}

// buildImages compiles the binaries (static, -trimpath) into binDir and packs each as an image
// named <repo><suffix>:<tag>, labelled with the version.
func buildImages(ctx context.Context, root, binDir, repo, tag string) ([]ociimage.Named, error) {
	pkgs := make([]string, 0, len(projectImages))
	for _, im := range projectImages {
		pkgs = append(pkgs, im.pkg)
	}
	if err := ociimage.GoBuild(ctx, root, binDir, pkgs...); err != nil {
		return nil, err
	}
	out := make([]ociimage.Named, 0, len(projectImages))
	for _, im := range projectImages {
		ref := repo + im.suffix + ":" + tag
		img, err := ociimage.Build(ociimage.Spec{
			Ref: ref, Binary: filepath.Join(binDir, im.binary), Entrypoint: im.entrypoint, User: ociimage.NonRoot,
			Labels: map[string]string{
				"org.opencontainers.image.source":  "https://github.com/noetl/ehdb-election",
				"org.opencontainers.image.version": tag,
				"org.opencontainers.image.title":   "ehdb-election" + im.suffix,
			},
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ociimage.Named{Ref: ref, Image: img})
	}
	return out, nil
}

// imageFacts are what a release reports per image: the reference by digest and the sizes
// (compressed, as pulled; unpacked, as on the node's disk).
type imageFacts struct {
	Ref, Digest          string
	Compressed, Unpacked int64
}

func factsOf(n ociimage.Named) (imageFacts, error) {
	d, err := n.Image.Digest()
	if err != nil {
		return imageFacts{}, err
	}
	f := imageFacts{Ref: n.Ref, Digest: d.String()}
	layers, err := n.Image.Layers()
	if err != nil {
		return imageFacts{}, err
	}
	for _, l := range layers {
		sz, err := l.Size()
		if err != nil {
			return imageFacts{}, err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return imageFacts{}, err
		}
		unpacked, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return imageFacts{}, fmt.Errorf("%s: %w", n.Ref, err)
		}
		f.Compressed += sz
		f.Unpacked += unpacked
	}
	return f, nil
}
