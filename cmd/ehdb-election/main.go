// Command ehdb-election is the operator's CLI for the shard election. Its one command, status,
// shows every ehdb-shard-* Lease of a namespace: who holds it, with which epoch, and whether it is
// live by the rule the writers and the admission webhook use.
//
// Installed as kubectl-ehdb_election on the PATH it is also a kubectl plugin:
//
//	go build -o ~/bin/kubectl-ehdb_election ./cmd/ehdb-election
//	kubectl ehdb-election status -n noetl
//	kubectl ehdb-election status -A --watch
//
// README.md beside this file documents the flags, the JSON fields and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Ctrl-C (or SIGTERM) ends a --watch cleanly, exit 0.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
