package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release version, stamped at build time: `make build` passes
// -ldflags "-X main.version=<the chart's appVersion>". Empty in a plain `go build`.
var version = ""

// commit is the git commit, stamped with the version (-X main.commit=...): a build with
// -buildvcs=false records no vcs.revision of its own.
var commit = ""

// buildInfo is what `version` prints: the release version and what the Go toolchain recorded.
type buildInfo struct {
	Version   string // the stamped release, else the module version (`go install ...@v0.2.0`), else "dev"
	Module    string
	Revision  string // vcs.revision, when built in a git checkout
	Time      string // vcs.time
	Modified  bool   // vcs.modified: built from a tree with uncommitted changes
	GoVersion string
	Platform  string
}

// readBuildInfo combines the stamped version with the binary's build information (read is
// runtime/debug.ReadBuildInfo; tests pass their own).
func readBuildInfo(read func() (*debug.BuildInfo, bool), stamped, stampedCommit string) buildInfo {
	b := buildInfo{Version: stamped, Revision: stampedCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := read()
	if ok && bi != nil {
		b.Module, b.GoVersion = bi.Main.Path, bi.GoVersion
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

func (b buildInfo) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, b.Version)
	if b.Module != "" {
		fmt.Fprintf(w, "  module    %s\n", b.Module)
	}
	if b.Revision != "" {
		mod := ""
		if b.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(w, "  commit    %s%s\n", b.Revision, mod)
	}
	if b.Time != "" {
		fmt.Fprintf(w, "  committed %s\n", b.Time)
	}
	fmt.Fprintf(w, "  go        %s %s\n", b.GoVersion, b.Platform)
}
