package election

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// nonGuarantees are the package doc's named non-guarantees: the only excuses the simulation grants
// an overlap of two valid tokens, each matched by an exact condition (excuse), counted per name.
var nonGuarantees = []string{"never-seen", "create-delete-unseen", "vm-freeze", "impersonation", "fence"}

// check asserts the safety properties at the current instant.
func (s *sim) check() {
	var valid []*simProc
	for _, p := range s.procs {
		if p.retired {
			continue
		}
		if p.e.Token().Valid {
			valid = append(valid, p)
		} else if p.done && (p.crashed || p.op == nil) && (!s.loop || p.e.isStopped()) {
			// Dead with a lapsed token, no call in flight (orphans land as someone else's
			// nothing: their answers go nowhere), its clocks running on: never valid again.
			p.retired = true
		}
	}
	if len(valid) > 1 {
		var names, who []string
		for i, a := range valid {
			for _, b := range valid[i+1:] {
				name := s.excuse(a, b)
				if name == "" {
					who = who[:0]
					for _, p := range valid {
						who = append(who, fmt.Sprintf("p%d epoch %d", p.n, p.e.Token().Epoch))
					}
					s.fail("two valid tokens at once: %s (no named non-guarantee matches p%d and p%d)%s",
						strings.Join(who, ", "), a.n, b.n, s.describe(a, b))
					return
				}
				names = append(names, name)
			}
		}
		for _, n := range names {
			s.excused[n]++
		}
		return
	}
	if len(valid) == 1 && valid[0] != s.valid {
		v := valid[0]
		if prev := s.valid; prev != nil && v.e.Token().Epoch <= prev.epoch && s.owner[prev.epoch] == prev &&
			s.before[v.e.Token().Epoch] != v && s.excuse(prev, v) == "" {
			s.fail("p%d became valid with epoch %d after p%d with epoch %d%s", v.n, v.e.Token().Epoch, prev.n, prev.epoch, s.describe(prev, v))
		}
		s.valid = v
	}
}

// excuse names the non-guarantee that covers an overlap of a's and b's tokens, or "".
func (s *sim) excuse(a, b *simProc) string {
	// vm-freeze: a holder whose clocks both stood still after its last write: its token would
	// have lapsed on its own monotonic clock, had that counted the time (no client can know).
	for _, x := range []*simProc{a, b} {
		if x.e.Token().Valid && x.clk.frozeSince(x.lastSend) &&
			float64(s.clk.Since(x.lastSend))*x.clk.rate >= float64(x.e.validFor) {
			return "vm-freeze"
		}
	}
	ha, hb := a.holdings[a.e.Token().Epoch], b.holdings[b.e.Token().Epoch]
	if ha == nil || hb == nil {
		return "" // a token for an epoch the process never wrote
	}
	older, newer := ha, hb
	if hb.op.seq < ha.op.seq {
		older, newer = hb, ha
	}
	if frozeChain(older) || frozeChain(newer) {
		// A holding taken on the strength of one a freeze kept fresh: what follows it (identity
		// twins re-acquiring over each other, each fresh) follows the freeze.
		return "vm-freeze"
	}
	return s.excusedPair(older, newer, map[[2]*simHolding]bool{})
}

// excusedPair names the non-guarantee that covers an overlap of two holdings, or "". A named case
// covers the pair itself, or the overlap goes on from an earlier one: the later-taken holding was
// taken at once on the strength of another (followedFrom), whose overlap with the other side is
// excused. Only the later-taken one is followed: the earlier was already standing when the later
// was taken, and whatever the earlier's holder did with it afterwards is not what made the overlap.
func (s *sim) excusedPair(a, b *simHolding, seen map[[2]*simHolding]bool) string {
	o, n := a, b
	if n.op.seq < o.op.seq {
		o, n = n, o
	}
	if o == n || seen[[2]*simHolding{o, n}] {
		return ""
	}
	seen[[2]*simHolding{o, n}] = true
	if name := s.excuseNewer(o, n); name != "" {
		return name
	}
	for _, h := range s.followedFrom(n) {
		if name := s.excusedPair(o, h, seen); name != "" {
			return name
		}
	}
	return ""
}

// followedFrom is what h was taken at once on the strength of: the holding whose release (real or
// forged) it took; and its process's own holding, still valid as it sent (op.prev), when it was
// taken by a create (after a deletion seen while holding) or over a record of the incarnation that
// holding lived on (its record edited, a renewal after its token lapsed, or an identity twin's
// record, which no client can tell from an edit of its own). Not over another incarnation's
// record: a Lease recreated with our name is not ours, and re-acquiring over it at once is what
// the rules forbid (R-incarnation), not an overlap going on.
func (s *sim) followedFrom(h *simHolding) []*simHolding {
	var out []*simHolding
	base := h.op.baseRec
	if p := h.op.prev; p != nil && (h.op.what == "create" || base != nil && base.UID == p.uid) {
		out = append(out, p)
	}
	if base != nil && holderOf(base) == "" {
		if r := s.rvHolding[base.ResourceVersion]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// frozeChain says whether h, or a holding of its process it was taken on the strength of, was
// taken while only a freeze kept the one before fresh.
func frozeChain(h *simHolding) bool {
	for seen := map[*simHolding]bool{}; h != nil && !seen[h]; h = h.op.prev {
		seen[h] = true
		if h.op.frozeHeld {
			return true
		}
	}
	return false
}

func (s *sim) excuseNewer(older, newer *simHolding) string {
	// never-seen: the newer holder created the Lease without ever having seen it exist, and has
	// never been shown the incarnation the older holding lives on: all it knows of the shard's
	// past began with its own create.
	if older.uid != newer.uid && newer.op.p.blindFrom && !newer.op.sawUID(older.uid) {
		return "never-seen"
	}
	// The same, for a process that followed a blind creator on the incarnation it created (it
	// timed that creator's record, which says nothing of the older incarnation it never saw).
	if inc := s.incs[newer.uid]; inc != nil && inc.blind && older.uid != newer.uid && !newer.op.sawUID(older.uid) {
		return "never-seen"
	}
	// create-delete-unseen: the older holding lived on an incarnation deleted before the newer
	// holding landed, which the newer holder had never been shown when it sent its write —
	// because that incarnation came and went before the newer holder's watch began (or before it
	// started) and its
	// holder's duration is longer than the newer holder waited (a release is taken at once); or, for a create, because
	// the incarnation's events were still on their way down its unbroken watch, or not yet sent
	// (the incarnation was created after the create left).
	if inc := s.incs[older.uid]; inc != nil && older.uid != newer.uid && !inc.deleted.IsZero() &&
		!inc.deleted.After(newer.op.landed) && !newer.op.sawHolding(older) {
		// Or with no watch running as it sent: the holding came between two of its watches, or
		// on one that ended without delivering it (it was never shown it).
		beforeWatch := (!inc.deleted.After(newer.op.p.started) ||
			(!newer.op.watchFrom.IsZero() && !inc.deleted.After(newer.op.watchFrom)) ||
			newer.op.watchFrom.IsZero()) &&
			older.duration > newer.op.waited
		create := newer.op.what == "create"
		inFlight := create && inc.created.After(newer.op.issued)
		lagging := create && !newer.op.watchFrom.IsZero() && !newer.op.watchFrom.After(inc.created)
		if beforeWatch || inFlight || lagging {
			return "create-delete-unseen"
		}
	}
	// The same, for a holding on an incarnation the newer holder has seen: the older holding, never
	// shown to it, was written before its current stream began (on an earlier stream that ended
	// without delivering it) or after (the stream had not yet brought it), and deleted by the time
	// its create left, the stream having brought nothing: a read found the Lease gone, and nothing
	// told it that its stream was behind (the package doc's "a write after its stream began when
	// that stream had brought it nothing yet", with "before its current watch began").
	if inc := s.incs[older.uid]; inc != nil && newer.op.what == "create" && older.uid != newer.uid &&
		!inc.deleted.IsZero() && !inc.deleted.After(newer.op.issued) &&
		!newer.op.watchFrom.IsZero() && !newer.op.shownUnderStream && !newer.op.sawHolding(older) &&
		older.duration > newer.op.waited {
		return "create-delete-unseen"
	}
	// The same for a takeover of the Lease recreated after that deletion: a read showed the new
	// incarnation, as it shows the absence to a creator, while the stream had delivered nothing
	// since it began (the doc's "or its takeover of the Lease recreated after it").
	if inc := s.incs[older.uid]; inc != nil && newer.op.what == "update" && newer.op.baseRec != nil &&
		newer.op.baseRec.UID != older.uid && older.uid != newer.uid &&
		!inc.deleted.IsZero() && !inc.deleted.After(newer.op.issued) &&
		!newer.op.watchFrom.IsZero() && !newer.op.deliveredUnderStream && !newer.op.sawHolding(older) &&
		!older.lastLanded.Before(newer.op.watchFrom) && older.duration > newer.op.waited {
		return "create-delete-unseen"
	}
	// impersonation: an outside write the lease guard refuses, landed after the older holding
	// began and before the newer one landed; or, in the same window, a release of a record the
	// older holder's process last wrote, that no participant wrote (a forged record: whoever took over after it only ever saw
	// the holding end in forged form).
	for _, t := range s.refused {
		if !t.Before(older.op.issued) && !t.After(newer.op.landed) {
			return "impersonation"
		}
	}
	for _, f := range s.forgedReleases {
		if f.of != nil && f.of.op.p == older.op.p && !f.at.Before(older.op.issued) && !f.at.After(newer.op.landed) {
			return "impersonation"
		}
	}
	return ""
}

// describe says, for a failure, how the two holdings began.
func (s *sim) describe(a, b *simProc) string {
	var out []string
	for _, p := range []*simProc{a, b} {
		h := p.holdings[p.e.Token().Epoch]
		if p.e.Token().Epoch != p.epoch && !p.e.Token().Valid {
			h = p.holdings[p.epoch]
		}
		if h == nil {
			out = append(out, fmt.Sprintf("p%d (lease %v): no write of ours carries epoch %d", p.n, p.cfg.lease, p.e.Token().Epoch))
			continue
		}
		out = append(out, fmt.Sprintf("p%d (lease %v, identity of p%d): epoch %d by %s sent %.3fs landed %.3fs, last send %.3fs; since then suspended %v, frozen %v, its wall clock counted %.3fs of %.3fs",
			p.n, p.cfg.lease, s.identityOwner(p.e.identity), p.e.Token().Epoch, h.op.what,
			h.op.issued.Sub(t0).Seconds(), h.op.landed.Sub(t0).Seconds(), p.lastSend.Sub(t0).Seconds(),
			p.clk.suspendedSince(p.lastSend), p.clk.frozeSince(p.lastSend),
			(p.e.bootAt(p.clk.Now())-p.e.state.Load().lastBoot).Seconds(), s.clk.Since(p.lastSend).Seconds()))
	}
	return "\n" + strings.Join(out, "\n")
}

// quietPhase stops every fault: suspended, frozen and paused processes resume, requests in flight
// land or are dropped, every request is answered at once, watch events are handled as they come,
// each process runs its rounds when its driver would. After the lease (the longest any process
// believes in) + renew + the spread of the clock offsets (a candidate also waits for the record to
// expire by its own wall clock) + a margin for the clock rates, exactly one process must hold a
// valid token — or, if an outside edit left an epoch that cannot be incremented, none, and every
// process must have counted the error.
func (s *sim) quietPhase() {
	s.quiet = true
	defer func() { s.quiet = false }()
	for _, p := range s.live() {
		p.clk.setSuspended(false)
		p.clk.setFrozen(false)
		p.paused, p.watchDown = false, false
	}
	s.orphans = nil
	if s.loop {
		s.settleLoop()
	} else {
		s.settleStep()
		for _, p := range s.live() {
			if p.w == nil {
				s.startWatch(p) // as a real watchLoop would, within a renew interval
			}
		}
	}
	bound, limit := s.livenessBound()
	if bound > simLivenessCap || bound < 0 {
		s.skipped++
		s.logf("liveness not checked: it would take %v (an extreme outside edit)", bound)
		return
	}
	errs := map[*simProc]uint64{}
	for _, p := range s.live() {
		errs[p] = totalErrors(p.e)
		p.wakes = 0
	}
	for end := s.clk.Now().Add(bound); s.clk.Now().Before(end) && !s.failed; {
		if s.loop {
			s.quietLoopStep(end)
		} else {
			// As the drivers would: to the next instant one of them wakes, at least every second.
			d := time.Second
			if w, ok := s.nextWake(s.live()); ok {
				d = min(max(w, time.Millisecond), d)
			}
			s.clk.Step(min(d, end.Sub(s.clk.Now())))
			s.steps++
			s.quietStep()
		}
		s.check()
		s.record()
	}
	if s.failed {
		return
	}
	if after, lim := s.livenessBound(); after > bound+bound/10 || after < 0 {
		// Events still on their way as the phase began (a watch's backlog) showed an extreme
		// edit: the bound computed without them does not hold.
		s.skipped++
		s.logf("liveness not checked: the events handled in the phase made it %v (an extreme outside edit)", after)
		return
	} else {
		limit = limit || lim
	}
	for _, p := range s.live() {
		// A driver wakes at its renew interval, or early for a takeover or a retry: never many
		// times an interval for long (an error must not make it spin).
		if limit := 10 * int(bound/p.cfg.renew+2); p.wakes > limit {
			s.fail("p%d woke %d times in %v (renew %v): the driver spins\n%s", p.n, p.wakes, bound, p.cfg.renew, s.state(p))
			return
		}
	}
	var holders []string
	for _, p := range s.procs {
		if p.e.Token().Valid {
			holders = append(holders, fmt.Sprintf("p%d", p.n))
		}
	}
	if len(holders) == 0 && limit {
		// R-epoch-limit: a clear, counted error, never a silent stall.
		for _, p := range s.live() {
			if p.e.d.absentUnheard || p.e.d.incUnheard {
				continue // waiting for its stream, as the doc says, not stalled at the limit
			}
			if totalErrors(p.e) == errs[p] {
				s.fail("p%d stalls at the epoch limit without counting an error\n%s", p.n, s.state(p))
				return
			}
		}
		s.limit++
		return
	}
	if len(holders) != 1 {
		var state []string
		for _, p := range s.live() {
			state = append(state, s.state(p))
		}
		s.fail("liveness: %d valid holders (%v) after %v without faults\n%s", len(holders), holders, bound, strings.Join(state, "\n"))
	}
}

// livenessBound is how long a quiet phase needs for exactly one valid holder: the lease (the longest
// any process believes in) + renew + the spread of the clock offsets (a candidate also waits for the
// record to expire by its own wall clock) + a margin for the clock rates; and whether an outside
// edit left an epoch that cannot be incremented.
func (s *sim) livenessBound() (time.Duration, bool) {
	// How far apart the clocks that wrote and read renewTimes are now: the offsets, plus what the
	// rates and suspends (a suspended clock falls behind) have added since each process started.
	// Every process counts, the dead too (the record may carry a dead writer's renewTime), and the
	// true clock (an outsider's edit).
	var minOff, maxOff time.Duration
	for _, p := range s.procs {
		off := p.clk.Now().Sub(s.clk.Now())
		minOff, maxOff = min(minOff, off), max(maxOff, off)
	}
	longest := s.maxLease
	stored, err := s.mem.Get(context.Background(), testLease)
	if err != nil {
		stored = nil
	}
	limit := stored != nil && epochOf(stored) >= math.MaxInt32
	for _, p := range s.live() {
		longest = max(longest, p.e.believed(p.e.d.rec), p.e.believed(stored), p.e.d.absentWait)
		limit = limit || p.e.d.maxSeen >= math.MaxInt32
	}
	// An outsider may have written a renewTime in the future: the record then stays live (by the
	// spec's rule) until that instant plus its duration, whatever the candidates' monotonic clocks.
	var ahead time.Duration
	if stored != nil && stored.Spec.RenewTime != nil {
		ahead = max(0, stored.Spec.RenewTime.Sub(s.clk.Now()))
	}
	return longest + 2*s.maxRenew + (maxOff - minOff) + ahead + 2*longest/50 + time.Second, limit
}

func totalErrors(e *Election) uint64 {
	var n uint64
	for r := reason(0); r < numReasons; r++ {
		n += e.errs[r].Load()
	}
	return n
}

// state describes a process's driver for a failure.
func (s *sim) state(p *simProc) string {
	d := &p.e.d
	return fmt.Sprintf("p%d: lease %v, known %v stale %v, rec holder %q rv %s epoch %d, obs since %v ago, believed %v, absentWait %v, absent timed %v ago, next %v, offset %v, watching %v (watch %v, a read's absence unheard %v), holds %v, maxSeen %d",
		p.n, p.cfg.lease, d.known, d.stale, holderOf(d.rec), rvOf(d.rec), epochOf(d.rec), p.clk.Since(d.obs.since), p.e.believed(d.rec), d.absentWait,
		p.clk.Since(d.absenceTimedFrom()), p.e.nextDelay(), p.clk.offset, d.watching, p.w != nil || p.sw != nil, d.absentUnheard, d.holds, d.maxSeen)
}

// isStopped says whether the election's goroutines have all returned (loop mode).
func (e *Election) isStopped() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}
