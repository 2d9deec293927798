package charttest

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The test's own Helm driver. internal/chartinstall drives the same SDK for the demo and the system
// suite; the chart's tests also need `helm uninstall --no-hooks` (the control of the uninstall-order
// test), a discovery cache outside $HOME, and the rendered objects of each install and upgrade.

// helmClient runs Helm actions against the cluster of a kubeconfig, in one namespace, storing releases
// as Secrets (Helm's default driver).
type helmClient struct {
	namespace string
	cfg       *action.Configuration
	// Timeout bounds hooks (the pre-delete hook waits for the webhook configuration to be deleted).
	Timeout time.Duration
}

// newHelmClient returns a helmClient for the namespace. cacheDir holds discovery caches (use a temporary
// folder in tests, never the user's ~/.kube). logf receives Helm's debug log; nil discards it.
func newHelmClient(kubeconfig, namespace, cacheDir string, logf func(format string, args ...any)) (*helmClient, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	flags.CacheDir = &cacheDir
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("initialising helm for namespace %s: %w", namespace, err)
	}
	return &helmClient{namespace: namespace, cfg: cfg, Timeout: 2 * time.Minute}, nil
}

// Install installs the chart as release name. It does not wait for readiness (a local control plane
// has no kubelet; the webhook's Pods stay Pending).
func (c *helmClient) Install(ctx context.Context, name string, values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	return c.InstallChart(ctx, ch, name, values)
}

// InstallChart installs the given chart (e.g. a previous version) as release name.
func (c *helmClient) InstallChart(ctx context.Context, ch *chart.Chart, name string, values map[string]any) (*Rendered, error) {
	inst := action.NewInstall(c.cfg)
	inst.ReleaseName = name
	inst.Namespace = c.namespace
	inst.Timeout = c.Timeout
	rel, err := inst.RunWithContext(ctx, ch, copyValues(values))
	if err != nil {
		return nil, fmt.Errorf("helm install %s in %s: %w", name, c.namespace, err)
	}
	return fromRelease(rel)
}

// Upgrade upgrades release name to the chart with values (not reusing the previous values, as
// `helm upgrade` without --reuse-values).
func (c *helmClient) Upgrade(ctx context.Context, name string, values map[string]any) (*Rendered, error) {
	return c.upgrade(ctx, name, values, false)
}

// UpgradeForce is `helm upgrade --force`: Helm replaces (PUT) every object with its rendering
// instead of patching the difference.
func (c *helmClient) UpgradeForce(ctx context.Context, name string, values map[string]any) (*Rendered, error) {
	return c.upgrade(ctx, name, values, true)
}

func (c *helmClient) upgrade(ctx context.Context, name string, values map[string]any, force bool) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(c.cfg)
	up.Namespace = c.namespace
	up.Timeout = c.Timeout
	up.Force = force
	rel, err := up.RunWithContext(ctx, name, ch, copyValues(values))
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s in %s: %w", name, c.namespace, err)
	}
	return fromRelease(rel)
}

// Uninstall uninstalls release name; disableHooks is `helm uninstall --no-hooks`.
func (c *helmClient) Uninstall(name string, disableHooks bool) error {
	un := action.NewUninstall(c.cfg)
	un.DisableHooks = disableHooks
	un.Timeout = c.Timeout
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s in %s: %w", name, c.namespace, err)
	}
	return nil
}

// Rollback is `helm rollback <name> <revision>` (0: the previous revision), with --force as given.
func (c *helmClient) Rollback(name string, revision int, force bool) error {
	rb := action.NewRollback(c.cfg)
	rb.Version = revision
	rb.Force = force
	rb.Timeout = c.Timeout
	if err := rb.Run(name); err != nil {
		return fmt.Errorf("helm rollback %s %d (force %v) in %s: %w", name, revision, force, c.namespace, err)
	}
	return nil
}
