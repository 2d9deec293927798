package election

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

// Integration tests against a real API server (the local control plane, or E2E_KUBECONFIG), with
// short timings: lease 3 s, renew 1 s.

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

const (
	kubeLease = 3 * time.Second
	kubeRenew = 1 * time.Second
)

// rawKube is the API server without KubeStore's guard rails, for the conformance assertions.
type rawKube struct {
	*KubeStore
	client kubernetes.Interface
	ns     string
}

func (r rawKube) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return r.client.CoordinationV1().Leases(r.ns).Update(ctx, l, metav1.UpdateOptions{})
}

func (r rawKube) Delete(ctx context.Context, name string) error {
	return r.client.CoordinationV1().Leases(r.ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// The in-memory store's answers are the API server's: same statuses, same watch events, and the
// same recreation by a PUT without uid that the election's uid precondition exists to prevent.
func TestKubeStoreConformance(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	storeConformance(t, rawKube{KubeStore: NewKubeStore(c.Clientset(), ns), client: c.Clientset(), ns: ns})
}

// kubeWriter is one in-process writer: an election with its own registry and event log.
type kubeWriter struct {
	e      *Election
	stop   context.CancelFunc
	mu     sync.Mutex
	events []Event
}

func (w *kubeWriter) last(o Outcome) (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if w.events[i].Outcome == o {
			return w.events[i], true
		}
	}
	return Event{}, false
}

// lastWrite is the send time of the writer's last successful acquire/renew write.
func (w *kubeWriter) lastWrite() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if o := w.events[i].Outcome; o == Acquired || o == Renewed {
			return w.events[i].Until.Add(-kubeLease)
		}
	}
	return time.Time{}
}

func startKube(t *testing.T, store LeaseStore, ns, name string) *kubeWriter {
	t.Helper()
	w := &kubeWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := testConfig(kubeLease, kubeRenew)
	cfg.Namespace = ns
	e, err := Start(ctx, store, cfg, Options{
		Identity: NewIdentity(name), Registerer: newPlainRegistry(), Logger: discard,
		OnEvent: func(ev Event) { w.mu.Lock(); w.events = append(w.events, ev); w.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.e, w.stop = e, cancel
	t.Cleanup(func() { cancel(); <-e.done })
	return w
}

// Two writers on one shard: one acquires epoch 1, the other is held_by_other. The holder crashes
// (stops without releasing): the other acquires epoch 2 no earlier than a lease duration after the
// holder's last renewal and within lease duration + renew interval of it. A third joins, the holder
// shuts down gracefully: the third acquires epoch 3 within the renew interval + 1 s.
func TestKubeFailover(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	store := NewKubeStore(c.Clientset(), ns)

	a := startKube(t, store, ns, "writer-a")
	waitFor(t, "a acquires", func() bool { return a.e.Token().Valid })
	wantToken(t, "a", a.e, 1, true)
	b := startKube(t, store, ns, "writer-b")
	waitFor(t, "b held by other", func() bool { return outcomes(b.e)[HeldByOther] > 0 })
	waitFor(t, "a renews", func() bool { return outcomes(a.e)[Renewed] >= 2 })
	if b.e.Token().Valid {
		t.Fatal("b valid while a holds")
	}

	a.stop() // a crash: no release
	<-a.e.done
	lastRenewal := a.lastWrite()
	var got Event
	waitFor(t, "b takes over", func() bool { var ok bool; got, ok = b.last(Acquired); return ok })
	wantToken(t, "b", b.e, 2, true)
	sent := got.Until.Add(-kubeLease)
	t.Logf("crash takeover: acquisition sent %v after a's last renewal + lease (answer %v)",
		sent.Sub(lastRenewal.Add(kubeLease)), got.From.Sub(lastRenewal.Add(kubeLease)))
	if sent.Before(lastRenewal.Add(kubeLease)) {
		t.Fatalf("b acquired %v after a's last renewal, before the lease duration", sent.Sub(lastRenewal))
	}
	if got.From.After(lastRenewal.Add(kubeLease + kubeRenew)) {
		t.Fatalf("b acquired %v after a's last renewal, later than lease + renew", got.From.Sub(lastRenewal))
	}

	d := startKube(t, store, ns, "writer-d")
	waitFor(t, "d held by other", func() bool { return outcomes(d.e)[HeldByOther] > 0 })
	relCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.e.Release(relCtx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	waitFor(t, "d takes over", func() bool { var ok bool; got, ok = d.last(Acquired); return ok })
	wantToken(t, "d", d.e, 3, true)
	t.Logf("graceful takeover: %v after the release returned", got.From.Sub(released))
	if got.From.After(released.Add(kubeRenew + time.Second)) {
		t.Fatalf("d acquired %v after the release, later than renew + 1s", got.From.Sub(released))
	}
}

// The writer's ServiceAccount without RBAC: errors_total{reason="forbidden"} climbs, the writer
// keeps running without a token; bind the Role the chart grants and it acquires.
func TestKubeWithoutRBACFailsSoftThenAcquires(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := c.Clientset()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saConfig, err := c.ServiceAccountConfig(ctx, ns, "writer")
	if err != nil {
		t.Fatal(err)
	}
	w := startKube(t, NewKubeStore(mustClient(t, saConfig), ns), ns, "writer-0")
	waitFor(t, "forbidden errors climb", func() bool { return errorsByReason(w.e)["forbidden"] >= 4 })
	if w.e.Token().Valid || !w.e.active.Load() {
		t.Fatalf("without RBAC: token %+v active %v", w.e.Token(), w.e.active.Load())
	}
	if got := errorsByReason(w.e); got["other"]+got["unauthorized"]+got["unreachable"] != 0 {
		t.Fatalf("errors %v: only forbidden expected", got)
	}

	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ehdb-shard-election"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ehdb-shard-election"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "writer", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "acquisition once bound", func() bool { return w.e.Token().Valid })
	wantToken(t, "writer", w.e, 1, true)
}

func mustClient(t *testing.T, rc *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pollOnly hides the store's watch, so the driver learns only from its own calls.
type pollOnly struct{ LeaseStore }

// The Lease is deleted under its holder: the holder reports the loss (it never recreates the
// Lease by renewing over it), and the Lease that follows carries an epoch above the old one. Once
// learnt from the watch, once from the renewal's uid precondition.
func TestKubeDeletedLeaseUnderAHolder(t *testing.T) {
	c := testcluster.ForTest(t)
	for _, tc := range []struct {
		name  string
		store func(*KubeStore) LeaseStore
	}{
		{"watching", func(s *KubeStore) LeaseStore { return s }},
		{"polling", func(s *KubeStore) LeaseStore { return pollOnly{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := c.NewNamespace(t)
			leases := c.Clientset().CoordinationV1().Leases(ns)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w := startKube(t, tc.store(NewKubeStore(c.Clientset(), ns)), ns, "writer-0")
			waitFor(t, "acquired", func() bool { return w.e.Token().Valid })
			old, err := leases.Get(ctx, testLease, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			watcher, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: old.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer watcher.Stop()
			if err := leases.Delete(ctx, testLease, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "loss reported", func() bool { return outcomes(w.e)[Lost] == 1 })
			waitFor(t, "next epoch", func() bool { return w.e.Token().Valid && w.e.Token().Epoch == 2 })

			// What the API saw after the deletion: a fresh Lease (new uid) created with epoch 2, and
			// never one recreated with the old epoch.
			seen := false
			for ev := range watcher.ResultChan() {
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok || ev.Type == watch.Deleted || ev.Type == watch.Modified && l.UID == old.UID {
					continue
				}
				if l.UID == old.UID || epochOf(l) != 2 {
					t.Fatalf("after the deletion: %s uid %s epoch %d (old uid %s)", ev.Type, l.UID, epochOf(l), old.UID)
				}
				seen = true
				break
			}
			if !seen {
				t.Fatal("the watch ended before the new Lease appeared")
			}
		})
	}
}

// The API server goes away under a holder: the token lapses on time while holds_lease stays 1,
// every failed call is counted as unreachable, the loop carries on; when the server is back the
// holder re-acquires with the next epoch (its token lapsed, so it may not resume the old one).
func TestKubeAPIServerOutage(t *testing.T) {
	c := testcluster.ForTest(t)
	if !c.Local() {
		t.Skip("needs the local control plane, which the test may stop")
	}
	ns := c.NewNamespace(t)
	w := startKube(t, NewKubeStore(c.Clientset(), ns), ns, "writer-0")
	waitFor(t, "acquired", func() bool { return w.e.Token().Valid })
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = c.StartAPIServer(context.Background())
		}
	}()
	waitFor(t, "token lapses", func() bool { return !w.e.Token().Valid })
	if lapse := time.Since(w.lastWrite()); lapse < kubeLease {
		t.Fatalf("token invalid %v after the last write, before the lease duration", lapse)
	}
	if s := w.e.state.Load(); !s.holds {
		t.Fatal("holds_lease must stay 1: no call said otherwise")
	}
	waitFor(t, "unreachable errors", func() bool { return errorsByReason(w.e)["unreachable"] >= 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitFor(t, "re-acquired", func() bool { return w.e.Token().Valid })
	// Above the epoch it held, and the one the record carries. Not exactly 2: on a loaded machine
	// the first write after the restart can land while its answer is lost to the call's timeout,
	// and a record this process never saw itself write is timed like anyone's, so the next
	// acquisition goes above it (3; seen in a cold CI run).
	tok := w.e.Token()
	l, err := c.Clientset().CoordinationV1().Leases(ns).Get(ctx, LeaseName(testShard), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Epoch < 2 || int64(tok.Epoch) != int64(ptr.Deref(l.Spec.LeaseTransitions, 0)) || holderOf(l) != w.e.Identity() {
		t.Fatalf("re-acquired with token %+v; the Lease names %q at epoch %d", tok, holderOf(l), ptr.Deref(l.Spec.LeaseTransitions, 0))
	}
}

// A writer's boot path against a real cluster: the shard from the StatefulSet ordinal in HOSTNAME,
// the Lease named after it, the clamped pair from the environment.
func TestKubeStartFromEnvironment(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	reg := newPlainRegistry()
	e := StartFromEnvironment(ctx, env(EnvElection, "true", "HOSTNAME", "noetl-cmdbus-writer-3", EnvNamespace, ns,
		EnvLeaseSecs, "3", EnvRenewSecs, "9"), c.Config, Options{Registerer: reg, Logger: discard})
	t.Cleanup(func() { cancel(); <-e.done })
	waitFor(t, "acquired", func() bool { return e.Token().Valid })
	l, err := c.Clientset().CoordinationV1().Leases(ns).Get(ctx, "ehdb-shard-00000003", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(l) != e.Identity() || !strings.HasPrefix(e.Identity(), "noetl-cmdbus-writer-3#") || *l.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("lease %+v, identity %q", l.Spec, e.Identity())
	}
	wantGauges(t, reg, map[string]float64{"ehdb_election_active": 1, "ehdb_election_token_valid": 1,
		"ehdb_election_lease_duration_seconds": 3, "ehdb_election_renew_interval_seconds": 1})
}
