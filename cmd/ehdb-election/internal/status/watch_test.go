package status

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/harness"
)

// watchRun runs `status --watch` against the fake clientset until the returned stop is called;
// stop returns the exit code.
func watchRun(t *testing.T, cs kubernetes.Interface, clk clock.PassiveClock, args ...string) (stdout, stderr *harness.SyncBuffer, stop func() int) {
	t.Helper()
	isolate(t)
	// The kubeconfig names a server that is never contacted: the fake clientset replaces the client.
	kc := kubeconfig(t, "http://127.0.0.1:1")
	stdout, stderr = &harness.SyncBuffer{}, &harness.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"--kubeconfig", kc, "--watch"}, args...), stdout, stderr, Options{
			Clock:     clk,
			Clientset: func(*rest.Config) (kubernetes.Interface, error) { return cs, nil },
		})
	}()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

// waitFor waits until the output holds want n times (the watch is bounded by the test's context,
// not by a sleep).
func waitFor(t *testing.T, what string, out *harness.SyncBuffer, want string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Count(out.String(), want) >= n, nil
	})
	if err != nil {
		t.Fatalf("%s: %q never appeared %d times in:\n%s", what, want, n, out.String())
	}
}

func leaseIn(ns string, l coordinationv1.Lease) *coordinationv1.Lease {
	l.Namespace = ns
	return &l
}

// A takeover is a Lease event: the view redraws with the new holder and epoch, with no polling —
// the fake clientset sees one list and one watch, however long the view stays open.
func TestRunWatchRedrawsOnLeaseEvents(t *testing.T) {
	now := time.Now()
	l := lease("ehdb-shard-00000000", "writer-0#a", 2, d(now.Sub(t0)), ptr.To[int32](300))
	cs := fake.NewClientset(leaseIn("noetl", l))
	out, errOut, stop := watchRun(t, cs, clock.RealClock{})
	waitFor(t, "first draw", out, "writer-0#a", 1)

	// writer-1 takes shard 0 over: holder, epoch and renewTime change in one update. The fake
	// watch may start after this update; keep making it until the view shows one.
	takeover := func(epoch int32) {
		cur, err := cs.CoordinationV1().Leases("noetl").Get(context.Background(), l.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.HolderIdentity, cur.Spec.LeaseTransitions = ptr.To("writer-1#b"), ptr.To(epoch)
		if _, err := cs.CoordinationV1().Leases("noetl").Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		takeover(3)
		return strings.Contains(out.String(), "writer-1#b"), nil
	})
	if err != nil {
		t.Fatalf("no redraw after the takeover:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	if code := stop(); code != ExitOK {
		t.Errorf("exit %d after the context ended; stderr:\n%s", code, errOut.String())
	}
	// Every draw is a whole table: header first.
	draws := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	for _, d := range draws {
		if !strings.HasPrefix(d, "SHARD") {
			t.Errorf("a draw without its header:\n%s", d)
		}
	}
	if last := draws[len(draws)-1]; !strings.Contains(last, "writer-1#b   3 ") {
		t.Errorf("last draw:\n%s", last)
	}
	var lists, watches int
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "list":
			lists++
		case "watch":
			watches++
		}
	}
	if lists != 1 || watches != 1 {
		t.Errorf("%d lists and %d watches, want 1 and 1 (events, not polling): %v", lists, watches, cs.Actions())
	}
}

// A live Lease whose writer dies expires without any Lease event: the view redraws at the instant
// it expires, by the clock, not by polling the API server.
func TestRunWatchRedrawsWhenALeaseExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Second))
	cs := fake.NewClientset(leaseIn("noetl", lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15))))
	out, errOut, stop := watchRun(t, cs, clk)
	waitFor(t, "first draw", out, "live", 1)
	// Just before the boundary nothing is due; just after, the row turns expired.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatalf("the view set no timer for the expiry:\n%s", out.String())
	}
	clk.Step(14 * time.Second) // t0+15s: renewTime + duration, still live
	clk.Step(time.Microsecond)
	waitFor(t, "redraw at expiry", out, "expired", 1)
	if code := stop(); code != ExitOK {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
	if strings.Count(out.String(), "SHARD") != 2 {
		t.Errorf("want exactly two draws (start, expiry):\n%s", out.String())
	}
}

// A denial ends the watch with the denial's exit code instead of retrying in silence (a retried
// denial would re-list on a backoff: polling). Listing but not watching is a denial too, and the
// hint names both verbs.
func TestRunWatchDenied(t *testing.T) {
	forbidden := func(verb string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "",
			errors.New(`User "bob" cannot `+verb+` resource "leases" in API group "coordination.k8s.io" in the namespace "noetl"`))
	}
	t.Run("list", func(t *testing.T) {
		cs := fake.NewClientset()
		cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, forbidden("list")
		})
		_, errOut, stop := watchRun(t, cs, clock.RealClock{}, "-o", "json")
		waitFor(t, "the denial", errOut, "--verb=list,watch", 1)
		if code := stop(); code != ExitDenied || !strings.Contains(errOut.String(), `User "bob" cannot list`) {
			t.Errorf("exit %d, want %d:\n%s", code, ExitDenied, errOut.String())
		}
	})
	// The identity may list, its first watch runs, then it loses "watch" (a binding edited or
	// revoked): when the watch ends, the next one is denied and the view must stop, not re-list.
	t.Run("watch denied after the first draw", func(t *testing.T) {
		cs := fake.NewClientset(leaseIn("noetl", lease("ehdb-shard-00000000", "writer-0#a", 2, d(0), ptr.To[int32](15))))
		first := watch.NewFake()
		var watches atomic.Int32
		cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
			if watches.Add(1) == 1 {
				return true, first, nil
			}
			return true, nil, forbidden("watch")
		})
		out, errOut, stop := watchRun(t, cs, clock.RealClock{})
		waitFor(t, "first draw", out, "writer-0#a", 1)
		first.Stop() // the API server ends the watch (timeout, restart)
		waitFor(t, "the denial", errOut, `verbs "list" and "watch"`, 1)
		if code := stop(); code != ExitDenied || !strings.Contains(errOut.String(), `User "bob" cannot watch`) {
			t.Errorf("exit %d, want %d:\n%s", code, ExitDenied, errOut.String())
		}
	})
}

func TestRunWatchWithScrapeIsUsage(t *testing.T) {
	isolate(t)
	code, _, errOut := runStatus(t, t0, "--watch", "--scrape")
	if code != ExitUsage || !strings.Contains(errOut, "--scrape cannot be combined with --watch") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// -A --watch -o json: a stream of whole documents, one per draw, each parseable on its own; a
// Lease created in a third namespace shows up in the next one.
func TestRunWatchAllNamespacesJSONStream(t *testing.T) {
	now := time.Now()
	mk := func(ns, holder string) *coordinationv1.Lease {
		return leaseIn(ns, lease("ehdb-shard-00000000", holder, 1, d(now.Sub(t0)), ptr.To[int32](300)))
	}
	cs := fake.NewClientset(mk("a", "writer-a#1"), mk("b", "writer-b#1"))
	out, errOut, stop := watchRun(t, cs, clock.RealClock{}, "-A", "-o", "json")
	waitFor(t, "first document", out, "writer-b#1", 1)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.CoordinationV1().Leases("c").Create(ctx, mk("c", "writer-c#1"), metav1.CreateOptions{}); err != nil {
			// Created before the fake's watch began: delete and create again until one is seen.
			_ = cs.CoordinationV1().Leases("c").Delete(ctx, "ehdb-shard-00000000", metav1.DeleteOptions{})
		}
		return strings.Contains(out.String(), "writer-c#1"), nil
	})
	if err != nil {
		t.Fatalf("no document with the new Lease:\n%s\n%s", out.String(), errOut.String())
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var docs []Document
	for dec.More() {
		var doc Document
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("document %d: %v\n%s", len(docs), err, out.String())
		}
		docs = append(docs, doc)
	}
	last := docs[len(docs)-1]
	if len(docs) < 2 || !last.AllNamespaces || len(last.Leases) != 3 || last.Leases[2].Namespace != "c" || last.Kind != DocumentKind {
		t.Errorf("%d documents, the last: %+v", len(docs), last)
	}
}
