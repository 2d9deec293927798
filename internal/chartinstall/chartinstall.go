// Package chartinstall installs, upgrades and uninstalls the project's Helm chart through the Helm
// SDK, as `helm install` would, so the demo, the benchmarks and the system suite need no helm
// binary and exercise exactly the manifests an operator gets.
package chartinstall

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/noetl/ehdb-election/internal/repo"
)

// Client manages releases of the chart in one namespace.
type Client struct {
	cfg       *action.Configuration
	chart     *chart.Chart
	namespace string
}

// New loads the chart from chartDir (see ChartDir) and connects with the kubeconfig at path.
func New(kubeconfig, namespace, chartDir string, log *slog.Logger) (*Client, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", chartDir, err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	debug := func(format string, v ...any) { log.Debug(fmt.Sprintf(format, v...), "component", "helm") }
	if err := cfg.Init(flags, namespace, "secret", debug); err != nil {
		return nil, fmt.Errorf("initialising helm for namespace %s: %w", namespace, err)
	}
	return &Client{cfg: cfg, chart: chrt, namespace: namespace}, nil
}

// Install installs a release (creating the namespace if needed) and returns once every object
// is accepted by the API server. It does not wait for Pods: callers decide what ready means.
func (c *Client) Install(ctx context.Context, name string, values map[string]any) (*release.Release, error) {
	in := action.NewInstall(c.cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = name, c.namespace, true
	in.Timeout = 2 * time.Minute
	rel, err := in.RunWithContext(ctx, c.chart, values)
	if err != nil {
		return nil, fmt.Errorf("helm install %s -n %s: %w", name, c.namespace, err)
	}
	return rel, nil
}

// Upgrade upgrades the release with the given values (not reusing the old ones, like helm's default).
func (c *Client) Upgrade(ctx context.Context, name string, values map[string]any) (*release.Release, error) {
	up := action.NewUpgrade(c.cfg)
	up.Namespace, up.Timeout = c.namespace, 2*time.Minute
	rel, err := up.RunWithContext(ctx, name, c.chart, values)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s -n %s: %w", name, c.namespace, err)
	}
	return rel, nil
}

// Uninstall removes the release, running its hooks, and waits for the deletions to be accepted.
func (c *Client) Uninstall(name string) error {
	un := action.NewUninstall(c.cfg)
	un.Timeout = 2 * time.Minute
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s -n %s: %w", name, c.namespace, err)
	}
	return nil
}

// Test is `helm test <name>`: it runs the release's test hooks and waits for their Pods to
// finish. When the test fails it writes the test Pods' logs to logs (the chart's test hooks are
// deleted when they pass, so there is nothing to read then).
func (c *Client) Test(name string, logs io.Writer) error {
	t := action.NewReleaseTesting(c.cfg)
	t.Namespace, t.Timeout = c.namespace, 3*time.Minute
	rel, err := t.Run(name)
	if err != nil {
		if rel != nil {
			if lerr := t.GetPodLogs(logs, rel); lerr != nil {
				fmt.Fprintf(logs, "(no logs: %v)\n", lerr)
			}
		}
		return fmt.Errorf("helm test %s -n %s: %w", name, c.namespace, err)
	}
	return nil
}

// ChartDir is charts/ehdb-election in this repository.
func ChartDir() (string, error) { return repo.Path("charts", "ehdb-election") }
