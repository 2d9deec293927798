package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestEstimateSkew(t *testing.T) {
	date := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) // a Date header: whole seconds
	tests := []struct {
		name           string
		sent, received time.Time
		want           time.Duration
	}{
		// The server stamped its Date at some instant of [date, date+1s) on its clock, which was
		// some instant of [sent, received] on ours: 0 skew fits whenever the intervals overlap.
		{"in step, mid-second", date.Add(400 * time.Millisecond), date.Add(410 * time.Millisecond), 0},
		{"in step, just after the tick", date, date.Add(time.Millisecond), 0},
		{"in step, just before the next tick", date.Add(999 * time.Millisecond), date.Add(999 * time.Millisecond), 0},
		{"slow round trip straddling the header", date.Add(-2 * time.Second), date.Add(3 * time.Second), 0},
		// Five minutes ahead: skew ∈ (sent−date−1s, received−date] = (299s, 300s]: the midpoint.
		{"five minutes ahead", date.Add(5 * time.Minute), date.Add(5 * time.Minute), 5*time.Minute - 500*time.Millisecond},
		{"five minutes behind", date.Add(-5 * time.Minute), date.Add(-5 * time.Minute), -5*time.Minute - 500*time.Millisecond},
		{"1.5 s behind", date.Add(-1500 * time.Millisecond), date.Add(-1500 * time.Millisecond), -2 * time.Second},
		{"ahead, with a 200 ms round trip", date.Add(10 * time.Second), date.Add(10*time.Second + 200*time.Millisecond), 9*time.Second + 600*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EstimateSkew(tt.sent, tt.received, date); got != tt.want {
				t.Errorf("EstimateSkew = %v, want %v", got, tt.want)
			}
		})
	}
}

// The attack: the viewer's clock is not the cluster's. Five minutes ahead, the old view called a
// Lease renewed two seconds ago (by the API server's clock) expired; five minutes behind, it called
// one expired for five seconds live. The API server's Date header is the cluster's clock.
func TestRunJudgesOnTheServersClock(t *testing.T) {
	isolate(t)
	f := newFakeServer(t)
	server := t0.Add(20 * time.Second) // the API server's now
	f.date = func() time.Time { return server }
	f.pages["noetl"] = []coordinationv1.Lease{
		lease("ehdb-shard-00000000", "writer-0#a", 2, d(18*time.Second), ptr.To[int32](15)), // 2 s ago: live 13 s more
		lease("ehdb-shard-00000001", "writer-1#b", 7, d(0), ptr.To[int32](15)),              // expired 5 s ago
		lease("ehdb-shard-00000002", "", 3, d(19*time.Second), ptr.To[int32](15)),           // released
	}
	kc := f.kubeconfig(t)

	for _, skew := range []time.Duration{0, 5 * time.Minute, -5 * time.Minute, 90 * time.Second, -10 * time.Second, 24 * time.Hour} {
		t.Run("local clock "+skew.String(), func(t *testing.T) {
			code, out, errOut := runStatus(t, server.Add(skew), "--kubeconfig", kc, "-o", "json")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var doc struct {
				ObservedAt time.Time
				Clock      struct {
					Source      string   `json:"source"`
					SkewSeconds *float64 `json:"skewSeconds"`
				}
				Leases []struct{ State string }
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var states []string
			for _, l := range doc.Leases {
				states = append(states, l.State)
			}
			if got := strings.Join(states, " "); got != "live expired released" {
				t.Errorf("states %q, want live expired released\n%s", got, out)
			}
			// The instant judged at is the server's, to within the Date header's second.
			if off := doc.ObservedAt.Sub(server); off < -time.Second || off > time.Second {
				t.Errorf("observedAt %s is %v off the server's %s", doc.ObservedAt, off, server)
			}
			if doc.Clock.Source != "apiserver" || doc.Clock.SkewSeconds == nil ||
				(*doc.Clock.SkewSeconds-skew.Seconds()) > 1 || (*doc.Clock.SkewSeconds-skew.Seconds()) < -1 {
				t.Errorf("clock %+v, want source apiserver and skew ≈ %v", doc.Clock, skew.Seconds())
			}
			warned := strings.Contains(errOut, "warning: this machine's clock is")
			if warned != (skew != 0) {
				t.Errorf("skew %v: warning printed = %v; stderr:\n%s", skew, warned, errOut)
			}
		})
	}

	// The table says the same, and the warning names the direction and size.
	code, out, errOut := runStatus(t, server.Add(5*time.Minute), "--kubeconfig", kc)
	if code != ExitOK || !strings.Contains(out, "live") || !strings.Contains(errOut, "5m0s ahead of the API server's") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}

	// Without a Date header the machine's clock is all there is, and the view says so.
	f.mu.Lock()
	f.date = nil
	f.mu.Unlock()
	code, out, errOut = runStatus(t, server, "--kubeconfig", kc, "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"source": "local"`) || !strings.Contains(errOut, "no Date header") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}
