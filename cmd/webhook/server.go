package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/noetl/ehdb-election/webhook"
)

// Timeouts of the admission server. The API server sends one review per request and waits at most
// its webhook timeout (the chart's is 5 s, at most 30 s) for the answer; nothing legitimate needs
// longer, and a client that trickles its headers or body, or never reads the answer, must not hold
// a connection (and the memory behind it) past them.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second // headers and a body of up to 7 MiB
	writeTimeout      = 35 * time.Second // from the end of the headers to the end of the answer
	idleTimeout       = 90 * time.Second // keep-alive between reviews
	// maxHeaderBytes bounds a request's line and headers: the API server's are a few hundred
	// bytes, and each connection holds its own while it is served.
	maxHeaderBytes = 8 << 10
	// defaultMaxConnections bounds the connections open at once (--max-connections, conns.go).
	// Each costs about 90 KB of RSS (TLS state, buffers, a goroutine) whatever it sends, so
	// unauthenticated clients that complete a handshake and send nothing took the webhook from
	// 43 to 205 MB at 3,000 (the final red team; the chart's limit is 128 Mi); and each may read
	// the first 64 KiB of a body from a reserve sized for them all (Handler.MaxConnections).
	defaultMaxConnections = webhook.DefaultMaxConnections
)

// admissionServer serves the guard over TLS with read, write and idle timeouts (the
// controller-runtime webhook server sets none but the header one). It is a manager Runnable.
type admissionServer struct {
	host            string
	port            int
	handler         http.Handler
	tlsConfig       *tls.Config
	shutdownTimeout time.Duration
	maxConnections  int // 0: defaultMaxConnections
	log             logr.Logger
	started         atomic.Bool
}

func (s *admissionServer) addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves.
func (s *admissionServer) NeedLeaderElection() bool { return false }

// Start serves until ctx is done, then drains in-flight reviews for up to shutdownTimeout.
func (s *admissionServer) Start(ctx context.Context) error {
	tcp, err := listen(ctx, s.addr())
	if err != nil {
		return err
	}
	limit := s.maxConnections
	if limit <= 0 {
		limit = defaultMaxConnections
	}
	capped := newCapListener(tcp, limit)
	ln := tls.NewListener(capped, s.tlsConfig)
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         capped.track,
		ConnContext:       capped.connContext,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// TLS handshake errors and the like, through the process's structured logger.
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Error(err, "stopping the admission server")
		}
	}()
	s.log.Info("serving admission reviews", "addr", s.addr(), "readTimeout", readTimeout, "writeTimeout", writeTimeout, "idleTimeout", idleTimeout, "maxConnections", limit)
	s.started.Store(true)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}

// socketBuffer is what the kernel may hold for each admission connection, each way: of what its
// client has sent and the server has not read, and of what the server has written and the client
// has not read (SO_RCVBUF, SO_SNDBUF; the kernel keeps twice it). It is charged to the webhook's
// memory cgroup once the connection is accepted, lobby and cap alike; at the kernel's default
// (growing to megabytes) 512 connections whose clients each sent a megabyte held 67 MB of the
// webhook's 128 Mi unread, and red team L's unread refusals 50 KB each unsent. A window of
// this size (about 24 KiB of data) still carries the API server's largest review, 7 MiB, in
// about 0.3 s at a millisecond's round trip, and an ordinary review or answer in a few.
const socketBuffer = 16 << 10

// listen opens the admission port with its connections' buffers limited (socketBuffer).
func listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, raw syscall.RawConn) error {
		return limitBuffers(raw, socketBuffer)
	}}
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return l, nil
}

// checkTLS is a readiness check: a TLS handshake with the served certificate succeeds.
func (s *admissionServer) checkTLS(*http.Request) error {
	if !s.started.Load() {
		return errors.New("the admission server has not started")
	}
	// The handshake runs over an in-memory pipe with the server's own TLS configuration, not
	// through its listener: at the connection cap a dial would wait behind a flood of clients
	// and fail readiness, taking every replica out of the Service for what the cap absorbs.
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	deadline := time.Now().Add(5 * time.Second)
	_ = client.SetDeadline(deadline)
	_ = server.SetDeadline(deadline)
	go func() { _ = tls.Server(server, s.tlsConfig).Handshake() }()
	// TLS 1.3: the client's side of the handshake completes before the server judges a client
	// certificate, so this proves a certificate is served even when the server requires one.
	if err := tls.Client(client, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}).Handshake(); err != nil { // #nosec G402 -- only proves a certificate is served
		return fmt.Errorf("TLS handshake with the admission server's configuration: %w", err)
	}
	return nil
}
