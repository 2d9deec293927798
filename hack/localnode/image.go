package main

import (
	"github.com/noetl/ehdb-election/internal/ociimage"
)

// imageSpec is one single-binary image: the binary at /<name>, run as its entrypoint.
type imageSpec struct {
	Ref        string // the name the runtime will know it by (io.containerd.image.name)
	Binary     string // path of the static binary on this machine
	Entrypoint string // its path inside the image, e.g. /ehdb-webhook
	User       string // "65532:65532", or "" for root
	// Env is the image's own ENV (after PATH): what a container gets unless its Pod spec sets the
	// same name. The admission guard never sees it.
	Env []string
}

// writeOCIArchive packs the image with the project's one image builder (internal/ociimage, the
// one `make release` and `make images` use), as the OCI-layout archive `ctr images import` reads:
// the node runs the same image, with the same digest, that a release ships for the same binary.
func writeOCIArchive(spec imageSpec, out string) error {
	img, err := ociimage.Build(ociimage.Spec{Ref: spec.Ref, Binary: spec.Binary, Entrypoint: spec.Entrypoint, User: spec.User, Env: spec.Env})
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(out, []ociimage.Named{{Ref: spec.Ref, Image: img}})
}
