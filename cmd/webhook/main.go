// Command ehdb-webhook serves the ehdb-election admission guard (package webhook): it refuses to
// arm NOETL_EHDB_FENCING=enforce on a writer before the election that mints its tokens can run.
//
// It serves TLS (1.2 or later) on --webhook-port at /validate with the certificate in --cert-dir,
// reloaded when the files change. With --cert-rotation it provisions and rotates that
// certificate itself (cert-controller's rotator): a CA and a serving certificate for
// <--service-name>.<namespace>.svc in the Secret --cert-secret-name, and the CA in the caBundle of
// every entry of the ValidatingWebhookConfiguration --webhook-config-name. /readyz turns true only
// once the certificate is served (and, when rotating, the CA is injected); /healthz answers while
// the process runs; /metrics is on its own port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/noetl/ehdb-election/webhook"
)

// options are the command line, named exactly as the chart passes them.
type options struct {
	kubeconfig        string
	namespace         string
	serviceAccount    string
	webhookPort       int
	webhookHost       string
	certDir           string
	certRotation      bool
	certSecretName    string
	serviceName       string
	webhookConfigName string
	metricsAddr       string
	probeAddr         string
	requireLiveLease  bool
	cacheAllowedTTL   time.Duration
	watchLeases       bool
	logLevel          string
	guardedNamespaces []string
	maxInFlight       int
	maxConnections    int
	maxShards         int
	clientCAFile      string
	clientNames       []string
	rootCAPublishers  []string

	// Not flags. extraDNSNames are added to the rotated serving certificate (tests reach the
	// webhook as localhost); shutdownTimeout bounds the graceful stop.
	extraDNSNames   []string
	shutdownTimeout time.Duration
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ehdb-webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; in-cluster configuration when empty")
	fs.StringVar(&o.namespace, "namespace", getenv("POD_NAMESPACE"), "the webhook's own namespace, where its TLS Secret lives (default: $POD_NAMESPACE)")
	fs.StringVar(&o.serviceAccount, "service-account", getenv("POD_SERVICE_ACCOUNT"), "the webhook's own ServiceAccount in --namespace: RBAC changes that take its access away are refused while it serves (default: $POD_SERVICE_ACCOUNT; empty: not protected)")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the admission endpoint ("+webhookPath+")")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "address to bind the admission endpoint to; empty means all")
	fs.StringVar(&o.certDir, "cert-dir", "/certs", "directory holding tls.crt and tls.key (reloaded when they change)")
	fs.BoolVar(&o.certRotation, "cert-rotation", true, "provision and rotate the CA and serving certificate into --cert-secret-name and patch the caBundle of --webhook-config-name; false serves what is mounted (cert-manager)")
	fs.StringVar(&o.certSecretName, "cert-secret-name", "ehdb-election-webhook-tls", "Secret in --namespace the rotator fills (mounted at --cert-dir)")
	fs.StringVar(&o.serviceName, "service-name", "ehdb-election-webhook", "Service in front of the webhook; the certificate is for <service-name>.<namespace>.svc")
	fs.StringVar(&o.webhookConfigName, "webhook-config-name", "ehdb-election", "ValidatingWebhookConfiguration whose caBundle the rotator patches")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of /metrics; \"0\" disables it")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.requireLiveLease, "require-live-lease", true, "on the transition to armed, require every shard's Lease to be live, held and at epoch >= 1")
	fs.BoolVar(&o.watchLeases, "watch-leases", true, "read Leases for the order check from a watch (needs list and watch on leases) instead of a GET per review; /readyz waits for its first sync")
	fs.DurationVar(&o.cacheAllowedTTL, "cache-allowed-ttl", 10*time.Second, "keep positive answers (a ServiceAccount that exists, an access review that allowed) this long; refusals, Leases and ConfigMaps are never cached; 0 disables")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	guarded := fs.String("guarded-namespaces", "", "comma-separated namespaces the guard sees (its webhook configuration's namespaceSelector): its Lease and workload watches and reads are scoped to them; \"*\" means every namespace (and needs cluster-wide RBAC); default: --namespace")
	fs.IntVar(&o.maxConnections, "max-connections", defaultMaxConnections, "connections open at once; 128 more wait in a lobby, the client address holding the fewest let in first (each open one costs about 90 KB whatever its client sends)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 32, "reviews one process works on at once; more wait for a slot until their deadline, then get HTTP 429 (the API server applies the failure policy)")
	fs.IntVar(&o.maxShards, "max-shards", 128, "most shards one object may make the guard judge (a StatefulSet whose pods take the shard from the ordinal has one per replica); above it an armed object is refused")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "PEM CA bundle: require every client to present a certificate it signed (the API server does when its admission configuration's kubeConfigFile has a user for this Service); empty: any client may connect")
	publishers := fs.String("root-ca-publishers", strings.Join(webhook.DefaultRootCAPublishers(), ","), "comma-separated users whose writes of a guarded namespace's kube-root-ca.crt are kube-controller-manager's root-ca-cert-publisher; anyone else's change of its CA is refused while a writer there may be armed")
	clientNames := fs.String("client-names", "", "comma-separated names (subject CN or DNS SAN) a client certificate must carry, with --client-ca-file; empty: any the CA signed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.webhookPort < 1 || o.webhookPort > 65535 {
		return o, fmt.Errorf("--webhook-port=%d is not a port", o.webhookPort)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return o, err
	}
	for _, n := range strings.Split(*guarded, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(o.guardedNamespaces, n) {
			o.guardedNamespaces = append(o.guardedNamespaces, n)
		}
	}
	for _, n := range strings.Split(*publishers, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.rootCAPublishers = append(o.rootCAPublishers, n)
		}
	}
	if len(o.rootCAPublishers) == 0 {
		return o, errors.New("--root-ca-publishers is empty: no one could write the cluster's CA into kube-root-ca.crt")
	}
	for _, n := range strings.Split(*clientNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.clientNames = append(o.clientNames, n)
		}
	}
	if len(o.clientNames) > 0 && o.clientCAFile == "" {
		return o, errors.New("--client-names needs --client-ca-file")
	}
	if len(o.guardedNamespaces) == 0 {
		if o.namespace == "" {
			return o, errors.New("--guarded-namespaces is empty and so is --namespace (or $POD_NAMESPACE)")
		}
		o.guardedNamespaces = []string{o.namespace}
	}
	if o.maxInFlight < 1 || o.maxShards < 1 || o.maxConnections < 1 {
		return o, fmt.Errorf("--max-in-flight=%d, --max-shards=%d and --max-connections=%d must each be at least 1", o.maxInFlight, o.maxShards, o.maxConnections)
	}
	if o.certRotation {
		var missing []string
		for flagName, v := range map[string]string{"--namespace (or $POD_NAMESPACE)": o.namespace, "--cert-secret-name": o.certSecretName,
			"--service-name": o.serviceName, "--webhook-config-name": o.webhookConfigName, "--cert-dir": o.certDir} {
			if v == "" {
				missing = append(missing, flagName)
			}
		}
		if len(missing) > 0 {
			return o, fmt.Errorf("--cert-rotation needs %s", strings.Join(missing, ", "))
		}
	}
	o.shutdownTimeout = 30 * time.Second
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log-level=%q: want debug, info, warn or error", s)
	}
	return l, nil
}

// newLogger returns the JSON logger every component logs through (controller-runtime, client-go
// via klog, the guard). logr verbosity V(n) maps to slog level -n, so debug shows V(1) and up.
func newLogger(w io.Writer, level string) (logr.Logger, *slog.Logger) {
	l, _ := parseLevel(level)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})
	return logr.FromSlogHandler(h), slog.New(h)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" { // the chart's `helm test` (check.go)
		os.Exit(runCheck(context.Background(), os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	o, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ehdb-webhook:", err)
		os.Exit(2)
	}
	log, slogger := newLogger(os.Stderr, o.logLevel)
	reserve := socketReserve(o.maxConnections)
	if n := setSoftMemoryLimit(reserve); n > 0 {
		log.Info("memory: the runtime's soft limit is nine tenths of the container's, less the connections' socket buffers", "softLimitBytes", n, "socketReserveBytes", reserve)
	}
	// The standard library's logger too (net/http reports TLS handshake errors through it).
	slog.SetDefault(slogger)
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		log.Error(err, "cannot reach the API server")
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), o, cfg, log); err != nil {
		log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}
