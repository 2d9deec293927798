package main

import (
	"context"
	"crypto/tls"
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// certLoader serves the certificate in --cert-dir once it is there. controller-runtime's
// certwatcher (which does the reloading) refuses to start without the files, but with
// --cert-rotation the Secret behind the directory starts empty and is filled by this very
// process; so the TLS listener starts at once, handshakes fail until the files appear (and
// /readyz says so), and from then on certwatcher reloads them when the kubelet swaps them.
type certLoader struct {
	certPath, keyPath string
	log               logr.Logger
	watcher           atomic.Pointer[certwatcher.CertWatcher]
	poll              time.Duration
}

func newCertLoader(certPath, keyPath string, log logr.Logger) *certLoader {
	return &certLoader{certPath: certPath, keyPath: keyPath, log: log, poll: time.Second}
}

var errNoCertificate = errors.New("no serving certificate yet")

// GetCertificate is the tls.Config hook.
func (l *certLoader) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	w := l.watcher.Load()
	if w == nil {
		return nil, errNoCertificate
	}
	c, err := w.GetCertificate(hello)
	if err == nil && c == nil {
		return nil, errNoCertificate
	}
	return c, err
}

// NeedLeaderElection: every replica serves.
func (l *certLoader) NeedLeaderElection() bool { return false }

// Start waits for a readable key pair, then watches it until ctx is done.
func (l *certLoader) Start(ctx context.Context) error {
	t := time.NewTicker(l.poll)
	defer t.Stop()
	var lastErr string
	for {
		w, err := certwatcher.New(l.certPath, l.keyPath)
		if err == nil {
			l.watcher.Store(w)
			l.log.Info("serving certificate loaded", "cert", l.certPath)
			return w.Start(ctx)
		}
		if err.Error() != lastErr {
			l.log.Info("waiting for the serving certificate", "cert", l.certPath, "reason", err.Error())
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
