// Package charttest renders and lints the ehdb-election chart through the Helm SDK
// (helm.sh/helm/v3) exactly as `helm template` and `helm lint --strict` do, with no helm binary, and
// holds the chart's tests: rendered-object assertions, and installs, upgrades and uninstalls
// against a real API server (internal/testcluster).
package charttest

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/noetl/ehdb-election/internal/chartinstall"
)

// Name is the chart's name, and the release name that gives the names the webhook's flags default to.
const Name = "ehdb-election"

// KubeVersion is the Kubernetes version rendering and linting assume, the project's pinned one.
// (Without it the SDK assumes v1.20, which the chart's kubeVersion constraint refuses: a helm binary
// gets its default from the client-go it was built with.)
const KubeVersion = "v1.37.2"

func kubeVersion() *chartutil.KubeVersion {
	return &chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "37"}
}

// Load loads the chart from charts/ehdb-election in this repository.
func Load() (*chart.Chart, error) {
	dir, err := chartinstall.ChartDir()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
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
	inst.KubeVersion = kubeVersion()
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

// Lint runs Helm's linter over the chart with values, in strict mode (`helm lint --strict`: warnings
// are failures), for KubeVersion. It returns every message at warning level or above; an empty
// result is a clean lint.
func Lint(namespace string, values map[string]any) ([]string, error) {
	dir, err := chartinstall.ChartDir()
	if err != nil {
		return nil, err
	}
	l := action.NewLint()
	l.Strict = true
	l.Namespace = namespace
	l.KubeVersion = kubeVersion()
	res := l.Run([]string{dir}, copyValues(values))
	var msgs []string
	for _, m := range res.Messages {
		if m.Severity >= 2 { // support.WarningSev; INFO (e.g. "icon is recommended") is not a failure
			msgs = append(msgs, m.Error())
		}
	}
	for _, err := range res.Errors {
		msgs = append(msgs, err.Error())
	}
	return msgs, nil
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
	dir, err := chartinstall.ChartDir()
	if err != nil {
		return nil, err
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(dir, rel))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	return v.AsMap(), nil
}

// CIValuesFiles lists the chart's ci/*-values.yaml scenarios (paths relative to the chart).
func CIValuesFiles() ([]string, error) {
	dir, err := chartinstall.ChartDir()
	if err != nil {
		return nil, err
	}
	m, err := filepath.Glob(filepath.Join(dir, "ci", "*-values.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		out = append(out, filepath.Join("ci", filepath.Base(p)))
	}
	return out, nil
}
