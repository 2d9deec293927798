package webhook

import (
	"context"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// This file answers: which review is judged next? A process judges at most limit reviews at
// once. Two rules share them out, each closing a way to hold the guard:
//
//   - Reviews the API server refuses when unanswered (workloads, ConfigMaps, namespaced RBAC)
//     hold at most limit − failOpenReserve(limit) slots, so the rest are always left for those it
//     admits (Pod creates, cluster RBAC): a flood of heavy dry runs (team E's RoleBinding deletes,
//     each listing 200,000 made-up accounts) costs only those dry runs.
//   - A free slot goes to the waiting review whose requester (a user; the ServiceAccounts of one
//     namespace together, since whoever administers it can make more of them) holds the fewest,
//     first come first served among equals. A requester alone may take every slot, but one
//     requester's flood — a namespace admin's heavy Pods, reading 32 ConfigMaps of 1 MB each
//     (team G) — waits behind itself: another requester's review (the StatefulSet controller's
//     Pod, a cluster admin's edit) takes the next slot that frees. A review that waits until its
//     deadline while its own requester holds perRequester(limit) slots or more is refused
//     (Handler.unjudged), never left to the failure policy: its requester's load kept it waiting.

// perRequester is how many slots a requester holds when its own load is what keeps its next
// review waiting: an eighth.
func perRequester(limit int) int { return max(1, limit/8) }

// failOpenReserve is how many of limit slots only reviews that fail open may take: a quarter.
// The API server admits a Pod whose review is not answered (the chart's Pods entry is Ignore, so
// that a guard outage never stops a crashed writer's replacement), and so a cluster-scoped RBAC
// change (its entry is Ignore, so that a guard outage never locks out cluster admins). Every other
// review is refused when unanswered.
func failOpenReserve(limit int) int { return limit / 4 }

// failsOpen reports whether the API server admits r when the guard does not answer it, with the
// chart's failure policies (webhook.failurePolicy.pods and .clusterRBAC, both Ignore by
// default): a Pod created, a ClusterRole or ClusterRoleBinding changed.
func failsOpen(r Request) bool {
	if r.SubResource != "" {
		return false
	}
	switch schema.GroupVersionKind(r.Kind) {
	case gvkPod:
		return r.Operation == admissionv1.Create
	case gvkClusterRole, gvkClusterRoleBinding:
		return true
	}
	return false
}

// requesterOf is whom r's load is counted to: its user, or "serviceaccounts:<ns>" for any
// ServiceAccount of namespace ns. Only the API server's word for it: a client that reaches the
// webhook's port without it (no client certificates) can claim any user (README, trust).
func requesterOf(u authenticationv1.UserInfo) string {
	if rest, ok := strings.CutPrefix(u.Username, "system:serviceaccount:"); ok {
		if ns, _, ok := strings.Cut(rest, ":"); ok {
			return "serviceaccounts:" + ns
		}
	}
	return "user:" + u.Username
}

// slots shares out a process's review slots by the rules above.
type slots struct {
	limit, closedLimit, share int

	mu      sync.Mutex
	held    int            // slots held
	closed  int            // of them, by reviews that fail closed
	by      map[string]int // of them, by requester
	waiting []*slotWaiter  // in arrival order
}

type slotWaiter struct {
	who      string
	failOpen bool
	granted  chan struct{}
}

func newSlots(limit int) *slots {
	return &slots{limit: limit, closedLimit: max(1, limit-failOpenReserve(limit)), share: perRequester(limit), by: map[string]int{}}
}

// acquire waits until ctx ends for a slot for a review of who (failing open or not). busy says,
// when it returns false, whether who held its whole share all the while it waited (so its own
// load kept it waiting). queued is called once if the review must wait while who already holds
// its share: such a review is the first whose connection may give up its place.
func (s *slots) acquire(ctx context.Context, who string, failOpen bool, queued func()) (release func(), ok, busy bool) {
	w := &slotWaiter{who: who, failOpen: failOpen, granted: make(chan struct{})}
	s.mu.Lock()
	s.waiting = append(s.waiting, w)
	s.dispatch()
	select {
	case <-w.granted:
		s.mu.Unlock()
		return s.releaser(w), true, false
	default:
	}
	// Only its requester's own share keeps it waiting: a connection queued so may give up its
	// place (red team J: a cluster admin's edit, queued behind one review of hers during another's
	// flood, lost its connection and was refused).
	behindOwn := s.by[who] >= s.share && !failOpen
	ownLoad := s.by[who] >= s.share
	s.mu.Unlock()
	if behindOwn && queued != nil {
		queued()
	}

	select {
	case <-w.granted:
		return s.releaser(w), true, false
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted: // granted as the deadline came: give it back
		s.free(w)
	default:
		for i, o := range s.waiting {
			if o == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
	}
	return nil, false, ownLoad && s.by[who] >= s.share
}

func (s *slots) releaser(w *slotWaiter) func() {
	return func() {
		s.mu.Lock()
		s.free(w)
		s.mu.Unlock()
	}
}

// free gives w's slot back and hands out what that frees. s.mu is held.
func (s *slots) free(w *slotWaiter) {
	s.held--
	if !w.failOpen {
		s.closed--
	}
	if s.by[w.who]--; s.by[w.who] == 0 {
		delete(s.by, w.who)
	}
	s.dispatch()
}

// dispatch grants free slots to waiting reviews: to the one whose requester holds the fewest,
// the earliest of those, of the ones that may take a slot now. s.mu is held.
func (s *slots) dispatch() {
	for s.held < s.limit {
		best := -1
		for i, w := range s.waiting {
			if !w.failOpen && s.closed >= s.closedLimit {
				continue
			}
			if best < 0 || s.by[w.who] < s.by[s.waiting[best].who] {
				best = i
			}
		}
		if best < 0 {
			return
		}
		w := s.waiting[best]
		s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
		s.held++
		if !w.failOpen {
			s.closed++
		}
		s.by[w.who]++
		close(w.granted)
	}
}
