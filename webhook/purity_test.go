package webhook

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// The judgement files are pure: they import nothing that talks to the API server or serves HTTP,
// so every decision is a function of its inputs and can be tested without a cluster.
func TestJudgementFilesArePure(t *testing.T) {
	pure := []string{
		"access.go", "analysis.go", "decide.go", "decision.go", "election.go", "env.go", "expand.go",
		"input.go", "kinds.go", "lease.go", "needs.go", "object.go", "policy.go", "runs.go",
		"serviceaccount.go", "transition.go",
	}
	forbidden := []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "net/http", "context"}
	for _, name := range pure {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: judgement must not reach the API server or HTTP", name, path)
				}
			}
		}
	}
}
