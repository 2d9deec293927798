package webhook

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The judgement files are pure: they import nothing that talks to the API server or serves HTTP,
// so every decision is a function of its inputs and can be tested without a cluster.
func TestJudgementFilesArePure(t *testing.T) {
	pure := []string{
		"access.go", "analysis.go", "decide.go", "decision.go", "election.go", "env.go", "expand.go",
		"input.go", "kinds.go", "lease.go", "leaseguard.go", "needs.go", "object.go", "policy.go", "runs.go",
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

// The fuzzing engine instruments every package the test binary links and pays for each coverage
// counter on every input: with client-go's typed clients (kube-openapi, structured-merge-diff,
// gnostic through applyconfigurations), Prometheus and controller-runtime linked,
// FuzzAdmissionReview made about 1,500 executions a second here, and stalled under load; without
// them, 2,000–7,000. So neither the guard's package nor its tests link them: the API client is
// webhook/kubeapi, the Prometheus series webhook/metrics, and tests over a clientset live there.
func TestTheFuzzedBinaryLinksLittle(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the test binary's packages")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-test", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -test: %v", err)
	}
	heavy := []string{
		"k8s.io/client-go/kubernetes", "k8s.io/client-go/applyconfigurations", "github.com/google/gnostic-models",
		"github.com/prometheus/", "sigs.k8s.io/controller-runtime", "github.com/noetl/ehdb-election/election",
		"github.com/noetl/ehdb-election/internal/testcluster",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if pkg == h || strings.HasPrefix(pkg, h) && (strings.HasSuffix(h, "/") || strings.HasPrefix(pkg, h+"/")) {
				t.Errorf("the webhook package's test binary links %s", pkg)
			}
		}
	}
}
