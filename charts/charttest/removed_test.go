package charttest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart"
	"sigs.k8s.io/yaml"
)

// removedValue is one entry of the chart's removed-values.yaml.
type removedValue struct {
	Key       string `json:"key"`
	RemovedIn string `json:"removedIn"`
	Instead   string `json:"instead,omitempty"`
}

// removedValues reads removed-values.yaml from the chart, the one list NOTES and this test share.
func removedValues(t *testing.T, ch *chart.Chart) []removedValue {
	t.Helper()
	for _, f := range ch.Files {
		if f.Name == "removed-values.yaml" {
			var doc struct {
				Removed []removedValue `json:"removed"`
			}
			if err := yaml.UnmarshalStrict(f.Data, &doc); err != nil {
				t.Fatalf("removed-values.yaml: %v", err)
			}
			return doc.Removed
		}
	}
	t.Fatal("the chart has no removed-values.yaml")
	return nil
}

// valuePaths lists the dotted path of every key of a values tree, maps included.
func valuePaths(prefix string, v map[string]any) []string {
	var out []string
	for k, x := range v {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, p)
		if m, ok := x.(map[string]any); ok {
			out = append(out, valuePaths(p, m)...)
		}
	}
	slices.Sort(out)
	return out
}

// schemaNode is what the chart's schema says of a dotted values path: the node, and whether the
// path lies under a free-form map (a node without closed properties, such as podAnnotations or a
// Kubernetes type's map field), where any key is a user's and none is the chart's to remove.
func schemaNode(t *testing.T, schema map[string]any, path string) (node map[string]any, freeForm bool) {
	t.Helper()
	node = schema
	for _, k := range strings.Split(path, ".") {
		node = resolveRef(t, schema, node)
		props, _ := node["properties"].(map[string]any)
		if props == nil || node["additionalProperties"] != false {
			if next, ok := props[k].(map[string]any); ok {
				node = next
				continue
			}
			return nil, true
		}
		next, ok := props[k].(map[string]any)
		if !ok {
			return nil, false
		}
		node = next
	}
	return resolveRef(t, schema, node), false
}

func resolveRef(t *testing.T, schema, node map[string]any) map[string]any {
	t.Helper()
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		defs, _ := schema["definitions"].(map[string]any)
		next, found := defs[name].(map[string]any)
		if !ok || !found {
			t.Fatalf("schema: unresolvable $ref %q", ref)
		}
		node = next
	}
}

// TestRemovedValues (issue 18): a values key the chart removes stays accepted for the minor version
// that removes it, with a warning, so that `helm upgrade --reuse-values` from the previous release
// (whose values carry the key at its old default) and old values files keep working through one
// upgrade. Every key of the previous release's values.yaml is still in this chart's, or listed in
// removed-values.yaml; each listed key is gone from values.yaml, accepted by the schema (a property
// marked "deprecated": true), removed in this minor version (the next one drops the entry), and
// warned about in NOTES when set.
func TestRemovedValues(t *testing.T) {
	prev := previousChart(t)
	cur, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(cur.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	removed := removedValues(t, cur)
	listed := map[string]removedValue{}
	for _, r := range removed {
		listed[r.Key] = r
	}
	have := valuePaths("", cur.Values)
	for _, p := range valuePaths("", prev.Values) {
		if slices.Contains(have, p) {
			continue
		}
		if _, freeForm := schemaNode(t, schema, p); freeForm {
			continue
		}
		if _, ok := listed[p]; !ok {
			t.Errorf("values key %s of chart %s is gone: list it in removed-values.yaml (removedIn %s) and keep a schema property for it marked deprecated, for this minor version",
				p, prev.Metadata.Version, cur.Metadata.Version)
		}
	}

	version, err := semver.NewVersion(cur.Metadata.Version)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range removed {
		for _, p := range removedValueProblems(t, cur, schema, version, have, r) {
			t.Error(p)
		}
	}
}

// removedValueProblems checks one entry of removed-values.yaml against the chart: what is wrong
// with it, none when it is accepted, warned about and of this minor version.
func removedValueProblems(t *testing.T, ch *chart.Chart, schema map[string]any, version *semver.Version, have []string, r removedValue) []string {
	t.Helper()
	var out []string
	if slices.Contains(have, r.Key) {
		out = append(out, fmt.Sprintf("%s is listed as removed but is still in values.yaml", r.Key))
	}
	in, err := semver.NewVersion(r.RemovedIn)
	if err != nil {
		return append(out, fmt.Sprintf("%s: removedIn %q: %v", r.Key, r.RemovedIn, err))
	}
	if in.Major() != version.Major() || in.Minor() != version.Minor() {
		out = append(out, fmt.Sprintf("%s was removed in %s and chart %s still accepts it: a removed key is tolerated for one minor version; drop it from removed-values.yaml and the schema", r.Key, in, version))
	}
	node, _ := schemaNode(t, schema, r.Key)
	if node == nil || node["deprecated"] != true {
		return append(out, fmt.Sprintf("%s: values.schema.json has no property for it marked \"deprecated\": true, so the schema refuses it", r.Key))
	}
	parts := strings.Split(r.Key, ".")
	values := map[string]any{parts[len(parts)-1]: "an old value"}
	for i := len(parts) - 2; i >= 0; i-- {
		values = map[string]any{parts[i]: values}
	}
	got, err := RenderChart(ch, Name, testNS, values)
	if err != nil {
		return append(out, fmt.Sprintf("%s set: the chart refuses it: %v", r.Key, err))
	}
	if want := "WARNING: " + r.Key + " was removed in chart " + r.RemovedIn; !strings.Contains(got.Notes, want) {
		out = append(out, fmt.Sprintf("%s set: NOTES do not warn (%q):\n%s", r.Key, want, got.Notes))
	}
	return out
}

// TestRemovedValueMachinery: the machinery TestRemovedValues relies on, on a key removed for the
// test (the chart has none removed today): with its entry and deprecated schema property the chart
// accepts the key and NOTES warn; unset, nothing is said; without the property the schema refuses
// it (so the property is what tolerates it); an entry from an older minor version is flagged.
func TestRemovedValueMachinery(t *testing.T) {
	ch, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	version, err := semver.NewVersion(ch.Metadata.Version)
	if err != nil {
		t.Fatal(err)
	}
	key := removedValue{Key: "webhook.retiredKnob", RemovedIn: version.String(), Instead: "set webhook.timeoutSeconds"}
	withEntry := func(ch *chart.Chart, r removedValue) {
		for _, f := range ch.Files {
			if f.Name == "removed-values.yaml" {
				f.Data = []byte(fmt.Sprintf("removed:\n  - key: %s\n    removedIn: %s\n    instead: %s\n", r.Key, r.RemovedIn, r.Instead))
			}
		}
	}
	var schema map[string]any
	if err := json.Unmarshal(ch.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	webhook := schema["properties"].(map[string]any)["webhook"].(map[string]any)["properties"].(map[string]any)
	set := map[string]any{"webhook": map[string]any{"retiredKnob": 3}}

	// Without the schema property: refused.
	withEntry(ch, key)
	if _, err := RenderChart(ch, Name, testNS, set); err == nil {
		t.Error("a key with no schema property was accepted: the schema no longer closes webhook's properties")
	}
	webhook["retiredKnob"] = map[string]any{"deprecated": true, "description": "Removed in " + key.RemovedIn + ": ignored."}
	if ch.Schema, err = json.Marshal(schema); err != nil {
		t.Fatal(err)
	}
	for _, p := range removedValueProblems(t, ch, schema, version, valuePaths("", ch.Values), key) {
		t.Error(p)
	}
	got, err := RenderChart(ch, Name, testNS, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got.Notes, "WARNING: webhook.retiredKnob") {
		t.Errorf("NOTES warn of a removed key nobody set:\n%s", got.Notes)
	}

	// An entry from an older minor version is flagged for removal.
	old := key
	old.RemovedIn = fmt.Sprintf("%d.%d.0", version.Major()+1, 0)
	if version.Minor() > 0 {
		old.RemovedIn = fmt.Sprintf("%d.%d.0", version.Major(), version.Minor()-1)
	}
	withEntry(ch, old)
	problems := removedValueProblems(t, ch, schema, version, valuePaths("", ch.Values), old)
	if len(problems) != 1 || !strings.Contains(problems[0], "tolerated for one minor version") {
		t.Errorf("an entry removed in %s, in chart %s: problems %q, want the one-minor-version rule", old.RemovedIn, version, problems)
	}
}
