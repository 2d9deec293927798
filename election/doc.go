// Package election runs the per-shard Lease election that mints a writer's fencing tokens.
//
// One process runs one election, over the coordination.k8s.io/v1 Lease LeaseName(shard). The epoch
// (the fencing token) lives in spec.leaseTransitions: 0 is "never issued", every acquisition writes
// the previous value + 1, a renewal never changes it. A writer asks Token() on its write path, a
// lock-free read; the answer is computed locally from the send time of the last successful write,
// so a partitioned or paused writer stops claiming a valid token on time, with no API call.
//
// # What it guarantees
//
// At no instant do two processes hold a valid token for one shard, and the epochs one process holds
// only go up — except in the named cases under "What it does not guarantee". This holds under
// crashes, pauses, partitions, lost or late answers, requests applied after their caller gave up,
// watches that drop, lag or replay, processes of one shard running different lease durations and
// renew intervals (a rolling update), and these edits of the Lease by someone else:
//
//   - Our holding is the record our own write produced. A record is ours only at the
//     resourceVersion our last answered write produced, or — seen while our token is still fresh —
//     one of the same incarnation (UID) that names us with our epoch and a duration no shorter than
//     ours (while our token is fresh no one else can have acquired it). Anything else is a loss,
//     however much it looks like ours: our name on another holder's record, an epoch we did not
//     mint, a shortened duration, a Lease recreated with our name and epoch (by a process sharing
//     our identity that never saw it).
//   - Re-acquiring at once. When our record (of our incarnation) is edited under a valid token of
//     ours, we re-acquire at once (above every epoch seen), but only while the Lease is at exactly
//     the resourceVersion we saw then: any later record may be someone's acquisition, and is
//     timed. At most once a lease: two processes sharing one identity by mistake would otherwise
//     re-acquire over each other for ever, each reading the other's record as an edit of its own.
//   - Lost answers. An acquisition whose answer never came is never adopted, even when the record
//     carries our name, epoch and renewTime: an edit can copy those onto the record of the process
//     that won. The record is timed like any other (as after a crash, it costs up to one lease).
//   - Release. Release hands over only a holding this process minted and still holds (by the rule
//     above), never a record that merely carries its name — an edit, or another process that
//     shares its identity by mistake.
//   - Durations. A candidate waits out the longest duration it has reason to believe in: its own,
//     the record's, and the longest it has seen on the Lease since the last release it saw (never
//     forgotten with time: a partitioned candidate cannot know the holder it saw has gone) — a
//     release forgets only its own incarnation's: one on a Lease recreated after a deletion ends
//     no holding of the deleted one. A
//     process taking over a record that is not released writes at least that record's duration,
//     so a third process that sees only its record waits long enough; a holder that sees its
//     record's duration shortened treats it as a loss.
//   - Deletion. An absent Lease is created only after its absence has been watched, unbroken, for
//     the longest duration this process believes in, timed from the first sighting of the absence
//     (a read, or the DELETED event) under the current watch: a stream begun after an earlier
//     sighting may still carry, undelivered, a holding's writes since. Two reads that both find no
//     Lease say nothing of a create and delete between them, so a process whose watch is down never
//     recreates a Lease it saw exist (a liveness cost, in a case the lease guard refuses anyway).
//     And a read that finds the Lease gone while the watch still shows it counts only from the
//     watch's DELETED event: the writes before the delete (a takeover with a longer duration) are
//     still on their way down the stream, which delivers every change in order. So does a read's
//     absence while the stream shows, before or after it, an event older than the newest record
//     we saw, and nothing as new since: the stream is behind the deletion. Likewise a read that
//     shows the Lease recreated while the stream is at or before the old incarnation's record,
//     or behind: the new record is not taken over (nor its release taken) until the stream has
//     caught up (the old incarnation's DELETED, or an event of the new one). A stream that never
//     delivers it holds the create or takeover back until the stream ends and a new one begins.
//     And a create lost to another's ("already exists", or no answer) shows the Lease existed
//     after the absence was first seen: a later absence is timed from its own first sighting.
//   - renewTime or holderIdentity edited: the record is timed like any record that changed, from
//     when it was first seen, on the candidate's monotonic clock.
//   - An epoch at its limit (2^31−1, which only an edit can reach) stops the shard's elections: it
//     is a counted error on every attempt, logged with its reason like any store error (the
//     first, then every 60th) — never a silent stall. So are the stalls no rule can avoid: a
//     create held back by watch streams that end before an absence is watched for its wait, and
//     a takeover held back by a holder's clock running ahead, are each logged once with the cause.
//
// # What it assumes of clocks
//
// Clock offsets between nodes cannot overlap two tokens: a candidate times a record on its own
// monotonic clock from when it first saw it, and takes over only when that timing and the
// record's renewTime (on its own wall clock) both say the record expired. An offset can delay a
// takeover: a record written by a node whose wall clock runs ahead by d is taken over up to d
// later (a day ahead, a day), which the candidate logs once as clock skew. Clock rates must agree within MaxClockRateDifference; the holder shortens its own validity
// by that margin so that a fast candidate clock and a slow holder clock still cannot overlap. A
// process whose monotonic clock stops while the wall clock runs on (a suspended laptop, SIGSTOP is
// caught by the monotonic clock alone) never reports a valid token on resume after more than the
// lease: validity needs both readings of one time.Now to be fresh. A wall-clock step forward only
// shortens validity; a step back cannot lengthen it past the monotonic check.
//
// # What it does not guarantee
//
// Each case below is a name the package's simulation uses for the only overlaps it excuses. An
// overlap that begins in one of them goes on through the holdings that follow from either side at
// once: the same process's next holding, taken while its token was valid, by a create (after a
// deletion it saw while holding) or over a record of the incarnation (UID) it held (its record
// edited, a renewal that came after its token lapsed, a twin's record that reads as its own
// edited); and a holding taken at once from the release of one. Never one taken over another
// incarnation's record: the rules forbid that, and no excuse carries through it.
//
//   - never-seen: a process that never saw the Lease exist cannot know the epochs before a
//     deletion: it creates the Lease at once, with epoch 1 (or above what it saw), and may overlap
//     a holder whose Lease was deleted under it — and so may a process that takes over from it,
//     having timed only its record and never seen the older one. Deletion is the cluster's to
//     refuse: the chart's lease guard forbids it.
//   - create-delete-unseen: someone else's holding and the Lease's deletion after it, both while
//     this process could not see them (before its current watch began — an earlier stream that
//     ended without delivering them included — or between two of its watches), when that
//     holder's duration is longer than any this process believes in; or such a holding and
//     deletion whose watch events were still on their way (the holding's perhaps lost with an
//     earlier stream) when this process sent its own create, or its takeover of the Lease
//     recreated after that deletion: a create-then-delete, or a write after its stream began
//     when that stream had brought it nothing yet (a read found the Lease gone, or recreated;
//     nothing tells it the stream is behind). A create cannot be made conditional on "never
//     existed", and no process can know a duration it never saw; only a cluster that refuses
//     deletes closes it. (A watch resumed from the last resourceVersion seen would narrow the
//     first case; this package starts each stream afresh.)
//   - vm-freeze: a freeze that stops every clock of the holder's machine (a paused VM whose
//     kvmclock stands still) cannot be seen from inside: on resume the holder reports a valid token
//     for the rest of its lease, next to a successor, and acts on it: a record that names it with
//     another epoch (a successor that shares its identity) reads as an edit under its valid
//     token, which it re-acquires at once, above the successor's epoch. The fence's epoch check
//     closes it (one of the two epochs is refused) and nothing on the client can.
//   - impersonation: anyone who can write the Lease can impersonate a release (blank the holder:
//     the holding whose record it blanks may overlap whoever takes the release), a holder, or a
//     shorter duration that a candidate which never saw the real one trusts; no
//     client-side algorithm can tell such a write from the real one. The lease guard admits writes
//     to ehdb-shard-* Leases from the writer's ServiceAccount only, keeps leaseTransitions moving by
//     0 or +1, and refuses a shorter duration over a record that is not released.
//   - fence: a valid token says "no one else holds a valid token now", not that a write sent with
//     it arrives before the token lapses. The fence, not this package, must reject stale epochs.
//
// OnEvent runs on the election's goroutine: it must return quickly (the election does not renew
// while it runs). It may call Release, which then drops the token, returns at once and lets the
// election hand the Lease over as it stops. Release tells that call apart by OnEvent running, not
// by goroutine (Go has no goroutine identity): a Release from another goroutine while OnEvent runs
// also returns at once, its token dropped, and the hand-over waits for OnEvent to return. A process
// that exits right after such a Release leaves its successor to wait out the lease (no overlap).
package election
