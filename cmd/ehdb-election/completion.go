package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/noetl/ehdb-election/cmd/ehdb-election/internal/status"
)

// Shell completion. The shell scripts are thin: they pass the words typed so far to the hidden
// command `__complete` and offer what it prints, in cobra's protocol (one candidate a line, then
// ":<directive>"), which is also what kubectl (1.26+) reads from a plugin's kubectl_complete-<name>.
// The candidates come from the same flag definitions the commands parse.

var commands = []string{"status", "version", "completion", "help"}

var shells = []string{"bash", "zsh", "fish"}

// Directives of cobra's completion protocol that the scripts understand.
const (
	directiveDefault    = 0 // the shell may also offer file names
	directiveNoFileComp = 4 // offer nothing but the candidates
)

// fileFlags take a path: the shell completes file names for their values.
var fileFlags = []string{"kubeconfig", "certificate-authority", "client-certificate", "client-key", "cache-dir"}

// complete returns the candidates for the last of args (the word being typed, possibly empty),
// given the words before it, and the directive.
func complete(args []string) ([]string, int) {
	if len(args) == 0 {
		args = []string{""}
	}
	cur := args[len(args)-1]
	prefixed := func(words []string) []string {
		var out []string
		for _, w := range words {
			if strings.HasPrefix(w, cur) {
				out = append(out, w)
			}
		}
		return out
	}
	if len(args) == 1 {
		return prefixed(commands), directiveNoFileComp
	}
	switch args[0] {
	case "completion":
		if len(args) == 2 {
			return prefixed(shells), directiveNoFileComp
		}
	case "status":
		fs := status.FlagSet()
		prev := args[len(args)-2]
		if prev == "=" && len(args) >= 3 { // bash splits --output=json at the '='
			prev = args[len(args)-3]
		}
		if name, value, ok := strings.Cut(cur, "="); ok && strings.HasPrefix(name, "--") {
			cands, dir := flagValues(fs, name)
			var out []string
			for _, c := range cands {
				if strings.HasPrefix(c, value) {
					out = append(out, name+"="+c)
				}
			}
			return out, dir
		}
		if fl := lookup(fs, prev); fl != nil && fl.NoOptDefVal == "" {
			cands, dir := flagValues(fs, prev)
			return prefixed(cands), dir
		}
		if strings.HasPrefix(cur, "-") {
			var names []string
			fs.VisitAll(func(f *pflag.Flag) {
				names = append(names, "--"+f.Name)
				if f.Shorthand != "" {
					names = append(names, "-"+f.Shorthand)
				}
			})
			slices.Sort(names)
			return prefixed(names), directiveNoFileComp
		}
	}
	return nil, directiveNoFileComp
}

// lookup finds the flag a word names ("--output", "-o"), or nil.
func lookup(fs *pflag.FlagSet, word string) *pflag.Flag {
	switch {
	case strings.HasPrefix(word, "--"):
		return fs.Lookup(word[2:])
	case strings.HasPrefix(word, "-") && len(word) == 2:
		return fs.ShorthandLookup(word[1:])
	}
	return nil
}

// flagValues are the values a flag's value may be completed from.
func flagValues(fs *pflag.FlagSet, word string) ([]string, int) {
	f := lookup(fs, word)
	switch {
	case f == nil:
		return nil, directiveNoFileComp
	case f.Name == "output":
		return status.Formats, directiveNoFileComp
	case slices.Contains(fileFlags, f.Name):
		return nil, directiveDefault
	}
	return nil, directiveNoFileComp
}

func writeCandidates(w io.Writer, args []string) {
	cands, dir := complete(args)
	for _, c := range cands {
		fmt.Fprintln(w, c)
	}
	fmt.Fprintf(w, ":%d\n", dir)
}

// completionScript is the script `completion <shell>` prints for the program bin.
func completionScript(shell, bin string) (string, error) {
	fn := "_" + strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(bin)
	switch shell {
	case "bash":
		return fmt.Sprintf(`# bash completion for %[1]s: source <(%[1]s completion bash)
%[2]s() {
  local IFS=$'\n' out dir
  out=$(%[1]s __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return
  dir=${out##*:}
  out=${out%%:*}
  COMPREPLY=($(printf '%%s\n' "$out" | sed '/^$/d'))
  if [[ ${#COMPREPLY[@]} -eq 0 && $dir == 0 ]]; then
    COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
  fi
}
complete -F %[2]s %[1]s
`, bin, fn), nil
	case "zsh":
		return fmt.Sprintf(`#compdef %[1]s
# zsh completion for %[1]s: source <(%[1]s completion zsh)
%[2]s() {
  local -a out
  out=("${(@f)$(%[1]s __complete "${(@)words[2,$CURRENT]}" 2>/dev/null)}")
  local dir=${out[-1]#:}
  out=("${(@)out[1,-2]}")
  if (( ${#out} )); then
    compadd -Q -- "${out[@]}"
  elif [[ $dir == 0 ]]; then
    _files
  fi
}
compdef %[2]s %[1]s
`, bin, fn), nil
	case "fish":
		return fmt.Sprintf(`# fish completion for %[1]s: %[1]s completion fish | source
function %[2]s
    set -l args (commandline -opc)[2..-1] (commandline -ct)
    set -l out (%[1]s __complete $args 2>/dev/null)
    set -l dir (string replace ':' '' -- $out[-1])
    set -e out[-1]
    if test (count $out) -gt 0
        printf '%%s\n' $out
    else if test "$dir" = 0
        __fish_complete_path (commandline -ct)
    end
end
complete -c %[1]s -f -a '(%[2]s)'
`, bin, fn), nil
	}
	return "", fmt.Errorf("unknown shell %q (want %s)", shell, strings.Join(shells, ", "))
}
