package ociimage

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push uploads the image under its tag and returns the reference by digest, the form the chart
// pins. Credentials come from the Docker config (~/.docker/config.json), as docker, crane and helm
// read them. Plain HTTP is used only for a loopback registry, so a typo cannot send an image in clear.
func Push(ctx context.Context, n Named) (name.Digest, error) {
	tag, err := parseTagged(n.Ref)
	if err != nil {
		return name.Digest{}, err
	}
	if isLoopback(tag.RegistryStr()) {
		if tag, err = name.NewTag(n.Ref, name.Insecure); err != nil {
			return name.Digest{}, err
		}
	}
	dgst, err := n.Image.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w", n.Ref, err)
	}
	if err := remote.Write(tag, n.Image, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(http.DefaultTransport)); err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w", n.Ref, err)
	}
	return tag.Context().Digest(dgst.String()), nil
}

// isLoopback reports whether a registry host[:port] is on this machine (127.0.0.0/8, ::1, localhost).
func isLoopback(registry string) bool {
	host, _, err := net.SplitHostPort(registry)
	if err != nil {
		host = registry
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
