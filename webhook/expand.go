package webhook

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// expand resolves $(NAME) references in input with the kubelet's rules, over an environment in
// which some values may be unknowable:
//   - "$$" is one literal '$';
//   - "$(NAME)" becomes NAME's value when NAME is set, and stays as written when it is not;
//   - an unterminated "$(" stays as written, and scanning goes on right after it;
//   - '$' before anything else, or at the very end, is literal. The kubelet decodes the one rune
//     after it, so an invalid UTF-8 byte there comes out as U+FFFD; so does it here.
//
// The result is unknowable when any reference it needed is.
func expand(input string, env *Env) Value {
	var out strings.Builder
	var unknown *Unknown
	perOrdinal, read := false, false
	if !env.budget.spend(len(input)) {
		return Value{Unknown: errBudget}
	}
	if strings.Contains(input, ordinalMark) {
		return Value{Unknown: &Unknown{Reasons: []string{"a value containing U+FFFF, which the guard reserves"}}}
	}
	rest := input
	for {
		at := strings.IndexByte(rest, '$')
		if at < 0 || at == len(rest)-1 {
			out.WriteString(rest)
			break
		}
		out.WriteString(rest[:at])
		next := rest[at+1:]
		switch next[0] {
		case '$':
			out.WriteByte('$')
			rest = next[1:]
		case '(':
			end := strings.IndexByte(next, ')')
			if end < 0 {
				out.WriteString("$(")
				rest = next[1:]
				continue
			}
			name := next[1:end]
			rest = next[end+1:]
			v, set := env.lookupExact(name)
			switch {
			case !set:
				out.WriteString("$(" + name + ")")
			case v.Known():
				if !v.PerOrdinal && strings.Contains(v.Text, ordinalMark) {
					unknown = unknown.merge(&Unknown{Reasons: []string{"a value containing U+FFFF, which the guard reserves"}})
				}
				if !env.budget.spend(len(v.Text)) {
					return Value{Unknown: errBudget}
				}
				perOrdinal, read = perOrdinal || v.PerOrdinal, read || v.Read
				out.WriteString(v.Text)
			default:
				unknown = unknown.merge(v.Unknown)
			}
		default:
			r, size := utf8.DecodeRuneInString(next)
			out.WriteByte('$')
			out.WriteRune(r)
			rest = next[size:]
		}
	}
	if unknown != nil {
		return Value{Unknown: unknown}
	}
	return Value{Text: out.String(), PerOrdinal: perOrdinal, Read: read}
}

func quote(s string) string { return strconv.Quote(s) }
