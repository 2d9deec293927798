package charttest

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestReuseValuesFromThePreviousReleaseRendersTheDefaults: `helm upgrade --reuse-values` from the
// previous release renders this chart with the previous chart's coalesced values in place of this
// chart's values.yaml (helm's pkg/action Upgrade.reuseValues sets chart.Values = the old ones), so
// every key added since is absent. The render must still succeed, pass the schema, and be exactly
// the render of this chart with the old coalesced values given as the user's: each added key at
// this version's default, each old one as the release had it. A key added without an entry in
// _reuse.tpl, or an entry whose default differs from values.yaml, fails here.
func TestReuseValuesFromThePreviousReleaseRendersTheDefaults(t *testing.T) {
	t.Parallel()
	prev := previousChart(t)
	for _, tc := range []struct {
		name   string
		config map[string]any // what the user gave the previous release
	}{
		{"no values", nil},
		{"a mirror", map[string]any{"webhook": map[string]any{"image": map[string]any{"repository": "registry.example/mirror/ehdb-election-webhook"}}}},
		{"old keys set to zero values", map[string]any{
			"writer":  map[string]any{"keepOnUninstall": false},
			"webhook": map[string]any{"replicaCount": 3, "priorityClassName": "", "podDisruptionBudget": map[string]any{"enabled": false}},
			"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, err := chartutil.CoalesceValues(prev, copyValues(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			reused, err := Load()
			if err != nil {
				t.Fatal(err)
			}
			reused.Values = old.AsMap()
			got, err := RenderChart(reused, "ehdb-election", "noetl", tc.config)
			if err != nil {
				t.Fatalf("--reuse-values from %s: %v", prev.Metadata.Version, err)
			}
			want, err := Render("ehdb-election", "noetl", old.AsMap())
			if err != nil {
				t.Fatal(err)
			}
			if got.Manifest != want.Manifest {
				t.Errorf("--reuse-values from %s renders other objects than this chart's defaults under the old values:\n%s", prev.Metadata.Version, lineDiff(want.Manifest, got.Manifest))
			}
			if len(got.Hooks) != len(want.Hooks) || got.Notes != want.Notes {
				t.Errorf("--reuse-values: hooks %d (want %d), notes differ %v", len(got.Hooks), len(want.Hooks), got.Notes != want.Notes)
			}
		})
	}
}

// lineDiff lists the lines only one side has (enough to name a missing default).
func lineDiff(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, "  want: "+l)
		case n < 0:
			out = append(out, "  got:  "+l)
		}
	}
	return strings.Join(out, "\n")
}
