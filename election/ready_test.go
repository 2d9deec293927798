package election

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// armedEnv is a writer's environment with the fence armed and the election on.
var armedEnv = env(EnvFencing, "enforce", EnvElection, "true")

// wantNotReady fails unless err is a *NotReady for reason whose detail mentions every part.
func wantNotReady(t *testing.T, what string, err error, reason NotReadyReason, parts ...string) {
	t.Helper()
	var nr *NotReady
	if !errors.As(err, &nr) {
		t.Fatalf("%s: Check() = %v, want not ready (%s)", what, err, reason)
	}
	if nr.Reason != reason {
		t.Fatalf("%s: reason %s (%s), want %s", what, nr.Reason, nr.Detail, reason)
	}
	for _, p := range parts {
		if !strings.Contains(nr.Detail, p) {
			t.Errorf("%s: detail %q does not mention %q", what, nr.Detail, p)
		}
	}
}

func wantReady(t *testing.T, what string, r *Readiness) {
	t.Helper()
	if err := r.Check(); err != nil {
		t.Fatalf("%s: not ready: %v", what, err)
	}
}

func TestDecideReady(t *testing.T) {
	const bound = 45 * time.Second
	running := readyFacts{armed: true, fencing: "enforce", enabled: true, hasShard: true, started: true, running: true, bound: bound, shard: 7}
	with := func(mod func(*readyFacts)) readyFacts { f := running; mod(&f); return f }
	for _, tc := range []struct {
		name   string
		facts  readyFacts
		reason NotReadyReason // "" = ready
		parts  []string
	}{
		{"not armed, no election: ready (the fence lets writes through)", readyFacts{}, "", nil},
		{"not armed, election stopped: ready", readyFacts{started: true}, "", nil},
		{"armed, token valid", with(func(f *readyFacts) { f.token = Token{Epoch: 3, Valid: true} }), "", nil},
		{"armed, election off", readyFacts{armed: true, fencing: "enforce"}, ElectionOff, []string{`NOETL_EHDB_FENCING="enforce"`, "NOETL_EHDB_ELECTION is not true", "shadow"}},
		{"armed, declined: no shard", readyFacts{armed: true, fencing: "ENFORCE", enabled: true}, ElectionDeclined, []string{"no shard", EnvShard}},
		{"armed, declined otherwise", readyFacts{armed: true, fencing: "enforce", enabled: true, hasShard: true}, ElectionDeclined, []string{"start-up log line"}},
		{"armed, released", with(func(f *readyFacts) { f.running, f.releasing, f.token.Epoch = false, true, 4 }), ElectionStopped, []string{"released"}},
		{"armed, stopped", with(func(f *readyFacts) { f.running = false }), ElectionStopped, []string{"stopped"}},
		{"armed, waiting at start", running, NoTokenYet, []string{"no token yet, 0s after start", "beyond 45s"}},
		{"armed, waiting, a holder seen, errors", with(func(f *readyFacts) { f.age, f.held, f.errs = 20*time.Second, 4, "unreachable 2" }),
			NoTokenYet, []string{"20s after start", "4 round(s) found ehdb-shard-00000007 held by another process (or absent, its absence being timed)", "store errors: unreachable 2"}},
		{"armed, at the bound: still waiting", with(func(f *readyFacts) { f.age = bound }), NoTokenYet, nil},
		{"armed, beyond the bound: cannot mint", with(func(f *readyFacts) { f.age, f.errs = bound+time.Nanosecond, "forbidden 9" }),
			CannotMint, []string{"no token within 45s", "forbidden 9", "shard 7", "ServiceAccount"}},
		{"armed, lapsed after a holding (partition)", with(func(f *readyFacts) { f.age, f.token.Epoch, f.errs = time.Hour, 2, "unreachable 5" }),
			TokenLapsed, []string{"epoch 2 is no longer valid", "unreachable 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decideReady(tc.facts)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("not ready: %v", err)
				}
				return
			}
			wantNotReady(t, tc.name, err, tc.reason, tc.parts...)
		})
	}
}

// startLogged is start with the election's log in buf.
func startLogged(t *testing.T, store LeaseStore, clk *clocktesting.FakeClock, id string, buf *bytes.Buffer) (*Election, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := Start(ctx, store, testConfig(lease, renew), Options{Registerer: newPlainRegistry(), Clock: clk,
		Logger: slog.New(slog.NewJSONHandler(buf, nil)), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-e.done })
	return e, cancel
}

// An armed writer is ready exactly while its token is valid: not before the first acquisition,
// not after the token lapsed (a writer cut off from the API server), again once it re-acquires.
func TestReadinessFollowsTheToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	store := &hookStore{inner: fake.NewLeaseStore(), clk: clk}
	unreachable := apierrors.NewServiceUnavailable("the API server is unreachable")
	store.setFail(func(string) error { return unreachable })
	e, _ := start(t, store, clk, "w#1", lease, renew)
	r := NewReadiness(e, armedEnv)
	waitFor(t, "the first attempt fails", func() bool { return errorsByReason(e)["unreachable"] > 0 })
	wantNotReady(t, "before the first token", r.Check(), NoTokenYet, "store errors: unreachable")

	store.setFail(nil)
	stepUntil(t, clk, renew, "acquisition", func() bool { return e.Token().Valid })
	wantReady(t, "holding", r)

	store.setFail(func(string) error { return unreachable })
	for i := 0; i < 3; i++ { // renewals at 10s, 15s, 20s fail; the token (sent at 5s) lapses at 5s + 14.85s
		n := errorsByReason(e)["unreachable"]
		stepUntil(t, clk, renew, "a failed renewal", func() bool { return errorsByReason(e)["unreachable"] > n })
	}
	if e.Token().Valid {
		t.Fatal("the token is still valid 15s after its last write")
	}
	wantNotReady(t, "partitioned", r.Check(), TokenLapsed, "epoch 1 is no longer valid", "unreachable")

	store.setFail(nil)
	stepUntil(t, clk, renew, "re-acquisition", func() bool { return e.Token().Valid })
	wantToken(t, "after the partition", e, 2, true)
	wantReady(t, "holding again", r)
}

// A successor waiting out a crashed predecessor's lease is not ready (it cannot write), and is
// still "waiting", not "cannot mint", at the last instant before its takeover: the bound covers
// the longest wait of a correct successor. Ready once it holds.
func TestASuccessorIsReadyOnceItTakesOverACrashedHolder(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder, crash := start(t, store, clk, "holder#1", lease, renew)
	waitFor(t, "holder acquires", func() bool { return holder.Token().Valid })
	standby, _ := start(t, store, clk, "standby#2", lease, renew)
	r := NewReadiness(standby, armedEnv)
	waitFor(t, "standby watching", func() bool { return watchers(store) == 2 && outcomes(standby)[HeldByOther] == 1 })
	wantNotReady(t, "standby", r.Check(), NoTokenYet, "held by another process")
	wantReady(t, "the holder", NewReadiness(holder, armedEnv))

	for i := uint64(1); i <= 2; i++ { // renewals at 5s and 10s, then the holder crashes
		parked(t, clk, 2)
		clk.Step(renew)
		waitFor(t, "renewal", func() bool { return outcomes(holder)[Renewed] == i })
	}
	crash()
	<-holder.done
	waitFor(t, "standby saw every renewal", func() bool { return standby.watchEvents.Load() == storeRV(store) })
	// Its driver arms the timer to the first instant a takeover is allowed only after it has
	// handled the last event: moving the clock before that would set the timer from the new time.
	parked(t, clk, 1)

	held := outcomes(standby)[HeldByOther]
	clk.SetTime(t0.Add(10*time.Second + lease)) // the last instant the crashed holder's lease is live
	// Its poll fires now and finds the Lease still live; the next move of the clock must wait
	// until the driver has armed its timer for the first instant after (else it arms it from there).
	waitFor(t, "standby's round at the boundary", func() bool { return outcomes(standby)[HeldByOther] > held && clk.HasWaiters() })
	wantNotReady(t, "standby, the predecessor's lease still live", r.Check(), NoTokenYet)
	// The first instant after it at which a round may run: rounds run minRoundGap apart.
	clk.SetTime(t0.Add(10*time.Second + lease + minRoundGap))
	waitFor(t, "standby takes over", func() bool { return standby.Token().Valid })
	wantReady(t, "the successor", r)
	if age := clk.Since(r.start); age > ReadinessBound(standby.cfg) {
		t.Fatalf("the takeover came %v after start, beyond the bound %v", age, ReadinessBound(standby.cfg))
	}
}

// A standby whose holder keeps renewing never mints: beyond the bound it "cannot mint", and says
// that another process holds the shard. Released, the Lease is taken over and the standby is ready.
func TestAStandbyThatNeverAcquiresCannotMint(t *testing.T) {
	store, clk := fake.NewLeaseStore(), clocktesting.NewFakeClock(t0)
	holder, _ := start(t, store, clk, "holder#1", lease, renew)
	waitFor(t, "holder acquires", func() bool { return holder.Token().Valid })
	var buf bytes.Buffer
	standby, _ := startLogged(t, store, clk, "standby#2", &buf)
	r := NewReadiness(standby, armedEnv)
	waitFor(t, "standby watching", func() bool { return watchers(store) == 2 && outcomes(standby)[HeldByOther] == 1 })
	bound := ReadinessBound(standby.cfg)
	for i := uint64(1); clk.Since(r.start) <= bound; i++ {
		wantNotReady(t, "standby within the bound", r.Check(), NoTokenYet)
		parked(t, clk, 2)
		clk.Step(renew)
		waitFor(t, "renewal", func() bool { return outcomes(holder)[Renewed] == i })
	}
	waitFor(t, "standby saw every renewal", func() bool { return standby.watchEvents.Load() == storeRV(store) })
	wantNotReady(t, "standby beyond the bound", r.Check(), CannotMint, "held by another process", "another writer running for shard 7")
	wantNotReady(t, "asked again", r.Check(), CannotMint)
	if n := strings.Count(buf.String(), "minted no token"); n != 1 {
		t.Fatalf("want the failure logged once, got %d times:\n%s", n, buf.String())
	}

	clk.Step(time.Second) // rounds run at least 1ms apart on the election's clock
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "standby takes the released Lease", func() bool { return standby.Token().Valid })
	wantReady(t, "the standby, now holding", r)
}

// An election refused by RBAC never mints: not ready from the start, "cannot mint" beyond the bound.
func TestAForbiddenElectionCannotMint(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	store := &hookStore{inner: fake.NewLeaseStore(), clk: clk}
	store.setFail(func(string) error {
		return apierrors.NewForbidden(leaseResource, testLease, errors.New("no RoleBinding"))
	})
	e, _ := start(t, store, clk, "w#1", lease, renew)
	r := NewReadiness(e, armedEnv)
	waitFor(t, "the first attempt is refused", func() bool { return errorsByReason(e)["forbidden"] > 0 })
	wantNotReady(t, "at start", r.Check(), NoTokenYet, "store errors: forbidden")
	clk.Step(ReadinessBound(e.cfg) + time.Nanosecond)
	wantNotReady(t, "beyond the bound", r.Check(), CannotMint, "forbidden", "ServiceAccount")
}

// What the writer's boot path leaves: an armed fence with the election off or declined is never
// ready; an unarmed one always is; a release or a stop ends readiness.
func TestReadinessFromTheEnvironment(t *testing.T) {
	if _, err := os.Stat(serviceAccountNamespaceFile); err == nil {
		t.Skip("running in a pod: the namespace file exists")
	}
	for _, tc := range []struct {
		name   string
		env    func(string) (string, bool)
		reason NotReadyReason // "" = ready
		parts  []string
	}{
		{"no fencing, no election", env("HOSTNAME", "w-0"), "", nil},
		{"shadow, no election", env(EnvFencing, "shadow", "HOSTNAME", "w-0"), "", nil},
		{"unknown fencing value: not armed", env(EnvFencing, "enforced", "HOSTNAME", "w-0"), "", nil},
		{"enforce (the image's ENV), election off", env(EnvFencing, "enforce", "HOSTNAME", "w-0"), ElectionOff, []string{"NOETL_EHDB_ELECTION is not true"}},
		{"enforce, case and space folded", env(EnvFencing, " Enforce ", "HOSTNAME", "w-0"), ElectionOff, nil},
		{"enforce, election unparseable", env(EnvFencing, "enforce", EnvElection, "yes", "HOSTNAME", "w-0"), ElectionOff, nil},
		{"enforce, declined: no shard", env(EnvFencing, "enforce", EnvElection, "true", "HOSTNAME", "laptop", "POD_NAMESPACE", "noetl"), ElectionDeclined, []string{"no shard"}},
		{"enforce, declined: no namespace", env(EnvFencing, "enforce", EnvElection, "true", "HOSTNAME", "w-0"), ElectionDeclined, []string{"start-up log line"}},
		{"enforce, declined: no in-cluster configuration", env(EnvFencing, "enforce", EnvElection, "true", "HOSTNAME", "w-0", "POD_NAMESPACE", "noetl"), ElectionDeclined, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "in-cluster") && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				t.Skip("running in a pod")
			}
			e := StartFromEnvironment(context.Background(), tc.env, nil, Options{Registerer: newPlainRegistry(), Logger: discard})
			err := NewReadiness(e, tc.env).Check()
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("not ready: %v", err)
				}
				return
			}
			wantNotReady(t, tc.name, err, tc.reason, tc.parts...)
		})
	}

	t.Run("released", func(t *testing.T) {
		e, _ := start(t, fake.NewLeaseStore(), clocktesting.NewFakeClock(t0), "w#1", lease, renew)
		r := NewReadiness(e, armedEnv)
		waitFor(t, "acquisition", func() bool { return e.Token().Valid })
		wantReady(t, "holding", r)
		if err := e.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantNotReady(t, "released", r.Check(), ElectionStopped, "released")
	})
	t.Run("stopped", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		e, stop := start(t, fake.NewLeaseStore(), clk, "w#1", lease, renew)
		r := NewReadiness(e, armedEnv)
		waitFor(t, "acquisition", func() bool { return e.Token().Valid })
		stop() // a crash as far as the Lease is concerned: the token stays valid until it lapses
		<-e.done
		wantReady(t, "stopped, the token not yet lapsed", r)
		clk.Step(lease)
		wantNotReady(t, "stopped", r.Check(), ElectionStopped, "stopped")
	})
}

// Check runs on every probe: ready, it allocates nothing.
func TestCheckAllocatesNothingWhenReady(t *testing.T) {
	e, _ := start(t, fake.NewLeaseStore(), clocktesting.NewFakeClock(t0), "w#1", lease, renew)
	waitFor(t, "acquisition", func() bool { return e.Token().Valid })
	for _, r := range []*Readiness{NewReadiness(e, armedEnv), NewReadiness(e, env())} {
		if n := testing.AllocsPerRun(100, func() { _ = r.Check() }); n != 0 {
			t.Fatalf("Check allocates %v times per call", n)
		}
	}
}
