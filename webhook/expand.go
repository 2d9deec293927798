package webhook

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// expand is the kubelet's $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion,
// v1.37) over a partially known environment: $$ is an escaped $, $(NAME) is replaced by NAME's
// value when NAME is set and kept literally when it is not, an unterminated "$(" is kept. When a
// referenced variable's value is unknowable, so is the result.
func expand(input string, env *Env) Value {
	var buf strings.Builder
	var u *Unknown
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] == '$' && cursor+1 < len(input) {
			buf.WriteString(input[checkpoint:cursor])
			read, isVar, advance := tryReadVariableName(input[cursor+1:])
			if isVar {
				if v, ok := env.Lookup(read); ok {
					if v.Known() {
						buf.WriteString(v.Text)
					} else {
						u = u.merge(v.Unknown)
					}
				} else {
					buf.WriteString("$(" + read + ")")
				}
			} else {
				buf.WriteString(read)
			}
			cursor += advance
			checkpoint = cursor + 1
		}
	}
	if u != nil {
		return Value{Unknown: u}
	}
	return Value{Text: buf.String() + input[checkpoint:]}
}

// tryReadVariableName is the upstream function of the same name: input starts right after a '$'.
func tryReadVariableName(input string) (string, bool, int) {
	r, size := utf8.DecodeRuneInString(input)
	switch r {
	case '$':
		return input[0:size], false, size
	case '(':
		for i := 1; i < len(input); i++ {
			if input[i] == ')' {
				return input[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + string(r), false, size
	}
}

func quote(s string) string { return strconv.Quote(s) }
