// Package charttest renders, installs, upgrades and uninstalls the ehdb-election chart through the
// Helm SDK (helm.sh/helm/v3), the way `helm template`, `helm install`, `helm upgrade` and
// `helm uninstall` do, with no helm binary. The chart's own tests use it, and so can end-to-end tests
// that need the chart in a cluster.
package charttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Name is the chart's name, and the release name that gives the names the webhook's flags default to.
const Name = "ehdb-election"

// KubeVersion is the Kubernetes version rendering and linting assume, the project's pinned minor.
// (Without it the SDK assumes v1.20, which the chart's kubeVersion constraint refuses: a helm binary
// gets its default from the client-go it was built with.)
var KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// Dir returns the absolute path of the chart (charts/ehdb-election), found from this source file so
// that it works from any package's tests.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("charttest: runtime.Caller failed") // only without debug info, which `go test` never strips
	}
	return filepath.Join(filepath.Dir(file), "..", Name)
}

// Load loads the chart from Dir.
func Load() (*chart.Chart, error) {
	ch, err := loader.Load(Dir())
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", Dir(), err)
	}
	return ch, nil
}

// Rendered is the chart rendered for one release.
type Rendered struct {
	// Manifest is the release's manifest as `helm template` prints it (without hooks).
	Manifest string
	// Objects are the release's objects in Helm's install order.
	Objects []*unstructured.Unstructured
	// Hooks are the hook objects (not part of the release's managed objects).
	Hooks []*unstructured.Unstructured
	// Notes is the rendered NOTES.txt.
	Notes string
}

// Find returns the release object (not hook) of that kind and name, or nil.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns the release objects (not hooks) of that kind.
func (r *Rendered) OfKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Render renders the chart exactly as `helm template <release> <chart> -n <namespace>` would with
// the given values (merged over values.yaml, validated against values.schema.json): client-only,
// against Helm's default capabilities. A schema violation or a template `fail` is an error.
func Render(releaseName, namespace string, values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	return RenderChart(ch, releaseName, namespace, values)
}

// RenderChart is Render for an already loaded chart.
func RenderChart(ch *chart.Chart, releaseName, namespace string, values map[string]any) (*Rendered, error) {
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.DryRunOption = true, "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = namespace
	inst.KubeVersion = KubeVersion
	rel, err := inst.Run(ch, copyValues(values))
	if err != nil {
		return nil, fmt.Errorf("rendering %s for release %s in %s: %w", ch.Name(), releaseName, namespace, err)
	}
	return fromRelease(rel)
}

func fromRelease(rel *release.Release) (*Rendered, error) {
	objs, err := Decode(rel.Manifest)
	if err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	r := &Rendered{Manifest: rel.Manifest, Objects: objs}
	if rel.Info != nil {
		r.Notes = rel.Info.Notes
	}
	for _, h := range rel.Hooks {
		hs, err := Decode(h.Manifest)
		if err != nil {
			return nil, fmt.Errorf("hook %s: %w", h.Path, err)
		}
		r.Hooks = append(r.Hooks, hs...)
	}
	return r, nil
}

// Decode splits a multi-document YAML manifest into objects, skipping empty documents.
func Decode(manifest string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// copyValues deep-copies values: Helm's coalescing writes into the map it is given.
func copyValues(v map[string]any) map[string]any {
	if v == nil {
		return map[string]any{}
	}
	return deepCopy(v)
}

func deepCopy(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, x := range v {
		switch t := x.(type) {
		case map[string]any:
			out[k] = deepCopy(t)
		case []any:
			s := make([]any, len(t))
			for i, e := range t {
				if m, ok := e.(map[string]any); ok {
					s[i] = deepCopy(m)
				} else {
					s[i] = e
				}
			}
			out[k] = s
		default:
			out[k] = x
		}
	}
	return out
}

// Client runs Helm actions against the cluster of a kubeconfig, in one namespace, storing releases
// as Secrets (Helm's default driver).
type Client struct {
	namespace string
	cfg       *action.Configuration
	// Timeout bounds hooks (the pre-delete hook waits for the webhook configuration to be deleted).
	Timeout time.Duration
}

// NewClient returns a Client for the namespace. cacheDir holds discovery caches (use a temporary
// folder in tests, never the user's ~/.kube). logf receives Helm's debug log; nil discards it.
func NewClient(kubeconfig, namespace, cacheDir string, logf func(format string, args ...any)) (*Client, error) {
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
	return &Client{namespace: namespace, cfg: cfg, Timeout: 2 * time.Minute}, nil
}

// Install installs the chart as release name. It does not wait for readiness (a local control plane
// has no kubelet; the webhook's Pods stay Pending).
func (c *Client) Install(ctx context.Context, name string, values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
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
func (c *Client) Upgrade(ctx context.Context, name string, values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(c.cfg)
	up.Namespace = c.namespace
	up.Timeout = c.Timeout
	rel, err := up.RunWithContext(ctx, name, ch, copyValues(values))
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s in %s: %w", name, c.namespace, err)
	}
	return fromRelease(rel)
}

// Uninstall uninstalls release name; disableHooks is `helm uninstall --no-hooks`.
func (c *Client) Uninstall(name string, disableHooks bool) error {
	un := action.NewUninstall(c.cfg)
	un.DisableHooks = disableHooks
	un.Timeout = c.Timeout
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s in %s: %w", name, c.namespace, err)
	}
	return nil
}

// Lint runs Helm's linter over the chart with values, in strict mode (`helm lint --strict`: warnings
// are failures), against Helm's default capabilities. It returns every message at warning level or
// above; an empty result is a clean lint.
func Lint(namespace string, values map[string]any) []string {
	l := action.NewLint()
	l.Strict = true
	l.Namespace = namespace
	l.KubeVersion = KubeVersion
	res := l.Run([]string{Dir()}, copyValues(values))
	var msgs []string
	for _, m := range res.Messages {
		if m.Severity >= 2 { // support.WarningSev; INFO (e.g. "icon is recommended") is not a failure
			msgs = append(msgs, m.Error())
		}
	}
	for _, err := range res.Errors {
		msgs = append(msgs, err.Error())
	}
	return msgs
}

// UninstallOrder lists a manifest's objects ("Kind/name") in the order `helm uninstall` deletes them
// (releaseutil.UninstallOrder; kinds Helm does not know come last).
func UninstallOrder(manifest string) ([]string, error) {
	_, files, err := releaseutil.SortManifests(releaseutil.SplitManifests(manifest), nil, releaseutil.UninstallOrder)
	if err != nil {
		return nil, err
	}
	var order []string
	for _, f := range files {
		order = append(order, f.Head.Kind+"/"+f.Head.Metadata.Name)
	}
	return order, nil
}

// ValuesFile reads a values file of the chart (e.g. "ci/full-values.yaml") into a map.
func ValuesFile(rel string) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(filepath.Join(Dir(), rel))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	return v.AsMap(), nil
}

// CIValuesFiles lists the chart's ci/*-values.yaml scenarios (paths relative to the chart).
func CIValuesFiles() ([]string, error) {
	m, err := filepath.Glob(filepath.Join(Dir(), "ci", "*-values.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		out = append(out, filepath.Join("ci", filepath.Base(p)))
	}
	return out, nil
}
