package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// The chart version policy, checked by `make lint` on any clone (no tags needed): the file
// charts/ehdb-election.sum records, per chart version, a hash of everything `helm package` would
// ship except Chart.yaml's version line. A chart whose contents differ from the hash recorded for
// its version was changed without a version bump.

// versionLine is Chart.yaml's version field, left out of the hash: bumping it is the change the
// policy asks for, not one it should see.
var versionLine = regexp.MustCompile(`(?m)^version:.*$`)

// chartState is a chart directory's version and content hash.
type chartState struct {
	Version *semver.Version
	Sum     string
}

// readChart hashes the files Helm loads from the chart directory (.helmignore applies), sorted by
// name, each as name, length and bytes.
func readChart(dir string) (chartState, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return chartState{}, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	v, err := semver.StrictNewVersion(c.Metadata.Version)
	if err != nil {
		return chartState{}, fmt.Errorf("chart %s: version %q is not semver (MAJOR.MINOR.PATCH): %w", dir, c.Metadata.Version, err)
	}
	files := c.Raw
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	h := sha256.New()
	for _, f := range files {
		data := f.Data
		if f.Name == "Chart.yaml" {
			data = versionLine.ReplaceAll(data, []byte("version:"))
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f.Name, len(data))
		h.Write(data)
	}
	return chartState{Version: v, Sum: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// sumFile is the recorded versions: "VERSION SUM" lines, oldest first.
type sumFile []chartState

func readSums(path string) (sumFile, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out sumFile
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[1], "sha256:") {
			return nil, fmt.Errorf("%s:%d: want `VERSION sha256:HEX`, got %q", path, n, line)
		}
		v, err := semver.StrictNewVersion(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, chartState{Version: v, Sum: f[1]})
	}
	return out, sc.Err()
}

func (s sumFile) find(v *semver.Version) (chartState, bool) {
	for _, e := range s {
		if e.Version.Equal(v) {
			return e, true
		}
	}
	return chartState{}, false
}

func (s sumFile) highest() *semver.Version {
	var hi *semver.Version
	for _, e := range s {
		if hi == nil || e.Version.GreaterThan(hi) {
			hi = e.Version
		}
	}
	return hi
}

// changelogHas reports whether the changelog has a "## VERSION" heading (text may follow it).
func changelogHas(changelog []byte, v *semver.Version) bool {
	re := regexp.MustCompile(`(?m)^## \[?` + regexp.QuoteMeta(v.String()) + `\]?(\s|$)`)
	return re.Match(changelog)
}

// checkChart is the lint rule: the chart's version is recorded with its current contents, is the
// highest recorded, and has a CHANGELOG section. The error says what to do.
func checkChart(cur chartState, sums sumFile, changelog []byte) error {
	rec, ok := sums.find(cur.Version)
	switch {
	case !ok:
		return fmt.Errorf("chart version %s is not recorded in the sum file: add a `## %s` section to CHANGELOG.md (with upgrade notes), then run `make chart-lock`", cur.Version, cur.Version)
	case rec.Sum != cur.Sum:
		return fmt.Errorf("the chart changed since version %s was recorded, and its version was not bumped: raise `version` in Chart.yaml (semver: MAJOR for a breaking values or behaviour change, MINOR for a new feature, PATCH for a fix), add a `## <new version>` section to CHANGELOG.md with upgrade notes, then run `make chart-lock`", cur.Version)
	case !cur.Version.Equal(sums.highest()):
		return fmt.Errorf("chart version %s is older than the highest recorded version %s", cur.Version, sums.highest())
	case !changelogHas(changelog, cur.Version):
		return fmt.Errorf("CHANGELOG.md has no `## %s` section", cur.Version)
	}
	return nil
}

// lockChart records the chart's version and contents, refusing to move a recorded version's hash
// (that is a change without a bump) or to record a version lower than one already there.
func lockChart(cur chartState, sums sumFile, changelog []byte) (sumFile, error) {
	if rec, ok := sums.find(cur.Version); ok {
		if rec.Sum == cur.Sum {
			return sums, nil
		}
		return nil, fmt.Errorf("version %s is already recorded with other contents: bump `version` in Chart.yaml first", cur.Version)
	}
	if hi := sums.highest(); hi != nil && !cur.Version.GreaterThan(hi) {
		return nil, fmt.Errorf("version %s is not above the highest recorded version %s", cur.Version, hi)
	}
	if !changelogHas(changelog, cur.Version) {
		return nil, fmt.Errorf("CHANGELOG.md has no `## %s` section: write the upgrade notes first", cur.Version)
	}
	return append(append(sumFile(nil), sums...), cur), nil
}

func (s sumFile) bytes() []byte {
	var b bytes.Buffer
	b.WriteString("# Chart version policy (make lint): VERSION and the hash of the chart's contents without its\n# version line. Written by `make chart-lock`; a changed chart needs a new version. Oldest first.\n")
	for _, e := range s {
		fmt.Fprintf(&b, "%s %s\n", e.Version, e.Sum)
	}
	return b.Bytes()
}
