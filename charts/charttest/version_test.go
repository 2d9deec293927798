package charttest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/repo"
)

// The chart's version policy (issue 18): the version is semver; any change under charts/ehdb-election
// relative to main raises it above main's, and CHANGELOG.md's newest entry is that version.

// versionPolicy judges a chart version against the base's: changed says whether the chart's files
// differ from the base's.
func versionPolicy(base, current string, changed bool) error {
	cur, err := version.ParseSemantic(current)
	if err != nil {
		return fmt.Errorf("chart version %q is not semver: %w", current, err)
	}
	if !changed {
		return nil
	}
	b, err := version.ParseSemantic(base)
	if err != nil {
		return fmt.Errorf("the base's chart version %q is not semver: %w", base, err)
	}
	if !b.LessThan(cur) {
		return fmt.Errorf("charts/ehdb-election changed but its version %s is not above main's %s: bump version in Chart.yaml (semver: patch for fixes, minor for new values or behaviour, major for removals) and add a CHANGELOG.md entry", current, base)
	}
	return nil
}

func TestVersionPolicyRule(t *testing.T) {
	for _, tc := range []struct {
		base, cur string
		changed   bool
		ok        bool
	}{
		{"0.1.0", "0.1.0", false, true},
		{"0.1.0", "0.1.0", true, false},
		{"0.1.0", "0.1.1", true, true},
		{"0.1.0", "0.2.0", true, true},
		{"0.2.0", "0.1.9", true, false},
		{"0.1.0", "v0.2", true, false},
		{"0.1.0", "0.2.0-rc.1", true, true},
	} {
		if err := versionPolicy(tc.base, tc.cur, tc.changed); (err == nil) != tc.ok {
			t.Errorf("base %s, current %s, changed %v: err = %v, want ok %v", tc.base, tc.cur, tc.changed, err, tc.ok)
		}
	}
}

func git(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// TestChartVersionPolicy applies the rule to this checkout against main (its merge base with HEAD,
// working-tree changes included), and checks the CHANGELOG's newest entry.
func TestChartVersionPolicy(t *testing.T) {
	ch, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	chartVersion := ch.Metadata.Version
	dir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	sc := bufio.NewScanner(bytes.NewReader(log))
	entry := regexp.MustCompile(`^## (\S+)`)
	for sc.Scan() {
		if m := entry.FindStringSubmatch(sc.Text()); m != nil {
			newest = m[1]
			break
		}
	}
	if newest != chartVersion {
		t.Errorf("CHANGELOG.md's newest entry is %q, the chart's version %q", newest, chartVersion)
	}

	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	base, err := git(t, root, "merge-base", "HEAD", "main")
	if err != nil {
		t.Skipf("no main to compare with (%v): the version policy needs the main branch", err)
	}
	_, diffErr := git(t, root, "diff", "--quiet", base, "--", "charts/ehdb-election")
	changed := diffErr != nil
	baseVersion := chartVersion
	if changed {
		raw, err := git(t, root, "show", base+":charts/ehdb-election/Chart.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Version string `json:"version"`
		}
		if err := yaml.Unmarshal([]byte(raw), &meta); err != nil {
			t.Fatal(err)
		}
		baseVersion = meta.Version
	}
	if err := versionPolicy(baseVersion, chartVersion, changed); err != nil {
		t.Error(err)
	}
}
