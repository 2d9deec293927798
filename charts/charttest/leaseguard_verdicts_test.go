package charttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// verdictsFile holds the real lease guard's verdict on every update of a grid of Lease specs. The
// election's simulation excuses an overlap as impersonation only after a write this guard refuses,
// so its model of the guard (election's guardRefusal, checked against this file by
// TestGuardRefusalIsTheChartsGuard) must refuse exactly what the chart's policy refuses: a
// refusal the cluster does not make would make the simulation kinder than the cluster.
const verdictsFile = "../../election/testdata/leaseguard-verdicts.json"

// guardSpec is the part of a Lease spec the guard judges; nil fields are absent.
type guardSpec struct {
	Holder   *string `json:"holder"`
	Epoch    *int32  `json:"epoch"`
	Duration *int32  `json:"duration"`
}

type guardVerdict struct {
	Old     guardSpec `json:"old"`
	New     guardSpec `json:"new"`
	Refused bool      `json:"refused"`
}

// guardGrid is every spec of the grid: absent, empty, one holder or another; absent, 0, or around
// 5; absent, shorter, equal or longer than 10.
func guardGrid(holders []*string, epochs, durations []*int32) []guardSpec {
	var out []guardSpec
	for _, h := range holders {
		for _, e := range epochs {
			for _, d := range durations {
				out = append(out, guardSpec{h, e, d})
			}
		}
	}
	return out
}

func (g guardSpec) apply(l *coordinationv1.Lease) {
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions, l.Spec.LeaseDurationSeconds = g.Holder, g.Epoch, g.Duration
}

// TestLeaseGuardVerdicts records the installed guard's verdict (by server-side dry run, as a
// break-glass user with every RBAC permission, so only the guard's bounds judge) on each update
// from an old spec to a new one, and compares them with verdictsFile (EHDB_UPDATE_VERDICTS=1
// rewrites it).
func TestLeaseGuardVerdicts(t *testing.T) {
	t.Parallel()
	r, _ := installGuardWithLease(t, map[string]any{"leaseGuard": map[string]any{"breakGlass": map[string]any{"users": []any{"verdicts"}}}})
	leases := impersonating(t, r, "verdicts").CoordinationV1().Leases(r.ns)
	ctx := context.Background()
	olds := guardGrid([]*string{nil, ptr.To(""), ptr.To("a#1")}, []*int32{nil, ptr.To[int32](0), ptr.To[int32](5)}, []*int32{nil, ptr.To[int32](10)})
	news := guardGrid([]*string{nil, ptr.To(""), ptr.To("a#1"), ptr.To("b#1")},
		[]*int32{nil, ptr.To[int32](0), ptr.To[int32](1), ptr.To[int32](4), ptr.To[int32](5), ptr.To[int32](6), ptr.To[int32](7)},
		[]*int32{nil, ptr.To[int32](5), ptr.To[int32](10), ptr.To[int32](20)})
	got := make([]guardVerdict, len(olds)*len(news))
	var wg sync.WaitGroup
	errs := make(chan error, len(olds))
	for i, old := range olds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := newLease(fmt.Sprintf("ehdb-shard-%08d", 100+i), "", 0)
			old.apply(l)
			base, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				errs <- fmt.Errorf("create %+v: %w", old, err)
				return
			}
			for j, nu := range news {
				next := base.DeepCopy()
				nu.apply(next)
				_, err := leases.Update(ctx, next, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
					errs <- fmt.Errorf("update %+v -> %+v: %w", old, nu, err)
					return
				}
				got[i*len(news)+j] = guardVerdict{old, nu, err != nil}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	path := filepath.Clean(verdictsFile)
	if os.Getenv("EHDB_UPDATE_VERDICTS") != "" {
		// One verdict a line: a change of the guard reads as a diff of the lines it changes.
		b := []byte("[\n")
		for i, v := range got {
			line, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, line...)
			if i < len(got)-1 {
				b = append(b, ',')
			}
			b = append(b, '\n')
		}
		if err := os.WriteFile(path, append(b, "]\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d verdicts to %s", len(got), path)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (EHDB_UPDATE_VERDICTS=1 records it)", err)
	}
	var want []guardVerdict
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(want) != len(got) {
		t.Fatalf("%s has %d verdicts, the grid %d: EHDB_UPDATE_VERDICTS=1 records it again", path, len(want), len(got))
	}
	for i := range got {
		gj, _ := json.Marshal(got[i])
		wj, _ := json.Marshal(want[i])
		if g, w := got[i], want[i]; string(gj) != string(wj) {
			t.Errorf("the guard's verdict changed: %s -> %s refused=%v, recorded %v (EHDB_UPDATE_VERDICTS=1 records it, then the election's model must follow)",
				show(g.Old), show(g.New), g.Refused, w.Refused)
		}
	}
}

func show(g guardSpec) string {
	s := func(p *string) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", *p)
	}
	i := func(p *int32) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("{holder %s epoch %s duration %s}", s(g.Holder), i(g.Epoch), i(g.Duration))
}
