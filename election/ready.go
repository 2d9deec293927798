package election

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Readiness is the writer's readiness backstop: it fails while the writer's fence is armed
// (NOETL_EHDB_FENCING=enforce) and its token is not valid, so that a writer armed by a path the
// admission guard cannot see — an image's ENV, say — with an election that cannot mint never
// counts as Ready. A StatefulSet's rolling update then stops at its first such Pod: one shard
// pays for the wrong admission, not all of them. A writer whose fence is not armed is always
// ready as far as this check goes (its writes pass without a token).
//
// What it decides, armed:
//
//   - ready only while Token is valid, also in the first moments after start: a start-up grace
//     counted as ready would let the rolling update move past a Pod that cannot mint (with
//     three replicas, the whole rollout fits in one grace period);
//   - a standby (the Lease held by another process) is not ready: it cannot write. In this
//     system one process owns a shard (the StatefulSet ordinal), so a standby is the successor
//     Pod waiting out its predecessor's lease — at once after a graceful release, at most about
//     a lease plus a renew interval after a crash — and a rollout waits that long, never
//     forever. A standby that never acquires means another process holds the shard: a fault
//     (e.g. a template giving every Pod one shard) that the rollout must stop on. A topology
//     with several processes per shard behind a Deployment (hot standbys) would stall its
//     rollouts on this check and must not use it as its readiness;
//   - a writer whose token lapsed after it held one (partitioned from the API server, its
//     RoleBinding gone, its Lease lost) is not ready either: its fence rejects every write,
//     so it leaves the Service's endpoints (and the headless Service's DNS) until it renews
//     or re-acquires, and a rolling update waits for it. Its writes fail either way; out of
//     the endpoints, clients see it gone instead of fenced. It is not restarted (this is not
//     a liveness signal: a restart cannot give it a token);
//   - an election stopped without a release (its context done: a crash as far as the Lease is
//     concerned) keeps its token, and this readiness, until the token lapses; a released one
//     is not ready from the release on.
//
// The bound (ReadinessBound) only names the failure: no token yet within it is "waiting"
// (a successor waits out its predecessor's lease), none beyond it is "cannot mint", logged once.
type Readiness struct {
	e      *Election
	cfg    Config // the writer's environment, through ParseConfig
	start  time.Time
	bound  time.Duration
	logged atomic.Bool
}

// ReadinessBound is how long after start a running, armed election may go without its first
// token before it counts as unable to mint: three lease durations. A correct successor waits
// for its first token at most about a lease (its predecessor's last renewal, watched unchanged
// for more than the lease on its own clock) plus a renew interval (its first read and its
// write, each within half of one), so 1.5 leases; the bound doubles that. A predecessor that
// ran a longer lease makes the successor wait that one out, past the bound: the message then
// says "cannot mint" early, the readiness is the same.
func ReadinessBound(cfg Config) time.Duration { return 3 * cfg.LeaseDuration }

// NewReadiness returns the readiness of a writer whose election is e, started from the
// environment lookup (the one passed to StartFromEnvironment), timed from now: call it right
// after the start.
func NewReadiness(e *Election, lookup func(string) (string, bool)) *Readiness {
	cfg, _ := ParseConfig(lookup)
	dur := cfg.LeaseDuration
	if e.cfg.Enabled {
		dur = e.cfg.LeaseDuration // what runs
	}
	return &Readiness{e: e, cfg: cfg, start: e.clock.Now(), bound: ReadinessBound(Config{LeaseDuration: dur})}
}

// NotReadyReason says why a writer is not ready.
type NotReadyReason string

// The reasons Check gives.
const (
	ElectionOff      NotReadyReason = "election_off"      // NOETL_EHDB_ELECTION is not true
	ElectionDeclined NotReadyReason = "election_declined" // enabled, but it could not run
	ElectionStopped  NotReadyReason = "election_stopped"  // released (shutting down) or stopped
	NoTokenYet       NotReadyReason = "no_token_yet"      // running, no token yet, within the bound
	CannotMint       NotReadyReason = "cannot_mint"       // running, no token ever, beyond the bound
	TokenLapsed      NotReadyReason = "token_lapsed"      // it held a token; it is no longer valid
)

// NotReady is Check's answer when the writer is not ready.
type NotReady struct {
	Reason NotReadyReason
	Detail string
}

func (n *NotReady) Error() string { return string(n.Reason) + ": " + n.Detail }

// readyFacts is what the decision looks at, gathered at one instant.
type readyFacts struct {
	armed     bool
	fencing   string
	enabled   bool // the environment asks for an election
	hasShard  bool
	started   bool // the election was started (not declined, not off)
	running   bool // its driver runs
	releasing bool
	token     Token
	age       time.Duration // since start
	bound     time.Duration
	shard     uint32
	held      uint64 // rounds that found the Lease held by another process, or absent and being timed
	errs      string // store errors so far, by reason ("" = none)
}

// Check says whether the writer is ready: nil, or a *NotReady saying why not. It is cheap (no
// API call, no allocation when ready), safe for concurrent use, and meant for every probe.
func (r *Readiness) Check() error {
	if !r.cfg.Armed() {
		return nil
	}
	e := r.e
	f := readyFacts{
		armed: true, fencing: r.cfg.Fencing, enabled: r.cfg.Enabled, hasShard: r.cfg.HasShard,
		started: e.done != nil, running: e.active.Load(), releasing: e.releasing.Load(),
		token: e.Token(), bound: r.bound, shard: e.cfg.Shard,
	}
	if f.token.Valid {
		return nil
	}
	f.age = e.clock.Since(r.start)
	f.held = e.outcomes[heldByOtherIndex].Load()
	var errs []string
	for i := reason(0); i < numReasons; i++ {
		if n := e.errs[i].Load(); n > 0 {
			errs = append(errs, fmt.Sprintf("%s %d", i, n))
		}
	}
	f.errs = strings.Join(errs, ", ")
	err := decideReady(f)
	if nr, ok := err.(*NotReady); ok && nr.Reason == CannotMint && r.logged.CompareAndSwap(false, true) {
		e.log.Error("the fence is armed and the election has minted no token: this writer stays unready", "detail", nr.Detail)
	}
	return err
}

// heldByOtherIndex is HeldByOther's place in outcomeNames (and Election.outcomes).
var heldByOtherIndex = func() int {
	for i, o := range outcomeNames {
		if o == HeldByOther {
			return i
		}
	}
	panic("election: no held_by_other outcome")
}()

// decideReady is the decision, on facts gathered at one instant.
func decideReady(f readyFacts) error {
	if !f.armed || f.token.Valid {
		return nil
	}
	armed := fmt.Sprintf("%s=%q arms the fence, so this writer cannot write without a valid token", EnvFencing, f.fencing)
	switch {
	case !f.started && !f.enabled:
		return &NotReady{ElectionOff, fmt.Sprintf("%s, and no election runs: %s is not true. Set %s=true (with the writer's ServiceAccount) or disarm the fence (%s=shadow).",
			armed, EnvElection, EnvElection, EnvFencing)}
	case !f.started && !f.hasShard:
		return &NotReady{ElectionDeclined, fmt.Sprintf("%s, and the election declined to run: no shard (set %s, or run as a StatefulSet Pod whose hostname ends in -<ordinal>).",
			armed, EnvShard)}
	case !f.started:
		return &NotReady{ElectionDeclined, fmt.Sprintf("%s, and the election declined to run (no namespace, no in-cluster configuration or no usable client: its start-up log line says which).", armed)}
	case f.releasing:
		return &NotReady{ElectionStopped, armed + ", and the election has released its Lease (shutting down)."}
	case !f.running:
		return &NotReady{ElectionStopped, armed + ", and the election has stopped."}
	}
	var tried []string
	if f.held > 0 {
		tried = append(tried, fmt.Sprintf("%d round(s) found %s held by another process (or absent, its absence being timed)", f.held, LeaseName(f.shard)))
	}
	if f.errs != "" {
		tried = append(tried, "store errors: "+f.errs)
	}
	so := ""
	if len(tried) > 0 {
		so = " (" + strings.Join(tried, "; ") + ")"
	}
	age := f.age.Round(time.Second)
	switch {
	case f.token.Epoch > 0:
		return &NotReady{TokenLapsed, fmt.Sprintf("%s; the token of epoch %d is no longer valid%s: cut off from the API server, refused, or the Lease lost; it counts as ready again once it renews or re-acquires.",
			armed, f.token.Epoch, so)}
	case f.age <= f.bound:
		return &NotReady{NoTokenYet, fmt.Sprintf("%s; no token yet, %v after start%s: a successor waits out its predecessor's lease; beyond %v this writer counts as unable to mint.",
			armed, age, so, f.bound)}
	default:
		return &NotReady{CannotMint, fmt.Sprintf("%s; no token within %v of start (%v so far)%s. One process per shard: is another writer running for shard %d? May its ServiceAccount get, create and update Leases?",
			armed, f.bound, age, so, f.shard)}
	}
}
