// Command ehdb-writer is a minimal writer process embedding the election: it reads the election's
// environment, runs it (or declines, never failing start-up over it), serves /metrics, /healthz and
// /readyz (election.Readiness: not ready while NOETL_EHDB_FENCING=enforce and no valid token), logs
// each outcome change as JSON, and releases its Lease on SIGTERM or SIGINT. It is the demo and
// end-to-end workload; with --kubeconfig it runs outside a cluster against any API server.
//
// With --intervals-file it appends JSON lines for a safety checker (with --intervals-file=- to
// standard error, where a Pod's log keeps them; the log's own lines have a "msg", these do not):
// first, before the election starts, the process's start
//
//	{"identity":"<hostname>#<uuid>","started":"<RFC3339Nano>"}
//
// then one line per validity change
//
//	{"identity":"<hostname>#<uuid>","epoch":N,"from":"<RFC3339Nano>","until":"<RFC3339Nano>"}
//
// written on every successful acquisition and renewal (from = when the acquisition's answer
// arrived, until = the write's send time + the lease duration) and on loss or release (until = the
// instant the token was dropped). The last line per (identity, epoch) is the interval. The instants
// are the machine's, also when --clock-offset/--clock-rate run the election on a skewed clock. A
// record that cannot be written stops the process (exit 1): its record would be incomplete.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/noetl/ehdb-election/election"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stderr, nil))
}

// releaseTimeout bounds the graceful hand-over at shutdown; the kubelet's grace period is longer.
const releaseTimeout = 10 * time.Second

// run is the writer until ctx is done (a signal), then the graceful shutdown. ready, if set,
// receives the address /metrics is served on.
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer, ready chan<- string) int {
	fs := flag.NewFlagSet("ehdb-writer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; empty means the in-cluster configuration")
	metricsAddr := fs.String("metrics-addr", ":9090", "address to serve /metrics, /healthz and /readyz on")
	intervalsFile := fs.String("intervals-file", "", "append one JSON line per token validity change to this file (- = standard error, among the log lines)")
	clockOffset := fs.Duration("clock-offset", 0, "test workload: run the election on a clock this far off the machine's (e.g. -2m)")
	clockRate := fs.Float64("clock-rate", 1, "test workload: run the election on a clock ticking this many times as fast as the machine's (e.g. 1.004)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ehdb-writer: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))

	hostname := func() string {
		if h, ok := lookup("HOSTNAME"); ok && strings.TrimSpace(h) != "" {
			return strings.TrimSpace(h)
		}
		h, _ := os.Hostname()
		return h
	}()
	env := func(k string) (string, bool) {
		if k == "HOSTNAME" {
			return hostname, hostname != ""
		}
		return lookup(k)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := election.Options{Identity: election.NewIdentity(hostname), Registerer: reg, Logger: log}
	toReal := func(t time.Time) time.Time { return t }
	if *clockOffset != 0 || *clockRate != 1 {
		c, err := newSkewedClock(clock.RealClock{}, *clockOffset, *clockRate)
		if err != nil {
			fmt.Fprintf(stderr, "ehdb-writer: --clock-rate: %v\n", err)
			return 2
		}
		opts.Clock, toReal = c, c.Real
		log.Info("the election runs on a skewed clock", "offset", clockOffset.String(), "rate", *clockRate)
	}

	if *intervalsFile != "" {
		rec, closeFile, err := openIntervals(*intervalsFile, stderr, opts.Identity, log, toReal)
		if err != nil {
			log.Error("cannot record validity intervals", "path", *intervalsFile, "error", err)
			return 1
		}
		defer closeFile()
		opts.OnEvent = rec.record
	}

	// The readiness reads the environment as it is, also when a kubeconfig that cannot be loaded
	// turns the election off below: armed, that writer is declined, not merely "off".
	readyEnv := env

	// The election's context is not the signal's: cancelling it would stop the driver without a
	// release, which is a crash as far as the Lease is concerned.
	electionCtx, stopElection := context.WithCancel(context.Background())
	defer stopElection()
	var restConfig *rest.Config
	if *kubeconfig != "" {
		rc, ns, err := loadKubeconfig(*kubeconfig)
		if err != nil {
			// Fail-soft like every other "enabled but unable": metrics render, no token.
			log.Error("cannot load the kubeconfig; the election declines", "path", *kubeconfig, "error", err)
			env = func(k string) (string, bool) {
				if k == election.EnvElection {
					return "", false
				}
				return lookup(k)
			}
		} else {
			restConfig = rc
			env = withNamespaceFallback(env, ns)
		}
	}
	el := election.StartFromEnvironment(electionCtx, env, restConfig, opts)
	readiness := election.NewReadiness(el, readyEnv)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("/readyz", &readyz{check: readiness.Check, log: log})
	ln, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		log.Error("cannot serve metrics", "address", *metricsAddr, "error", err)
		return 1
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("ehdb-writer started", "identity", opts.Identity, "metrics", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}

	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down: releasing the lease")
	case err := <-served:
		log.Error("the metrics server stopped", "error", err)
		code = 1
	}
	relCtx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := el.Release(relCtx); err != nil {
		log.Error("release failed; a successor waits out the lease", "error", err)
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("stopping the metrics server", "error", err)
	}
	return code
}

// loadKubeconfig returns the client configuration of the kubeconfig's current context and that
// context's namespace ("" when it names none).
func loadKubeconfig(path string) (*rest.Config, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{})
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, explicit, err := loader.Namespace()
	if err != nil || !explicit {
		ns = ""
	}
	return rc, ns, nil
}

// withNamespaceFallback lets the kubeconfig's namespace stand in for POD_NAMESPACE when the
// environment names no namespace, as kubectl would use it.
func withNamespaceFallback(env func(string) (string, bool), ns string) func(string) (string, bool) {
	if ns == "" {
		return env
	}
	if v, ok := env(election.EnvNamespace); ok && strings.TrimSpace(v) != "" {
		return env
	}
	return func(k string) (string, bool) {
		if k == "POD_NAMESPACE" {
			if v, ok := env(k); ok && strings.TrimSpace(v) != "" {
				return v, ok
			}
			return ns, true
		}
		return env(k)
	}
}
