package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func sampleReport(scraped bool) Report {
	now := t0.Add(20 * time.Second)
	leases := []coordinationv1.Lease{
		lease("ehdb-shard-00000000", "writer-0#aa", 3, d(18*time.Second), ptr.To[int32](15)),           // live, in 13s
		lease("ehdb-shard-00000001", "writer-1#bb", 5, d(-10*time.Minute), ptr.To[int32](15)),          // expired
		lease("ehdb-shard-00000002", "", 6, d(15*time.Second+500*time.Millisecond), ptr.To[int32](15)), // released
		lease("ehdb-shard-00000003", "writer-3#cc", 1, nil, ptr.To[int32](15)),                         // never renewed
		lease("ehdb-shard-zz", "x#y", 1, d(0), ptr.To[int32](15)),
	}
	rows, ignored := Rows(leases, now)
	if scraped {
		rows[0].Scrape = &Scrape{Pod: "writer-0", TokenValid: ptr.To(true), Epoch: ptr.To[int64](3)}
		rows[1].Scrape = &Scrape{Pod: "writer-1", Err: "pod writer-1 not found in namespace noetl (the holder may be gone)"}
		rows[2].Scrape = &Scrape{Err: "released: no holder to scrape"}
		rows[3].Scrape = &Scrape{Pod: "writer-3", TokenValid: ptr.To(false), Err: "no ehdb_election_epoch on :9090/metrics (is this pod an ehdb writer with the election built in?)"}
	}
	return Report{Namespace: "noetl", ObservedAt: now, Rows: rows, Ignored: ignored, Scraped: scraped}
}

func TestWriteTable(t *testing.T) {
	tests := []struct {
		name    string
		scraped bool
		want    string
	}{
		{"plain", false, `
SHARD   HOLDER        EPOCH   RENEWED    EXPIRES   STATE
0       writer-0#aa   3       2.0s ago   in 13s    live
1       writer-1#bb   5       10m ago    10m ago   expired
2       -             6       4.5s ago   -         released
3       writer-3#cc   1       never      -         expired (never renewed: no renewTime)
`},
		{"scraped", true, `
SHARD   HOLDER        EPOCH   RENEWED    EXPIRES   STATE                                   TOKEN_VALID   WRITER_EPOCH   SCRAPE
0       writer-0#aa   3       2.0s ago   in 13s    live                                    1             3              ok
1       writer-1#bb   5       10m ago    10m ago   expired                                 ?             ?              pod writer-1 not found in namespace noetl (the holder may be gone)
2       -             6       4.5s ago   -         released                                -             -              -
3       writer-3#cc   1       never      -         expired (never renewed: no renewTime)   0             ?              no ehdb_election_epoch on :9090/metrics (is this pod an ehdb writer with the election built in?)
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteTable(&b, sampleReport(tt.scraped)); err != nil {
				t.Fatal(err)
			}
			if got, want := b.String(), strings.TrimPrefix(tt.want, "\n"); got != want {
				t.Errorf("table:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestRelative(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "in 0.0s",
		1500 * time.Millisecond: "in 1.5s",
		-9 * time.Second:        "9.0s ago",
		15 * time.Second:        "in 15s",
		-3 * time.Hour:          "3h ago",
	} {
		if got := relative(d); got != want {
			t.Errorf("relative(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	for _, scraped := range []bool{false, true} {
		var b bytes.Buffer
		if err := WriteJSON(&b, sampleReport(scraped)); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, b.String())
		}
		if doc["namespace"] != "noetl" || doc["observedAt"] != "2026-11-30T08:00:20.123456Z" {
			t.Errorf("namespace/observedAt = %v/%v", doc["namespace"], doc["observedAt"])
		}
		ignored := doc["ignored"].([]any)
		if len(ignored) != 1 || ignored[0].(map[string]any)["name"] != "ehdb-shard-zz" {
			t.Errorf("ignored = %v", ignored)
		}
		leases := doc["leases"].([]any)
		if len(leases) != 4 {
			t.Fatalf("%d leases, want 4", len(leases))
		}
		live := leases[0].(map[string]any)
		wantLive := map[string]any{
			"name": "ehdb-shard-00000000", "shard": 0.0, "holder": "writer-0#aa", "pod": "writer-0",
			"epoch": 3.0, "state": "live", "renewTime": "2026-11-30T08:00:18.123456Z",
			"leaseDurationSeconds": 15.0, "renewedAgoSeconds": 2.0, "expiresInSeconds": 13.0, "note": "",
		}
		for k, v := range wantLive {
			if live[k] != v {
				t.Errorf("scraped=%v: leases[0].%s = %#v, want %#v", scraped, k, live[k], v)
			}
		}
		// Stable field names: every field is present in every lease, null when unknown.
		never := leases[3].(map[string]any)
		for _, k := range []string{"renewTime", "renewedAgoSeconds", "expiresInSeconds"} {
			if v, ok := never[k]; !ok || v != nil {
				t.Errorf("leases[3].%s = %#v (present %v), want null", k, v, ok)
			}
		}
		if expired := leases[1].(map[string]any); expired["expiresInSeconds"] != -605.0 || expired["state"] != "expired" {
			t.Errorf("leases[1] = %v", expired)
		}
		if released := leases[2].(map[string]any); released["holder"] != "" || released["expiresInSeconds"] != nil || released["state"] != "released" {
			t.Errorf("leases[2] = %v", released)
		}
		_, hasScrape := live["scrape"]
		if hasScrape != scraped {
			t.Errorf("scraped=%v but scrape field present=%v", scraped, hasScrape)
		}
		if scraped {
			want := map[string]any{"pod": "writer-0", "tokenValid": true, "epoch": 3.0, "error": ""}
			s := live["scrape"].(map[string]any)
			for k, v := range want {
				if s[k] != v {
					t.Errorf("leases[0].scrape.%s = %#v, want %#v", k, s[k], v)
				}
			}
			s = leases[1].(map[string]any)["scrape"].(map[string]any)
			if s["tokenValid"] != nil || s["epoch"] != nil || !strings.Contains(s["error"].(string), "not found") {
				t.Errorf("leases[1].scrape = %v", s)
			}
		}
	}
}

func TestWriteJSONEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, Report{Namespace: "x", ObservedAt: t0}); err != nil {
		t.Fatal(err)
	}
	// Scripts iterate over leases: an empty namespace is [], never null.
	if !strings.Contains(b.String(), `"leases": []`) || !strings.Contains(b.String(), `"ignored": []`) {
		t.Errorf("empty report:\n%s", b.String())
	}
}
