package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/noetl/ehdb-election/internal/harness"
)

// noopWebhook is the floor every admission webhook pays: a controller-runtime webhook server whose
// handler allows everything, served on loopback TLS from this process.
type noopWebhook struct {
	URL   string
	CA    []byte
	calls atomic.Int64
}

// startNoopWebhook serves the no-op webhook until ctx ends.
func startNoopWebhook(ctx context.Context, dir string) (*noopWebhook, error) {
	certDir := filepath.Join(dir, "noop-webhook-certs")
	certPEM, err := harness.LoopbackCert(certDir)
	if err != nil {
		return nil, err
	}
	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	h := &noopWebhook{URL: fmt.Sprintf("https://127.0.0.1:%d/validate", port), CA: certPEM}
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	srv.Register("/validate", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		h.calls.Add(1)
		return admission.Allowed("")
	})})
	served := make(chan error, 1)
	go func() { served <- srv.Start(ctx) }()
	ready := srv.StartedChecker()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready(&http.Request{})
		if err == nil {
			return h, nil
		}
		select {
		case err := <-served:
			return nil, fmt.Errorf("the no-op webhook stopped: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the no-op webhook never became ready: %w", err)
		}
	}
}
