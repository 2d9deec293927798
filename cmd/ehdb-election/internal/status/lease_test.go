package status

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// t0 is an arbitrary instant with sub-second digits, so truncation bugs show.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 123456000, time.UTC)

// lease builds a Lease; renew is relative to t0 (nil: no renewTime).
func lease(name, holder string, epoch int32, renew *time.Duration, durSecs *int32) coordinationv1.Lease {
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if holder != "<nil>" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	if epoch >= 0 {
		l.Spec.LeaseTransitions = ptr.To(epoch)
	}
	if renew != nil {
		mt := metav1.NewMicroTime(t0.Add(*renew))
		l.Spec.RenewTime = &mt
	}
	l.Spec.LeaseDurationSeconds = durSecs
	return l
}

func d(x time.Duration) *time.Duration { return &x }

func TestRowsLiveness(t *testing.T) {
	tests := []struct {
		name      string
		lease     coordinationv1.Lease
		now       time.Time
		state     State
		expiresIn *time.Duration
		note      string
	}{
		{
			name:  "renewed a second ago: live",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 3, d(0), ptr.To[int32](15)),
			now:   t0.Add(time.Second), state: Live, expiresIn: d(14 * time.Second),
		},
		{
			name:  "exactly renewTime + duration: still live (strict > for expiry)",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 3, d(0), ptr.To[int32](15)),
			now:   t0.Add(15 * time.Second), state: Live, expiresIn: d(0),
		},
		{
			name:  "one nanosecond after renewTime + duration: expired",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 3, d(0), ptr.To[int32](15)),
			now:   t0.Add(15*time.Second + time.Nanosecond), state: Expired, expiresIn: d(-time.Nanosecond),
		},
		{
			name:  "long expired",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 3, d(-time.Hour), ptr.To[int32](15)),
			now:   t0, state: Expired, expiresIn: d(-time.Hour + 15*time.Second),
		},
		{
			name:  "renewTime ahead of the viewer's clock: live",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 3, d(2*time.Second), ptr.To[int32](15)),
			now:   t0, state: Live, expiresIn: d(17 * time.Second),
		},
		{
			name:  "empty holder: released even though freshly renewed",
			lease: lease("ehdb-shard-00000000", "", 4, d(0), ptr.To[int32](15)),
			now:   t0, state: Released,
		},
		{
			name:  "nil holder: released",
			lease: lease("ehdb-shard-00000000", "<nil>", -1, nil, nil),
			now:   t0, state: Released,
		},
		{
			name:  "held without renewTime: not live",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 1, nil, ptr.To[int32](15)),
			now:   t0, state: Expired, note: "never renewed: no renewTime",
		},
		{
			name:  "held without leaseDurationSeconds: not live",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 1, d(0), nil),
			now:   t0, state: Expired, note: "no leaseDurationSeconds",
		},
		{
			name:  "held with a zero duration: not live",
			lease: lease("ehdb-shard-00000000", "w-0#u1", 1, d(0), ptr.To[int32](0)),
			now:   t0, state: Expired, note: "leaseDurationSeconds is 0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, ignored := Rows([]coordinationv1.Lease{tt.lease}, tt.now)
			if len(rows) != 1 || len(ignored) != 0 {
				t.Fatalf("got %d rows, %d ignored; want 1, 0", len(rows), len(ignored))
			}
			r := rows[0]
			if r.State != tt.state {
				t.Errorf("state = %s, want %s", r.State, tt.state)
			}
			if r.Note != tt.note {
				t.Errorf("note = %q, want %q", r.Note, tt.note)
			}
			switch {
			case tt.expiresIn == nil && r.ExpiresIn != nil:
				t.Errorf("expiresIn = %v, want none", *r.ExpiresIn)
			case tt.expiresIn != nil && (r.ExpiresIn == nil || *r.ExpiresIn != *tt.expiresIn):
				t.Errorf("expiresIn = %v, want %v", r.ExpiresIn, *tt.expiresIn)
			}
			if rt := tt.lease.Spec.RenewTime; rt != nil {
				if r.RenewedAgo == nil || *r.RenewedAgo != tt.now.Sub(rt.Time) {
					t.Errorf("renewedAgo = %v, want %v", r.RenewedAgo, tt.now.Sub(rt.Time))
				}
			} else if r.RenewedAgo != nil {
				t.Errorf("renewedAgo = %v without a renewTime", *r.RenewedAgo)
			}
		})
	}
}

func TestRowsFieldsAndOrder(t *testing.T) {
	leases := []coordinationv1.Lease{
		lease("ehdb-shard-000000ff", "writer-255#1b2c", 7, d(0), ptr.To[int32](15)),
		lease("kube-scheduler", "node-1_abc", 2, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-ffffffff", "name-only", -1, d(0), ptr.To[int32](15)),
		lease("ehdb-shard-00000000", "writer-0#9f", 1, d(0), ptr.To[int32](15)),
		lease("ehdb-shard", "x", 1, d(0), ptr.To[int32](15)),
	}
	rows, ignored := Rows(leases, t0)
	if len(ignored) != 0 {
		t.Errorf("ignored = %v, want none (foreign Leases are skipped silently)", ignored)
	}
	want := []struct {
		name   string
		shard  uint32
		holder string
		pod    string
		epoch  int32
	}{
		{"ehdb-shard-00000000", 0, "writer-0#9f", "writer-0", 1},
		{"ehdb-shard-000000ff", 255, "writer-255#1b2c", "writer-255", 7},
		{"ehdb-shard-ffffffff", 4294967295, "name-only", "name-only", 0},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if r.Name != w.name || r.Shard != w.shard || r.Holder != w.holder || r.Pod != w.pod || r.Epoch != w.epoch {
			t.Errorf("row %d = {%s %d %s %s %d}, want %+v", i, r.Name, r.Shard, r.Holder, r.Pod, r.Epoch, w)
		}
	}
}

func TestRowsMalformedNames(t *testing.T) {
	names := map[string]string{
		"ehdb-shard-":          "not 8 hex digits",
		"ehdb-shard-xyz":       "not 8 hex digits",
		"ehdb-shard-ff":        "not 8 hex digits",
		"ehdb-shard-000000ff0": "not 8 hex digits",
		"ehdb-shard-000000FF":  "not 8 lowercase hex digits",
		"ehdb-shard-0000000g":  "not 8 lowercase hex digits",
		"ehdb-shard-+0000001":  "not 8 lowercase hex digits",
		"ehdb-shard-0000-001":  "not 8 lowercase hex digits",
	}
	var leases []coordinationv1.Lease
	for n := range names {
		leases = append(leases, lease(n, "w#u", 1, d(0), ptr.To[int32](15)))
	}
	leases = append(leases, lease("ehdb-shard-00000001", "w-1#u", 1, d(0), ptr.To[int32](15)))
	rows, ignored := Rows(leases, t0)
	if len(rows) != 1 || rows[0].Shard != 1 {
		t.Errorf("rows = %+v, want only shard 1", rows)
	}
	if len(ignored) != len(names) {
		t.Fatalf("ignored %d, want %d: %+v", len(ignored), len(names), ignored)
	}
	for i, ig := range ignored {
		if i > 0 && ignored[i-1].Name > ig.Name {
			t.Errorf("ignored not sorted by name: %q before %q", ignored[i-1].Name, ig.Name)
		}
		if want := names[ig.Name]; !strings.Contains(ig.Reason, want) {
			t.Errorf("%s: reason %q, want it to say %q", ig.Name, ig.Reason, want)
		}
	}
}

func TestPodOf(t *testing.T) {
	for holder, pod := range map[string]string{
		"noetl-cmdbus-writer-0#0f6e4c2a-8f0e-4f5b-9d7e-3a0c1b2d4e5f": "noetl-cmdbus-writer-0",
		"name-only": "name-only",
		"a#b#c":     "a",
		"":          "",
	} {
		if got := PodOf(holder); got != pod {
			t.Errorf("PodOf(%q) = %q, want %q", holder, got, pod)
		}
	}
}
