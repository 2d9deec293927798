package election

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"k8s.io/client-go/rest"
)

// serviceAccountNamespaceFile is where a Pod finds its own namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// StartFromEnvironment is a writer's boot path. It parses the environment with ParseConfig (lookup
// is os.LookupEnv in a writer), logs every problem, and either starts the election over the cluster
// that restConfig points at (nil: the in-cluster configuration) or declines. It never returns an
// error and never returns nil: an election that is enabled but cannot run — no shard, no namespace,
// no cluster configuration — logs one line saying why and declines, because a writer that refused
// to start over it would crash-loop the very StatefulSet whose restarts are the risk. Declined or
// disabled, the metrics still render (active=0) and Token is never valid.
func StartFromEnvironment(ctx context.Context, lookup func(string) (string, bool), restConfig *rest.Config, opts Options) *Election {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "ehdb-election")
	lookup = withRuntimeHostname(lookup, runtime.GOOS, os.Hostname)
	cfg, problems := ParseConfig(lookup)
	for _, p := range problems {
		log.Warn("election configuration problem", "problem", p.Error())
	}
	off := func() *Election {
		cfg.Enabled = false
		e, err := Start(ctx, nil, cfg, opts)
		if err != nil {
			log.Error("election metrics not registered", "error", err)
			return newElection(nil, cfg, opts)
		}
		return e
	}
	decline := func(why string) *Election {
		log.Error("election enabled but unable to run; declining (the writer continues without a token)", "reason", why)
		return off()
	}
	if !cfg.Enabled {
		log.Info("election disabled", "variable", EnvElection)
		return off()
	}
	if !cfg.HasShard {
		return decline(fmt.Sprintf("no shard: set %s, or run as a StatefulSet pod whose hostname ends in -<ordinal>", EnvShard))
	}
	if cfg.Namespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
			cfg.Namespace = strings.TrimSpace(string(b))
		}
		if cfg.Namespace == "" {
			return decline(fmt.Sprintf("no namespace: set %s or POD_NAMESPACE (no in-cluster namespace file)", EnvNamespace))
		}
	}
	if restConfig == nil {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return decline(fmt.Sprintf("no in-cluster configuration: %v", err))
		}
		restConfig = rc
	}
	restConfig = rest.CopyConfig(restConfig)
	if restConfig.UserAgent == "" {
		restConfig.UserAgent = "ehdb-election"
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return decline(fmt.Sprintf("building a client: %v", err))
	}
	if opts.Identity == "" {
		host, ok := lookup(electionenv.EnvHostname)
		if host = strings.TrimSpace(host); !ok || host == "" {
			host, _ = os.Hostname()
		}
		opts.Identity = NewIdentity(host)
	}
	e, err := Start(ctx, NewKubeStore(client, cfg.Namespace), cfg, opts)
	if err != nil {
		return decline(err.Error())
	}
	return e
}

// withRuntimeHostname is lookup, with HOSTNAME read from the container's hostname where the
// runtime sets no such variable. Linux runtimes put HOSTNAME in every container's environment
// (containerd's and CRI-O's WithHostname); containerd's Windows containers get none (the
// twenty-fifth red team read its source), so there a writer that takes its shard from its
// hostname would decline while the admission guard, which predicts the Pod's hostname, admits it
// armed. A Windows container's hostname is its Pod's (a HostProcess container's is the node's,
// and it needs the host network, where the guard knows the hostname is not the Pod's).
func withRuntimeHostname(lookup func(string) (string, bool), goos string, hostname func() (string, error)) func(string) (string, bool) {
	if goos != "windows" {
		return lookup
	}
	return func(name string) (string, bool) {
		v, ok := lookup(name)
		if ok || name != electionenv.EnvHostname {
			return v, ok
		}
		h, err := hostname()
		return h, err == nil && h != ""
	}
}
