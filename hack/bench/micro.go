package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// benchmark is one row of the micro-benchmark table: a result of `go test -bench`, or the reason
// there is none (the benchmark does not exist yet, or its package does not build).
type benchmark struct {
	Package     string
	Name        string
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
	Problem     string // non-empty: no figures, and why
}

// microSuite is one `go test -bench` invocation and the benchmarks it must report.
type microSuite struct {
	pkg     string
	pattern string
	want    []string
}

var microSuites = []microSuite{
	{pkg: "./election/", pattern: "BenchmarkToken|BenchmarkTick", want: []string{"BenchmarkToken", "BenchmarkTick"}},
	{pkg: "./webhook/", pattern: "BenchmarkDecide|BenchmarkRBACReviewOfManySubjects", want: []string{"BenchmarkDecide", "BenchmarkRBACReviewOfManySubjects"}},
}

// measureMicro runs the project's micro-benchmarks in the module at root. A missing benchmark or
// a package that does not build is a row saying so, not a failure of the whole report.
func measureMicro(ctx context.Context, root, benchtime string) []benchmark {
	var rows []benchmark
	for _, s := range microSuites {
		args := []string{"test", "-run", "^$", "-bench", s.pattern, "-benchmem", "-count=1"}
		if benchtime != "" {
			args = append(args, "-benchtime="+benchtime)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, s.pkg)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		found := parseBenchmarks(s.pkg, out)
		for _, name := range s.want {
			matched := false
			for _, b := range found {
				if b.Name == name || strings.HasPrefix(b.Name, name+"/") {
					rows, matched = append(rows, b), true
				}
			}
			if matched {
				continue
			}
			problem := "missing: not in the package yet"
			if err != nil {
				problem = fmt.Sprintf("go test failed (%v): %s", err, firstError(out))
			}
			rows = append(rows, benchmark{Package: s.pkg, Name: name, Problem: problem})
		}
	}
	return rows
}

// benchLine matches `BenchmarkName-8   1000   123.4 ns/op   0 B/op   0 allocs/op`.
var benchLine = regexp.MustCompile(`^(Benchmark\S*?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parseBenchmarks(pkg string, out []byte) []benchmark {
	var found []benchmark
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		b := benchmark{Package: pkg, Name: m[1]}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			switch fields[i+1] {
			case "ns/op":
				b.NsPerOp = v
			case "B/op":
				b.BytesPerOp = v
			case "allocs/op":
				b.AllocsPerOp = v
			}
		}
		found = append(found, b)
	}
	return found
}

// firstError is the first compiler error of a failed `go test` (file:line: message), else its last
// line, for a one-line reason in the report.
func firstError(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		if compileError.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

var compileError = regexp.MustCompile(`\.go:\d+(:\d+)?: `)
