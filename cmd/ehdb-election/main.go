// Command ehdb-election is the operator's CLI for the shard election. Its one command, status,
// shows every ehdb-shard-* Lease of a namespace: who holds it, with which epoch, and whether it is
// live by the rule the writers and the admission webhook use.
//
// Installed as kubectl-ehdb_election on the PATH it is also a kubectl plugin:
//
//	go build -o ~/bin/kubectl-ehdb_election ./cmd/ehdb-election
//	kubectl ehdb-election status -n noetl
//
// README.md beside this file documents the flags, the JSON fields and the exit codes.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}
