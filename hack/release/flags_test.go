package main

import (
	"context"
	"strings"
	"testing"
)

// A flag a command does not read is refused, never ignored (issue 18's adoption: `push -repo
// <mirror>` was accepted and pushed to the repository the archive was built for).
func TestUnusedFlagsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"push", []string{"-repo", "mirror.example/x", "-archive", "images.tar"}, "release push does not take -repo"},
		{"push", []string{"-tag", "v1", "-archive", "images.tar"}, "does not take -tag"},
		{"build", []string{"-tag", "v1", "-out", "dist"}, "release build does not take -tag"},
		{"check-chart", []string{"-repo", "x"}, "does not take -repo"},
	} {
		err := run(context.Background(), tc.cmd, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("release %s %v: %v, want an error saying %q", tc.cmd, tc.args, err, tc.want)
		}
	}
}
