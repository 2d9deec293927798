package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"time"
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

// descriptor, manifest, index and imageConfig are the parts of the OCI image layout spec this
// tool writes (github.com/opencontainers/image-spec, v1.0), spelled out to keep the tool small.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
		User       string   `json:"User,omitempty"`
		Env        []string `json:"Env"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// epoch fixes every timestamp, so the same binary always gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// writeOCIArchive writes the image as an OCI image layout in a tar file: what
// `ctr images import` reads, with no registry and no Docker involved.
func writeOCIArchive(spec imageSpec, out string) error {
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	layer, err := layerTar(spec.Entrypoint, bin)
	if err != nil {
		return fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	layerDesc := blobDescriptor("application/vnd.oci.image.layer.v1.tar", layer)

	var cfg imageConfig
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", epoch.Format(time.RFC3339)
	cfg.Config.Entrypoint = []string{spec.Entrypoint}
	cfg.Config.User = spec.User
	cfg.Config.Env = append([]string{"PATH=/"}, spec.Env...)
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{layerDesc.Digest} // uncompressed: the diff ID is the blob's digest
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgDesc := blobDescriptor("application/vnd.oci.image.config.v1+json", cfgJSON)

	manJSON, err := json.Marshal(manifest{
		SchemaVersion: 2, MediaType: "application/vnd.oci.image.manifest.v1+json",
		Config: cfgDesc, Layers: []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manDesc := blobDescriptor("application/vnd.oci.image.manifest.v1+json", manJSON)
	manDesc.Platform = &platform{Architecture: "amd64", OS: "linux"}
	manDesc.Annotations = map[string]string{
		"io.containerd.image.name":          spec.Ref,
		"org.opencontainers.image.ref.name": refTag(spec.Ref),
	}
	idxJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json", Manifests: []descriptor{manDesc}})
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{blobPath(layerDesc), layer},
		{blobPath(cfgDesc), cfgJSON},
		{blobPath(manDesc), manJSON},
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
		return err
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// layerTar is the image's only layer: the binary, executable by anyone (images run non-root).
func layerTar(entrypoint string, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	name := path.Clean("/" + entrypoint)[1:]
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(bin)), ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func blobDescriptor(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d descriptor) string { return "blobs/sha256/" + d.Digest[len("sha256:"):] }

// refTag is the tag of an image reference ("latest" when it has none).
func refTag(ref string) string {
	for i := len(ref) - 1; i >= 0 && ref[i] != '/'; i-- {
		if ref[i] == ':' {
			return ref[i+1:]
		}
	}
	return "latest"
}
