package status

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// -o json and -o yaml are one document in two syntaxes: both parse back to the same values, and
// both name what they are (apiVersion, kind) as kubectl's outputs do.
func TestRunJSONAndYAMLAgree(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.date = func() time.Time { return t0.Add(5 * time.Second) }
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000001", "writer-1#b", 1, nil, ptr.To[int32](15)),
		lease("ehdb-shard-00000002", "", 4, d(0), nil),
		lease("ehdb-shard-junk", "x#y", 1, d(0), ptr.To[int32](15)),
	}
	kc := f.kubeconfig(t)
	docs := map[string]map[string]any{}
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := runStatus(t, t0.Add(5*time.Second), "--kubeconfig", kc, "-o", format)
		if code != ExitOK {
			t.Fatalf("-o %s: exit %d: %s", format, code, errOut)
		}
		var doc map[string]any
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &doc)
		} else {
			err = yaml.Unmarshal([]byte(out), &doc)
			if json.Valid([]byte(out)) {
				t.Errorf("-o yaml printed JSON:\n%s", out)
			}
		}
		if err != nil {
			t.Fatalf("-o %s does not parse: %v\n%s", format, err, out)
		}
		docs[format] = doc
	}
	if !reflect.DeepEqual(docs["json"], docs["yaml"]) {
		t.Errorf("json and yaml differ:\n%v\n%v", docs["json"], docs["yaml"])
	}
	j := docs["json"]
	if j["apiVersion"] != "ehdb.noetl.io/v1alpha1" || j["kind"] != "ShardLeaseStatus" || j["namespace"] != "noetl" {
		t.Errorf("document header: %v", j)
	}
	leases, _ := j["leases"].([]any)
	if len(leases) != 3 {
		t.Fatalf("leases: %v", j["leases"])
	}
	// null stays null in both syntaxes (a released Lease has no expiry).
	if l2 := leases[2].(map[string]any); l2["state"] != "released" || l2["expiresInSeconds"] != nil || l2["leaseDurationSeconds"] != nil {
		t.Errorf("released lease: %v", l2)
	}
}

func TestRunWide(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-000000ff", "writer-0#a", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000100", "", 3, nil, nil),
	}
	code, out, errOut := runStatus(t, t0.Add(5*time.Second), "--kubeconfig", f.kubeconfig(t), "-o", "wide")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "" +
		"SHARD   HOLDER       EPOCH   RENEWED    EXPIRES   STATE      LEASE                 DURATION   RENEW_TIME                    EXPIRY\n" +
		"255     writer-0#a   2       5.0s ago   in 10s    live       ehdb-shard-000000ff   15s        2026-11-30T08:00:00.123456Z   2026-11-30T08:00:15.123456Z\n" +
		"256     -            3       never      -         released   ehdb-shard-00000100   -          -                             -\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

// A holder identity is whatever was written into the Lease — anyone who may update it chooses it.
// It must not forge rows or drive the terminal: a newline or an escape sequence in it stays inside
// its cell.
func TestTableKeepsHostileHoldersInTheirCell(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-00000000", "evil#1\n1       writer-9#x   99      0.1s ago   in 15s    live", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000001", "evil#2\x1b[2J\x1b]0;pwned\a", 2, d(0), ptr.To[int32](15)),
	}
	for _, format := range []string{"table", "wide"} {
		code, out, errOut := runStatus(t, t0, "--kubeconfig", f.kubeconfig(t), "-o", format)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 3 {
			t.Errorf("-o %s: %d lines for 2 Leases:\n%s", format, len(lines), out)
		}
		if strings.ContainsAny(out, "\x1b\a") {
			t.Errorf("-o %s: control characters reach the terminal: %q", format, out)
		}
	}
}

func TestRunOutputFlag(t *testing.T) {
	isolate(t)
	code, _, errOut := runStatus(t, t0, "-o", "xml")
	if code != ExitUsage || !strings.Contains(errOut, `--output "xml": must be one of table, wide, json, yaml`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// The document is a runtime.Object; its deep copy shares nothing with the original.
func TestDocumentDeepCopy(t *testing.T) {
	doc := NewDocument(sampleReport(true))
	doc.Clock = DocumentClock{Source: "apiserver", SkewSeconds: ptr.To(1.5)}
	before, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := doc.DeepCopyObject().(*Document)
	if got, _ := json.Marshal(c); string(got) != string(before) {
		t.Fatalf("copy differs:\n%s\n%s", got, before)
	}
	*c.Clock.SkewSeconds = 9
	*c.Leases[0].RenewTime = "x"
	*c.Leases[0].ExpiresInSeconds = 9
	*c.Leases[0].Scrape.TokenValid = false
	c.Leases[0].Scrape.Error = "x"
	c.Ignored[0].Name = "x"
	if after, _ := json.Marshal(doc); string(after) != string(before) {
		t.Errorf("changing the copy changed the original:\n%s\n%s", after, before)
	}
}
