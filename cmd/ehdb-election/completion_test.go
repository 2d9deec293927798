package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/noetl/ehdb-election/internal/repo"
)

func TestCompleteCandidates(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string // must all be offered
		exactly bool
		dir     int
	}{
		{[]string{""}, []string{"status", "version", "completion", "help"}, true, directiveNoFileComp},
		{[]string{"st"}, []string{"status"}, true, directiveNoFileComp},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}, true, directiveNoFileComp},
		{[]string{"status", "--w"}, []string{"--watch"}, true, directiveNoFileComp},
		{[]string{"status", "-"}, []string{"--output", "-o", "--all-namespaces", "-A", "--namespace", "-n", "--kubeconfig", "--request-timeout", "--scrape"}, false, directiveNoFileComp},
		{[]string{"status", "-o", ""}, []string{"table", "wide", "json", "yaml"}, true, directiveNoFileComp},
		{[]string{"status", "--output", "y"}, []string{"yaml"}, true, directiveNoFileComp},
		{[]string{"status", "--output", "=", "w"}, []string{"wide"}, true, directiveNoFileComp},
		{[]string{"status", "--output=j"}, []string{"--output=json"}, true, directiveNoFileComp},
		{[]string{"status", "--kubeconfig", ""}, nil, true, directiveDefault},
		{[]string{"status", "-n", ""}, nil, true, directiveNoFileComp},
		{[]string{"status", "-A", "-"}, []string{"--watch"}, false, directiveNoFileComp},
	} {
		got, dir := complete(tc.args)
		ok := dir == tc.dir
		for _, w := range tc.want {
			ok = ok && slices.Contains(got, w)
		}
		if tc.exactly {
			ok = ok && len(got) == len(tc.want)
		}
		if !ok {
			t.Errorf("complete(%q) = %q :%d, want %q :%d (exactly %v)", tc.args, got, dir, tc.want, tc.dir, tc.exactly)
		}
	}
}

// TestBashCompletion sources `completion bash` in a real bash and asks its function, as bash's
// completion would, for the words typed so far; the script calls the built binary's __complete.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := builtCLI(t)
	for _, tc := range []struct {
		words []string // COMP_WORDS; the last is the word under the cursor
		want  string   // COMPREPLY, one per line
	}{
		{[]string{"ehdb-election", "sta"}, "status"},
		{[]string{"ehdb-election", "status", "-o", ""}, "table\nwide\njson\nyaml"},
		{[]string{"ehdb-election", "status", "--wat"}, "--watch"},
		{[]string{"ehdb-election", "status", "--kubeconfig", "kube"}, "kubeconfig.yaml"}, // file names
		{[]string{"ehdb-election", "completion", "f"}, "fish"},
	} {
		var quoted []string
		for _, w := range tc.words {
			quoted = append(quoted, "'"+w+"'")
		}
		script := `set -e
source <(ehdb-election completion bash)
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]}-1))
_ehdb_election
printf '%s\n' "${COMPREPLY[@]}"
`
		out, err := inDir(dir, bash, "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v: COMPREPLY\n%s\nwant\n%s", tc.words, got, tc.want)
		}
	}
}

var (
	builtOnce sync.Once
	builtDir  string
	builtErr  error
)

// builtCLI builds the CLI into a temporary folder (once per test binary; TestMain removes it) that
// also holds a file kubeconfig.yaml, for the scripts' file-name completion.
func builtCLI(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		root, err := repo.Root()
		if err == nil {
			builtDir, err = os.MkdirTemp("", "ehdb-election-completion-")
		}
		if err != nil {
			builtErr = err
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(builtDir, "ehdb-election"), "./cmd/ehdb-election")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		builtErr = os.WriteFile(filepath.Join(builtDir, "kubeconfig.yaml"), nil, 0o600)
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtDir
}

// removeBuiltCLI removes builtCLI's folder.
func removeBuiltCLI() {
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
}

// inDir runs a shell in dir with the built CLI first on the PATH.
func inDir(dir, shell string, args ...string) *exec.Cmd {
	cmd := exec.Command(shell, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// TestFishCompletion asks a real fish (`complete -C`, what fish does on Tab) after sourcing
// `completion fish`.
func TestFishCompletion(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("no fish")
	}
	dir := builtCLI(t)
	for _, tc := range []struct{ line, want string }{
		{"ehdb-election sta", "status"},
		{"ehdb-election status -o ", "json\ntable\nwide\nyaml"}, // fish sorts
		{"ehdb-election status --wat", "--watch"},
		{"ehdb-election status --kubeconfig kube", "kubeconfig.yaml"},
		{"ehdb-election completion z", "zsh"},
	} {
		out, err := inDir(dir, fish, "-c", "ehdb-election completion fish | source; complete -C '"+tc.line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q: fish offers\n%s\nwant\n%s", tc.line, got, tc.want)
		}
	}
}

// TestZshCompletion runs the zsh function in a real zsh with compsys's compadd and _files
// stubbed to print what they are given (compsys itself needs a terminal).
func TestZshCompletion(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh")
	}
	dir := builtCLI(t)
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"ehdb-election", "sta"}, "status"},
		{[]string{"ehdb-election", "status", "-o", ""}, "table\nwide\njson\nyaml"},
		{[]string{"ehdb-election", "status", "--kubeconfig", ""}, "FILES"},
		{[]string{"ehdb-election", "status", "-n", ""}, ""},
	} {
		var quoted []string
		for _, w := range tc.words {
			quoted = append(quoted, "'"+w+"'")
		}
		script := `compdef() { :; }; compadd() { shift 2; print -l -- "$@"; }; _files() { print FILES; }
source <(ehdb-election completion zsh)
words=(` + strings.Join(quoted, " ") + `); CURRENT=${#words}
_ehdb_election`
		out, err := inDir(dir, zsh, "-f", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v: zsh offers\n%s\nwant\n%s", tc.words, got, tc.want)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, sh := range shells {
		code, out, errOut := runCLI(t, "ehdb-election", "completion", sh)
		if code != 0 || !strings.Contains(out, "ehdb-election __complete") {
			t.Errorf("completion %s: exit %d\n%s%s", sh, code, out, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "ehdb-election", "completion", "tcsh"); code != 2 || !strings.Contains(errOut, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, errOut)
	}
	code, out, _ := runCLI(t, "ehdb-election", "__complete", "status", "-o", "")
	if code != 0 || out != "table\nwide\njson\nyaml\n:4\n" {
		t.Errorf("__complete: exit %d, %q (cobra's protocol: candidates, then :directive)", code, out)
	}
}
