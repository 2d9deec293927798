package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
)

// TestConfigMapNeedsCoverWhatTheParserReads: every variable election.ParseConfig reads is one the
// guard keeps from a ConfigMap.
func TestConfigMapNeedsCoverWhatTheParserReads(t *testing.T) {
	var read []string
	for _, env := range []map[string]string{{}, {electionenv.EnvShard: "1", electionenv.EnvNamespace: "x"}} {
		electionenv.Parse(func(k string) (string, bool) { read = append(read, k); v, ok := env[k]; return v, ok })
	}
	for _, k := range append(read, webhook.EnvFencing) {
		covered := strings.HasPrefix(k, webhook.GuardReadPrefix)
		for _, n := range webhook.GuardReadNames {
			covered = covered || n == k
		}
		if !covered {
			t.Errorf("election.ParseConfig reads %s, which the guard would not read from a ConfigMap", k)
		}
	}
}

func TestSkimConfigMap(t *testing.T) {
	keepAll := func(string) bool { return true }
	cases := []struct {
		name, in string
		keep     func(string) bool
		want     map[string]string
		wantErr  bool
	}{
		{"escapes", `{"kind":"ConfigMap","metadata":{"name":"a","x":[1,{"y":"}\""}],"n":null},"data":{"a":"\"q\"\\","b":"\u00e9\ud83d\ude00","c\"":"x"}}`, keepAll,
			map[string]string{"a": `"q"\`, "b": "é😀", `c"`: "x"}, false},
		{"filtered", `{"data":{"a":"1","b":"2"},"binaryData":{"a":"AAAA"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "2"}, false},
		{"data null", `{"data":null,"kind":"ConfigMap"}`, keepAll, map[string]string{}, false},
		{"truncated", `{"data":{"a":"1`, keepAll, nil, true},
		{"not JSON", `[`, keepAll, nil, true},
		{"too large", `{"data":{"a":"` + strings.Repeat("x", 100) + `"}}`, keepAll, nil, true},
		{"large but not kept", `{"data":{"a":"` + strings.Repeat("x", 100000) + `","b":"ok"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "ok"}, false},
		{"backslashes across buffers", `{"data":{"a":"` + strings.Repeat(`\\`, 20000) + `\"","b":"ok"}}`, func(k string) bool { return k == "b" }, map[string]string{"b": "ok"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := webhook.SkimConfigMap(strings.NewReader(c.in), c.keep, 50)
			if c.name == "large but not kept" || c.name == "backslashes across buffers" {
				got, _, err = webhook.SkimConfigMap(strings.NewReader(c.in), c.keep, 1000)
			}
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %v", err, c.wantErr)
			}
			if !c.wantErr && fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// FuzzSkimConfigMap: wherever client-go's decoder (case-sensitive, sigs.k8s.io/json) decodes a
// ConfigMap, the skimmer keeps the same data.
func FuzzSkimConfigMap(f *testing.F) {
	f.Add([]byte(`{"kind":"ConfigMap","metadata":{"name":"a"},"data":{"a":"1","NOETL_X":"\"\\"}}`))
	f.Add([]byte(`{"data":{"a":"\u00e9","b":"x"},"binaryData":{"c":"AA=="},"immutable":true}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var cm corev1.ConfigMap
		if kjson.UnmarshalCaseSensitivePreserveInts(in, &cm) != nil || !json.Valid(in) || bytes.Count(in, []byte(`"data"`)) > 1 {
			return
		}
		got, _, err := webhook.SkimConfigMap(bytes.NewReader(in), func(string) bool { return true }, 1<<20)
		if err != nil {
			t.Fatalf("client-go decodes %q, the skimmer: %v", in, err)
		}
		if len(got) != len(cm.Data) {
			t.Fatalf("%q: skimmer %q, client-go %q", in, got, cm.Data)
		}
		for k, v := range cm.Data {
			if got[k] != v {
				t.Fatalf("%q: key %q: skimmer %q, client-go %q", in, k, got[k], v)
			}
		}
	})
}
