package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/noetl/ehdb-election/cmd/ehdb-election/internal/status"
)

// run is the CLI: argv is the full command line (argv[0] is how we were invoked, which names us
// in usage: "kubectl ehdb-election" when run as a kubectl plugin). A --watch lasts until ctx ends.
// It returns the exit code.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	name := "ehdb-election"
	if len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "kubectl-") {
		name = "kubectl ehdb-election"
	}
	var args []string
	if len(argv) > 1 {
		args = argv[1:]
	}
	if len(args) == 0 {
		usage(stderr, name)
		return status.ExitUsage
	}
	switch args[0] {
	case "status":
		return status.Run(ctx, args[1:], stdout, stderr, status.Options{Name: name})
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "error: version takes no arguments\n")
			return status.ExitUsage
		}
		readBuildInfo(debug.ReadBuildInfo, version, commit).write(stdout, "ehdb-election")
		return status.ExitOK
	case "completion":
		if len(args) != 2 {
			fmt.Fprintf(stderr, "error: completion needs a shell: %s completion bash|zsh|fish\n", name)
			return status.ExitUsage
		}
		script, err := completionScript(args[1], "ehdb-election")
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return status.ExitUsage
		}
		fmt.Fprint(stdout, script)
		return status.ExitOK
	case "__complete": // the completion scripts' (and kubectl's) protocol; not in the usage
		writeCandidates(stdout, args[1:])
		return status.ExitOK
	case "help", "-h", "--help":
		usage(stdout, name)
		return status.ExitOK
	}
	fmt.Fprintf(stderr, "error: unknown command %q\n", args[0])
	usage(stderr, name)
	return status.ExitUsage
}

func usage(w io.Writer, name string) {
	fmt.Fprintf(w, `Usage: %[1]s <command> [flags]

Commands:
  status       every ehdb-shard-* Lease of a namespace (-A: of all): shard, holder, epoch, renewed,
               expires, live/expired/released judged on the API server's clock; --watch keeps it open
  version      the release version, commit and Go toolchain this binary was built from
  completion   a shell completion script: bash, zsh or fish (e.g. source <(ehdb-election completion bash))

Run '%[1]s status --help' for its flags.
`, name)
}
