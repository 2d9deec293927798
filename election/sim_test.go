package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// The randomized simulation, no kinder than the API server and the machine. N election processes
// share one in-memory store (fake.LeaseStore, which answers like the API server) and one
// simulated true clock. Each seed picks:
//
//   - the configurations: one, or two (a rolling update that changes the lease duration and the
//     renew interval); every process, first or restarted, takes one of them at random;
//   - the clocks (sim_clock_test.go): offsets of up to ±simMaxOffset and rates within the tolerated
//     margin; the production clock path — the suspend check reads the process's wall clock, which
//     is stepped forward and back and slewed; a suspend stops the monotonic clock only, a VM freeze
//     stops both;
//   - the mode: most seeds drive the decision functions step by step (round and handle, called by
//     the simulation: sim_step_test.go); a share runs the real driver — Election.run, watchLoop, the
//     events buffer, Release's cancel-and-wait, Release from OnEvent — in a synctest bubble, where
//     the simulation's scheduler acts only when every goroutine of the run is blocked
//     (sim_loop_test.go says what it can and cannot explore).
//
// Every step, one thing happens: time passes, a request reaches the store (or fails, or is applied
// with its answer lost), an answer reaches its process (or its call times out, the request staying
// in flight), a process runs a round or handles watch events, pauses, is suspended or frozen, has
// its wall clock stepped or slewed, loses its watch or is shown an old event, crashes, or releases
// — from any state: standby, lost, never held — and a new process takes its place, sometimes with
// the identity of another (two processes sharing one by mistake); or an outsider deletes the Lease
// or writes any value the API server accepts into it (sim_edits_test.go), each write tagged with
// whether the lease guard would admit it.
//
// Besides the uniform random steps it tells storylines (sim_story_test.go): scenario families,
// drawn by weight, that set up the preconditions one rule guards (mixed lease durations with a
// partition and a deletion, an edit under a valid token and then a pause, identity twins, a
// lagging watch over a deletion) and then go on at random; every beat is a step the random ones
// may take too, and is checked the same way.
//
// After every step it asserts, on the true clock, from every process's Token() (dead ones too:
// their tokens lapse, they do not vanish), that no two tokens are valid at once, unless the overlap
// matches one of the package doc's named non-guarantees by an exact condition (sim_check_test.go);
// the overlaps excused are counted per name. Per process, epochs only go up; across processes,
// every new holding is above every epoch before it (from the last outside fault that lowered the
// stored epoch on), and no participant's write shortens the duration of a held record (the lease
// guard would refuse it). Twice a run the faults stop and liveness is checked. A failure prints a line
// with "seed" and "rerun" (hack/mutants greps for both); EHDB_SIM_SEED=<n> reruns one seed,
// EHDB_SIM_SEEDS=<n> runs more (make sim), EHDB_SIM_TRACE=<n> prints more of the trace.

const (
	simProcs     = 3
	simSteps     = 6000
	simMaxOffset = 3 * time.Minute
	// simLivenessCap: a quiet phase longer than this is not run (an outside edit to an extreme
	// duration or renewTime may rightly stall takeovers for years); such phases are counted.
	simLivenessCap = 10 * time.Minute
)

// simConfigs are the lease/renew pairs a seed draws from (whole seconds, as ParseConfig gives).
var simConfigs = []simConfig{
	{3 * time.Second, time.Second}, {5 * time.Second, 2 * time.Second}, {10 * time.Second, 3 * time.Second},
	{10 * time.Second, 5 * time.Second}, {15 * time.Second, 5 * time.Second}, {30 * time.Second, 10 * time.Second},
	{30 * time.Second, 2 * time.Second},
}

type simConfig struct{ lease, renew time.Duration }

type simResult struct {
	l   *coordinationv1.Lease
	err error
}

// simOp is one store call of a process, from its send to its answer (or beyond: a call that timed
// out may still reach the store later).
type simOp struct {
	p       *simProc
	what    string
	issued  time.Time             // true time of the send
	req     *coordinationv1.Lease // what an update sent
	baseRec *coordinationv1.Lease // the stored record an update replaced
	apply   func() (*coordinationv1.Lease, error)
	applied bool
	landed  time.Time // true time it was applied
	seq     int       // order of application
	res     simResult
	resp    chan simResult
	gone    bool // the caller stopped waiting (its context ended)

	// What the sender knew as it sent (for the exact conditions of the non-guarantees).
	blind     bool      // a create by a process that never saw the Lease exist
	timerFrom time.Time // true time the sender began timing the absence it acts on
	watchFrom time.Time // true time its unbroken watch began; zero: not watching
	sawN      int       // how much of its sawList it had been shown
	handled   uint64    // watch events its driver had handled
	// shownUnderStream: a record was shown to the sender after its current watch began;
	// deliveredUnderStream: by that watch itself (an event of any kind).
	shownUnderStream, deliveredUnderStream bool
	moment                                 int           // sim.moment as it sent (for sawHolding)
	forged                                 bool          // an update on a record version an outsider blanked (a forged release)
	prev                                   *simHolding   // the sender's own holding, still valid as it sent
	frozeHeld                              bool          // ... valid only because the sender's clocks froze since its last write
	waited                                 time.Duration // how long the sender waited out the record (or absence) it acts on
}

// simHolding is one epoch a process minted: the write that took it.
type simHolding struct {
	op       *simOp
	uid      types.UID
	duration time.Duration // the duration its record states
	epoch    uint64
	// lastLanded is the true time its last write (the acquisition or a renewal) was applied.
	lastLanded time.Time
}

type simProc struct {
	n    int
	e    *Election
	clk  *simClock
	cfg  simConfig
	last uint64 // the last epoch this process held
	// absentSince mirrors the election's d.absentSince; absentTrue is when (true time) it was set.
	absentSince, absentTrue time.Time
	op                      *simOp // the call this process is waiting on
	paused                  bool
	done                    bool // gets no more commands (crashed or released)
	crashed                 bool // gets no more answers either
	epoch                   uint64
	holdings                map[uint64]*simHolding
	lastSend                time.Time   // true time of the send of its last successful write as holder
	sawList                 []types.UID // incarnations its answers showed it, in order
	delivered               []types.UID // the incarnation of every watch event handed to the process, in order
	watchFrom               time.Time   // true time its current watch began; zero: none
	// watchSeq and shownSeq order (by sim.moment) the start of its current watch (0: none) and
	// the last record it was shown, by an answer or a watch event.
	watchSeq, shownSeq int
	deliveredSeq       int                // when (by sim.moment) its watch last delivered an event
	newestRV           uint64             // the newest resourceVersion it was shown
	shownHoldings      map[holdingKey]int // the holdings it was shown, with the moment of the first sighting

	// step mode
	cmds chan func()
	idle chan struct{}
	w    watch.Interface

	// loop mode
	cancel    context.CancelFunc
	sw        *simWatch
	watchDown bool // Watch calls fail
	releasing bool
	replaced  bool      // a new process took its place
	retired   bool      // dead, its token lapsed, nothing in flight: it can never be valid again
	blindFrom bool      // it created the Lease without ever having seen it exist
	started   time.Time // true time it started
	wakes     int       // rounds run (step mode) or timers fired (loop mode) in the quiet phase
	lagUntil  time.Time // true time until which a storyline holds its watch events back
}

// simInc is one incarnation of the Lease (create to delete).
type simInc struct {
	created, deleted time.Time
	blind            bool // created by a process that had never seen the Lease exist
}

type sim struct {
	t        *testing.T
	seed     int64
	rng      *rand.Rand
	clk      *clocktesting.FakeClock
	mem      *fake.LeaseStore
	procs    []*simProc
	ops      chan *simOp
	orphans  []*simOp // timed out, still in flight: may reach the store later
	trace    []string
	maxEpoch uint64
	owner    map[uint64]*simProc
	before   map[uint64]*simProc // owners of the epochs issued before the last epoch-lowering fault
	stored   uint64
	valid    *simProc
	acquired int
	failed   bool
	failMsg  string
	applied  int        // requests that reached the store
	moments  int        // see moment
	quiesced bool       // loop mode: the current step has waited for quiescence
	mu       sync.Mutex // the parts process goroutines write in loop mode

	loop     bool
	configs  []simConfig
	maxLease time.Duration
	maxRenew time.Duration
	drift    bool          // processes' clocks have offsets and rates
	tick     time.Duration // the usual most time passes in one step
	tight    bool          // fine steps, clocks at the margin's edges, holders dying right after a write
	history  []watch.Event // every change of the Lease, for replays of old events
	steps    int           // every step taken, random and quiet
	faults   map[string]int
	excused  map[string]int // steps with an overlap, by the non-guarantee that excuses it
	quiet    bool           // liveness phase: no faults, every request answered
	skipped  int            // liveness phases not run (an extreme outside edit)
	limit    int            // liveness phases that met the epoch limit

	incs    map[types.UID]*simInc
	refused []time.Time     // true times of outside writes the lease guard would refuse
	forged  map[string]bool // record versions an outsider blanked
	// rvHolding is, per stored version, the participant holding that last wrote its lineage (a
	// release: the holding it ended); outside edits carry it on.
	rvHolding map[string]*simHolding
	// forgedReleases are the outside writes that blanked a held record.
	forgedReleases []simForged
	guard          map[string]int // participants' writes the lease guard would refuse, by rule

	// The storylines (sim_story_test.go): their own stream of the seed's randomness (nil: off),
	// the one under way, and the process whose identity the next one spawned takes.
	srng    *rand.Rand
	story   *story
	twinOf  *simProc
	nextCfg *simConfig
}

func (s *sim) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", s.clk.Since(t0).Seconds()) + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.trace = append(s.trace, line)
	if len(s.trace) > 4096 {
		s.trace = append(s.trace[:0:0], s.trace[len(s.trace)-2048:]...)
	}
	s.mu.Unlock()
}

func (s *sim) fail(format string, args ...any) {
	s.mu.Lock()
	if s.failed {
		s.mu.Unlock()
		return
	}
	s.failed = true
	tail := strings.Join(s.trace[max(0, len(s.trace)-simTrace()):], "\n")
	s.mu.Unlock()
	mode := "step"
	if s.loop {
		mode = "loop"
	}
	// Reported by the caller, outside the bubble in loop mode (a failed bubble ends the test).
	s.failMsg = fmt.Sprintf("seed %d (rerun: EHDB_SIM_SEED=%d go test -run 'TestRandomizedSimulation$' ./election/) [%s mode]: %s\nlast steps:\n%s",
		s.seed, s.seed, mode, fmt.Sprintf(format, args...), tail)
}

func (s *sim) spawn() {
	p := &simProc{n: len(s.procs), holdings: map[uint64]*simHolding{}, started: s.clk.Now(), shownHoldings: map[holdingKey]int{}}
	p.cfg = s.configs[s.rng.Intn(len(s.configs))]
	if s.nextCfg != nil { // a storyline's restart
		p.cfg, s.nextCfg = *s.nextCfg, nil
	}
	var offset time.Duration
	rate := 1.0
	if s.drift {
		// Rates within ±margin/2 of the true clock: any two differ by at most the margin.
		offset = time.Duration(s.rng.Int63n(int64(2*simMaxOffset))) - simMaxOffset
		rate = 1 + (s.rng.Float64()-0.5)*MaxClockRateDifference
		if s.tight {
			offset = 0 // the wall clocks drift apart by the rates alone
		}
		if s.tight || s.rng.Intn(2) == 0 { // at the edge of the margin, where it is tight
			rate = 1 + float64(2*s.rng.Intn(2)-1)*MaxClockRateDifference/2
		}
	}
	p.clk = newSimClock(s.clk, offset, rate)
	identity := NewIdentity(fmt.Sprintf("writer-%d", p.n))
	if len(s.procs) > 0 && s.rng.Intn(12) == 0 {
		// Two processes with one identity, by mistake (a copied Options.Identity).
		identity = s.procs[s.rng.Intn(len(s.procs))].e.identity
	}
	if s.twinOf != nil { // a storyline's twin
		identity, s.twinOf = s.twinOf.e.identity, nil
	}
	p.e = newElection(simStore{s: s, p: p}, testConfig(p.cfg.lease, p.cfg.renew), Options{
		Identity: identity, Clock: p.clk, Logger: discard,
		OnEvent: func(ev Event) { s.onEvent(p, ev) },
	})
	// The production suspend check: the wall clock, not a perfect boot clock.
	p.e.boot = p.clk.bootReading
	s.procs = append(s.procs, p)
	s.logf("p%d starts (lease %v, renew %v, identity of p%d)", p.n, p.cfg.lease, p.cfg.renew, s.identityOwner(identity))
	if s.loop {
		s.startLoop(p)
		return
	}
	s.startStep(p)
}

func (s *sim) identityOwner(id string) int {
	for _, p := range s.procs {
		if p.e.identity == id {
			return p.n
		}
	}
	return -1
}

func (s *sim) onEvent(p *simProc, ev Event) {
	switch ev.Outcome {
	case Acquired, Renewed:
		// Per process, epochs only go up, and an acquisition always takes a new one.
		if ev.Epoch < p.last || (ev.Outcome == Acquired && ev.Epoch == p.last) {
			s.fail("p%d %s epoch %d after holding epoch %d", p.n, ev.Outcome, ev.Epoch, p.last)
		}
		if ev.Epoch != p.last {
			s.mu.Lock()
			s.acquired++
			s.mu.Unlock()
			s.logf("p%d %s epoch %d", p.n, ev.Outcome, ev.Epoch)
		}
		p.last, p.epoch = ev.Epoch, ev.Epoch
	case Lost, Released:
		s.logf("p%d %s epoch %d", p.n, ev.Outcome, ev.Epoch)
	}
	if s.loop && !s.quiet && !p.done && s.rng.Intn(150) == 0 {
		// Release from OnEvent, on the election's own goroutine. (The rng is the scheduler's,
		// but only one process runs between two of its steps.)
		p.done, p.releasing = true, true
		s.logf("p%d releases from OnEvent (%s)", p.n, ev.Outcome)
		_ = p.e.Release(context.Background())
	}
}

// noteWrite checks a participant's write as the store applies it (answer or not): an epoch belongs
// to one process, and each new one is above every epoch before it (since the last outside fault
// that lowered the stored epoch).
func (s *sim) noteWrite(op *simOp, l *coordinationv1.Lease) {
	p := op.p
	if op.what == "update" && op.baseRec != nil {
		if r := guardRefusal(op.baseRec, l); r != "" {
			s.guard[r]++
			if r == guardShorterDuration {
				// The package doc: a takeover of a record that is not released writes at least
				// its duration (a third process that sees only our record must wait long
				// enough). On a cluster with the chart, the lease guard refuses such a write:
				// the takeover would never land.
				s.fail("p%d's %s shortens the duration of a held record from %ds to %ds, which the lease guard refuses",
					p.n, op.what, durationSecsOf(op.baseRec), durationSecsOf(l))
			}
		}
	}
	ep := epochOf(l)
	if holderOf(l) != p.e.identity {
		return // a release
	}
	takeover := op.what == "update" && op.baseRec != nil && holderOf(op.baseRec) != p.e.identity
	if h, ok := p.holdings[ep]; !ok || op.what == "create" || takeover || h.uid != l.UID {
		// A new holding (the same epoch again: a create by a process that knows of none, or a
		// takeover after an edit lowered the epoch).
		p.holdings[ep] = &simHolding{op: op, uid: l.UID, epoch: ep, duration: time.Duration(durationSecsOf(l)) * time.Second}
	}
	p.holdings[ep].lastLanded = op.landed
	if s.before[ep] == p {
		return // a holding from before an epoch-lowering fault goes on
	}
	if owner, ok := s.owner[ep]; ok {
		if owner != p {
			s.fail("p%d wrote epoch %d, which belongs to p%d", p.n, ep, owner.n)
		}
		return
	}
	if ep <= s.maxEpoch {
		s.fail("p%d acquired epoch %d, not above the highest epoch before it, %d", p.n, ep, s.maxEpoch)
	}
	s.owner[ep] = p
	s.maxEpoch = max(s.maxEpoch, ep)
}

var simErrors = []error{
	apierrors.NewInternalError(errors.New("etcd leader changed")),
	apierrors.NewForbidden(leaseResource, testLease, errors.New("RBAC not yet bound")),
	apierrors.NewServiceUnavailable("apiserver shutting down"),
	fmt.Errorf("dial: %w", context.DeadlineExceeded),
}

func (s *sim) live() []*simProc {
	var out []*simProc
	for _, p := range s.procs {
		if !p.done {
			out = append(out, p)
		}
	}
	return out
}

func (s *sim) pick(ps []*simProc, ok func(*simProc) bool) *simProc {
	var c []*simProc
	for _, p := range ps {
		if ok(p) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.Intn(len(c))]
}

// applyOp lets a request reach the store: it fails on the way, or is applied (and its answer may
// be lost).
func (s *sim) applyOp(op *simOp) {
	op.applied = true
	op.landed = s.clk.Now()
	s.applied++
	op.seq = s.applied
	r := s.rng.Intn(100)
	if s.quiet {
		r = 99
	}
	switch {
	case r < 8: // fails on the way: nothing applied
		op.res = simResult{err: simErrors[s.rng.Intn(len(simErrors))]}
		s.logf("p%d %s fails: %v", op.p.n, op.what, op.res.err)
	default:
		if op.what == "update" {
			if cur, err := s.mem.Get(context.Background(), testLease); err == nil && cur.ResourceVersion == op.req.ResourceVersion {
				op.baseRec = cur
				op.forged = s.forged[cur.ResourceVersion]
			}
		}
		l, err := op.apply()
		op.res = simResult{l, err}
		if err == nil && op.what == "create" {
			s.incs[l.UID] = &simInc{created: op.landed, blind: op.blind}
			op.p.blindFrom = op.p.blindFrom || op.blind
		}
		if err == nil && op.what != "get" {
			s.noteWrite(op, l)
			// The lineage: this version carries the writer's holding (a release, the one it ends).
			s.rvHolding[l.ResourceVersion] = op.p.holdings[epochOf(l)]
		}
		if r < 14 && !s.quiet { // applied, but the answer is lost
			op.res = simResult{err: fmt.Errorf("read: %w", context.DeadlineExceeded)}
		}
		s.logf("p%d %s applied (rv %s, err %v)%s", op.p.n, op.what, rvOf(l), err, map[bool]string{true: ", answer lost"}[r < 14 && !s.quiet])
	}
	s.checkStored()
}

// shown records what an answer showed its process, as it reaches it.
func (s *sim) shown(p *simProc, op *simOp, r simResult) {
	if r.err != nil || r.l == nil {
		return
	}
	s.noteSeen(p, r.l)
	if op.what != "get" && holderOf(r.l) == p.e.identity {
		p.lastSend = op.issued
	}
}

// checkStored: the stored epoch never goes down through the participants' writes.
func (s *sim) checkStored() {
	if l, err := s.mem.Get(context.Background(), testLease); err == nil {
		if ep := epochOf(l); ep < s.stored {
			s.fail("the stored epoch went from %d down to %d", s.stored, ep)
		} else {
			s.stored = ep
		}
	}
}

func rvOf(l *coordinationv1.Lease) string {
	if l == nil {
		return "-"
	}
	return l.ResourceVersion
}

// noteAbsence records on the true clock when p began timing an absence.
func (s *sim) noteAbsence(p *simProc) {
	if a := p.e.d.absentSince; !a.Equal(p.absentSince) {
		p.absentSince, p.absentTrue = a, s.clk.Now()
	}
}

// epochLowered restarts the cross-process epoch checks from the stored epoch an outside fault left:
// across such a fault, monotonicity is the lease guard's (see the package doc).
func (s *sim) epochLowered(to uint64) {
	for ep, p := range s.owner {
		s.before[ep] = p
	}
	s.stored, s.maxEpoch = to, to
	s.owner = map[uint64]*simProc{}
}

// record keeps every version of the Lease, and its deletes, for replays.
func (s *sim) record() {
	l, err := s.mem.Get(context.Background(), testLease)
	var last *coordinationv1.Lease
	if n := len(s.history); n > 0 {
		last = s.history[n-1].Object.(*coordinationv1.Lease)
	}
	switch {
	case err == nil && (last == nil || last.ResourceVersion != l.ResourceVersion):
		s.history = append(s.history, watch.Event{Type: watch.Modified, Object: l})
	case err != nil && last != nil && s.history[len(s.history)-1].Type != watch.Deleted:
		s.history = append(s.history, watch.Event{Type: watch.Deleted, Object: last})
	}
	if len(s.history) > 512 {
		s.history = append(s.history[:0:0], s.history[256:]...)
	}
}

// clockFault: a suspend (monotonic clock stops), a VM freeze (both stop), a wall-clock step
// (forward or back; after a freeze, often the NTP correction of what it missed) or a slew.
func (s *sim) clockFault(live []*simProc) {
	p := s.pick(live, func(*simProc) bool { return true })
	if p == nil {
		return
	}
	c := p.clk
	switch k := s.rng.Intn(10); {
	case k < 4: // suspend or resume (a suspended process runs nothing)
		if c.isFrozen() {
			return
		}
		on := !c.isSuspended()
		if on && p.paused {
			return
		}
		c.setSuspended(on)
		p.paused = on
		s.faults["suspend"]++
		s.logf("p%d suspended=%v", p.n, on)
	case k < 6: // VM freeze or thaw
		if c.isSuspended() {
			return
		}
		on := !c.isFrozen()
		if on && p.paused {
			return
		}
		c.setFrozen(on)
		p.paused = on
		s.faults["freeze"]++
		s.logf("p%d frozen=%v", p.n, on)
		if !on && s.rng.Intn(2) == 0 {
			f := c.freezes[len(c.freezes)-1]
			c.stepWall(f[1].Sub(f[0]))
			s.logf("p%d wall clock corrected by %v", p.n, f[1].Sub(f[0]))
		}
	case k < 9: // a wall step: back to the true time, or anywhere within the offsets
		var d time.Duration
		if s.rng.Intn(2) == 0 {
			d = s.clk.Now().Sub(c.wall())
		} else {
			d = time.Duration(s.rng.Int63n(int64(2*simMaxOffset))) - simMaxOffset
		}
		if d < 0 && simExploreNoStepBack && c.suspendedSince(p.lastSend) {
			return
		}
		c.stepWall(d)
		s.faults["wall step"]++
		s.logf("p%d wall clock steps by %v", p.n, d)
	default: // an NTP slew (500 ppm, either way) starts or ends
		f := []float64{1, 1 + 500e-6, 1 - 500e-6}[s.rng.Intn(3)]
		c.setSlew(f)
		s.faults["slew"]++
		s.logf("p%d wall clock slews at %v", p.n, f)
	}
}

func simulate(t *testing.T, seed int64, steps int, loop bool) *sim {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), clk: clocktesting.NewFakeClock(t0),
		mem: fake.NewLeaseStore(), ops: make(chan *simOp), owner: map[uint64]*simProc{}, before: map[uint64]*simProc{},
		faults: map[string]int{}, excused: map[string]int{}, incs: map[types.UID]*simInc{}, forged: map[string]bool{}, rvHolding: map[string]*simHolding{},
		guard: map[string]int{}, loop: loop}
	// Storylines in step mode; on the real loop only with EHDB_SIM_LOOP_STORIES=1, for now: there
	// they met overlaps (seeds 1796144930772756272, 1796146170512080012) around the order of a
	// read's answer and the driver learning of a new watch stream, still to be judged (the
	// checker or the driver), and a run that never ended.
	if !simStoriesOff && (!loop || os.Getenv("EHDB_SIM_LOOP_STORIES") != "") {
		s.srng = rand.New(rand.NewSource(seed ^ 0x5707))
	}
	s.drift = s.rng.Intn(2) == 0
	// Coarse steps reach far into a run; fine ones (a watch event handled within milliseconds
	// of the write) reach the margins of the clock-rate rule, which are 1% of a lease.
	s.tick = 300 * time.Millisecond
	if s.rng.Intn(3) == 0 {
		s.tick, s.tight, s.drift = 5*time.Millisecond, true, true
	}
	s.configs = []simConfig{simConfigs[s.rng.Intn(len(simConfigs))]}
	if s.rng.Intn(2) == 0 { // a rolling update between two configurations
		s.configs = append(s.configs, simConfigs[s.rng.Intn(len(simConfigs))])
	}
	for _, c := range s.configs {
		s.maxLease, s.maxRenew = max(s.maxLease, c.lease), max(s.maxRenew, c.renew)
	}
	defer s.close()
	for i := 0; i < simProcs; i++ {
		s.spawn()
	}
	for i := 0; i < steps && !s.failed; i++ {
		if s.loop {
			s.loopStep()
		} else {
			s.step()
		}
		s.check()
		if i == steps/2 || i == steps-1 {
			s.quietPhase()
		}
	}
	return s
}

func (s *sim) close() {
	if s.loop {
		s.closeLoop()
		return
	}
	s.closeStep()
}

// simExploreNoStepBack (EHDB_SIM_EXPLORE_NO_STEPBACK=1; for exploring other faults only, no make
// target sets it, and it makes the simulation kinder than the machine): no backward wall step
// after a suspend that came after the process's last write. Such a step defeats the suspend check
// (the wall clock is its only defence while the monotonic clock stood still), and no named
// non-guarantee covers it (see the note of issue 16).
var simExploreNoStepBack = os.Getenv("EHDB_SIM_EXPLORE_NO_STEPBACK") != ""

// simLoopShare: one seed in simLoopShare runs the real driver loop.
const simLoopShare = 4

// pinnedSeeds run first in every default budget (make test's, make sim's, make mutants'). Each
// caught a rule of hack/mutants reverted, when it was pinned, that the budget's fresh seeds catch
// only now and then: with them a mutant is caught whatever the clock picks, and a change that
// stops one from catching its mutant shows in make mutants. A seed replays exactly in step mode
// (seed % simLoopShare != 0), so all of them are step-mode seeds.
var pinnedSeeds = []int64{
	1796153065382490351, 1796153065382489958, // R-unheard (9 fresh seeds in 3,000 caught it)
	1796152953353609329, 1796152953353609434, // R-stream (2 in 300)
	1796152940049299499, 1796152940049299761, // R-incarnation, another incarnation's record as our holding (2 in 300)
	1796152946693327491, 1796152946693327493, // R-incarnation, another incarnation's record as ours edited (7 in 300)
	1796152902197040181, 1796152902197040315, // R-release (4 in 300)
	1796152960161159565, 1796152960161159609, // R-epoch-limit (9 in 300)
	1796153565290334398, // R-replay (found it: 2 in 3,000, one of them in loop mode)
	// The checker was narrower than the doc's create-delete-unseen: a holding that began and was
	// deleted while the process had no watch ("between two of its watches").
	1796153891564259498,
	// The checker was narrower than the doc: an overlap whose older holding was taken from a
	// forged release of a never-seen creator's holding, the newer one a create on the strength of
	// the holding that creator overlapped.
	1796153065382489493,
	1796156228746201197, // R-gone (found it, make sim at 16,000 seeds)
	// The checker was narrower than the doc: a takeover of a Lease recreated after a deletion,
	// read while the stream lagging behind the deleted holding had brought nothing.
	1796156228746201475,
	// The checker took a takeover at an epoch the process had held before (after an edit lowered
	// it) for the old holding going on.
	1796156836459125995,
	// The real driver loop: a create lost to another's ("already exists") left the absence timed
	// from before that holding; the Lease deleted again, it created at once (R-lost-create).
	1796157123440042804,
	1796157646671707416,                      // the real loop: a driver waiting for its stream must not spin
	1796158041011497905, 1796158041011498639, // R-recreated (3 in 1,000, with its storyline)
	1796158431677285749, 1796158431677285823, // R-gone (12 in 3,000)
	1796158473661732358, 1796158473661732562, // R-unheard (9 in 3,000)
	// A lagging stream that showed an old record before a read found the Lease gone.
	1796158516239968005,
	1796159321610424566, 1796159321610424651, // R-stream, once the lagging-stream rule landed
	// The checker: a holding lost with an earlier stream, deleted under a lagging one.
	1796158660432550406,
}

func TestRandomizedSimulation(t *testing.T) {
	seeds := []int64{}
	if v := os.Getenv("EHDB_SIM_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("EHDB_SIM_SEED=%q", v)
		}
		seeds = append(seeds, n)
	} else {
		// The budget make test gives it (at least 2 million steps); make sim gives more.
		count := 300
		if testing.Short() {
			count = 30
		}
		if v := os.Getenv("EHDB_SIM_SEEDS"); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				count = n
			}
		}
		// The pinned seeds first, then fresh ones up to the budget: the pinned ones make
		// make mutants' verdict a fact of the code, the fresh ones keep looking.
		seeds = append(seeds, pinnedSeeds[:min(len(pinnedSeeds), count)]...)
		base := time.Now().UnixNano()
		for i := len(seeds); i < count; i++ {
			seeds = append(seeds, base+int64(i))
		}
	}
	steps := simSteps
	if v := os.Getenv("EHDB_SIM_STEPS"); v != "" { // steps per seed (make sim)
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			steps = n
		}
	}
	// Seeds are independent: they run on every CPU (make sim's budget in wall time), one worker
	// subtest per CPU taking seeds in turn, so a t.Fatal inside a run ends its own worker only.
	var (
		mu                                           sync.Mutex
		acquired, taken, skipped, limit, runs, loops int
		faults, excused, guard                       = map[string]int{}, map[string]int{}, map[string]int{}
		next                                         int
		stop                                         atomic.Bool
	)
	workers := min(runtime.GOMAXPROCS(0), len(seeds))
	t.Run("seeds", func(t *testing.T) {
		for w := 0; w < workers; w++ {
			t.Run(fmt.Sprintf("worker-%d", w), func(t *testing.T) {
				t.Parallel()
				for !stop.Load() {
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					if i >= len(seeds) {
						return
					}
					seed := seeds[i]
					var s *sim
					loop := uint64(seed)%simLoopShare == 0
					if m := os.Getenv("EHDB_SIM_MODE"); m != "" { // step or loop: every seed in one mode
						loop = m == "loop"
					}
					if loop {
						synctest.Test(t, func(t *testing.T) { s = simulate(t, seed, steps, true) })
					} else {
						s = simulate(t, seed, steps, false)
					}
					if s.failMsg != "" {
						t.Error(s.failMsg)
					}
					mu.Lock()
					runs++
					if loop {
						loops++
					}
					acquired, taken, skipped, limit = acquired+s.acquired, taken+s.steps, skipped+s.skipped, limit+s.limit
					for k, v := range s.faults {
						faults[k] += v
					}
					for k, v := range s.excused {
						excused[k] += v
					}
					for k, v := range s.guard {
						guard[k] += v
					}
					mu.Unlock()
					if t.Failed() && os.Getenv("EHDB_SIM_ALL") == "" { // EHDB_SIM_ALL=1: every seed, every failure
						stop.Store(true)
					}
				}
			})
		}
	})
	t.Logf("%d runs (%d on the real driver loop), %d steps, %d acquisitions, %d liveness phases skipped (extreme edits), %d at the epoch limit",
		runs, loops, taken, acquired, skipped, limit)
	t.Logf("overlaps excused, in steps, by non-guarantee: %s", counts(excused, nonGuarantees))
	t.Logf("faults: %s", counts(faults, nil))
	t.Logf("participants' writes the lease guard would refuse: %s", counts(guard, nil))
	// Liveness, loosely: the election must actually elect, or the safety checks prove nothing.
	if !t.Failed() && acquired < 2*runs {
		t.Fatalf("%d acquisitions in %d runs: the simulation hardly elects anyone", acquired, runs)
	}
}

// counts prints a count map in a stable order, the named keys first (zeros included).
func counts(m map[string]int, named []string) string {
	var keys []string
	seen := map[string]bool{}
	for _, k := range named {
		keys, seen[k] = append(keys, k), true
	}
	var rest []string
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	var out []string
	for _, k := range append(keys, rest...) {
		out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(out, " ")
}

// simTrace is how many of the last steps a failure prints (EHDB_SIM_TRACE, default 40).
func simTrace() int {
	if n, err := strconv.Atoi(os.Getenv("EHDB_SIM_TRACE")); err == nil && n > 0 {
		return n
	}
	return 40
}
