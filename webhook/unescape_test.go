package webhook

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

func TestHTMLUnescaperWritesBackOnlyTheHTMLEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"a\u003cb\u003e\u0026"`, `"a<b>&"`},
		{`"\u003C\u003E"`, `"<>"`},
		{`"\\u003c"`, `"\\u003c"`}, // an escaped backslash, then the text u003c
		{`"\\\u003c"`, `"\\<"`},
		{`"\u0041\n\"\u2028"`, `"\u0041\n\"\u2028"`},
		{`"\u003"`, `"\u003"`},
		{`x\`, `x\`},
	} {
		for name, r := range map[string]io.Reader{"whole": newHTMLUnescaper(strings.NewReader(tc.in)),
			"a byte at a time": newHTMLUnescaper(iotest.OneByteReader(strings.NewReader(tc.in)))} {
			got, err := io.ReadAll(iotest.OneByteReader(r))
			if err != nil || string(got) != tc.want {
				t.Errorf("%s %s: %q, %v; want %q", name, tc.in, got, err, tc.want)
			}
		}
	}
}

// What the decoder reads through the unescaper is the value the API server encoded, for strings
// of the bytes that escaping concerns.
func TestHTMLUnescaperKeepsEveryValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune{'<', '>', '&', '\\', 'u', '0', '3', 'c', 'e', '"', '\n', '\x00', '\x1f', 'a', '\u2028', 'é'}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		want := map[string]string{b.String(): b.String()}
		enc, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		raw, err := io.ReadAll(newHTMLUnescaper(iotest.HalfReader(strings.NewReader(string(enc)))))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 || got[b.String()] != b.String() {
			t.Fatalf("%q through the unescaper as %q: %v, %v", enc, raw, got, err)
		}
	}
}
