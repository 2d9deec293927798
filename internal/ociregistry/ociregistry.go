// Package ociregistry runs the CNCF Distribution registry (the code behind Docker Hub, GHCR's
// protocol and `registry:2`) in-process on loopback, so tests push and pull images and Helm charts
// through a real OCI registry with no network and no container engine.
package ociregistry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // storage drivers register by import
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/sirupsen/logrus"
)

// Server is a running registry.
type Server struct {
	// Host is host:port on 127.0.0.1, what image references and oci:// URLs start with.
	Host string
	srv  *http.Server
	done chan error
	app  *handlers.App
}

// Start serves a registry on 127.0.0.1 (port 0 picks a free one). Blobs are kept in rootDir, or
// in memory when rootDir is "". It runs until Close.
func Start(ctx context.Context, port int, rootDir string) (*Server, error) {
	storage := configuration.Storage{"inmemory": configuration.Parameters{}}
	if rootDir != "" {
		storage = configuration.Storage{"filesystem": configuration.Parameters{"rootdirectory": rootDir}}
	}
	// Upload purging is a background sweep of stale uploads; a short-lived test registry needs none.
	storage["maintenance"] = configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}}
	storage["delete"] = configuration.Parameters{"enabled": true}
	cfg := &configuration.Configuration{Storage: storage}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	cfg.HTTP.Secret = hex.EncodeToString(secret) // signs upload state; without one the app logs a warning
	// The registry logs every request through logrus, and every 404 of a client's existence check
	// (HEAD of a blob before its upload) at error level: a client sees real failures as HTTP errors.
	logrus.SetLevel(logrus.FatalLevel)

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("registry listen: %w", err)
	}
	app := handlers.NewApp(ctx, cfg)
	s := &Server{
		Host: ln.Addr().String(),
		srv:  &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1),
		app:  app,
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops serving and waits for the server to return.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
