package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// This file answers: how do concurrent RBAC reviews read the bindings? Each review must see every
// binding change admitted before it began (two removals in a row must each see the other's
// result), so nothing is cached across reviews; but a list that began after a review began is as
// fresh as its own. A namespace admin decides how large a namespace's RoleBindings are (the
// twenty-sixth red team made 16 of 14,000 subjects each, a 15.5 MB list), and 32 reviews each
// holding their own copy took the webhook to 474 MB, past the chart's 128 MiB limit. So per scope
// at most one list runs at a time, and every review that asks while it runs joins the next one,
// which starts when it ends: at most two copies per scope are held, however many reviews wait.

// bindingListTimeout bounds one shared list (its waiters each keep their own deadline).
const bindingListTimeout = 10 * time.Second

// bindingLists shares lists of bindings among the reviews of one process.
type bindingLists struct {
	mu    sync.Mutex
	scope map[string]*scopeLists
}

// scopeLists is one scope's list running now and the one its late askers wait for.
type scopeLists struct{ running, next *bindingList }

// bindingList is one list from the API server and its result, once done is closed.
type bindingList struct {
	done chan struct{}
	fact BindingsFact
}

// get returns a list of scope that began after the call did, read with list.
func (b *bindingLists) get(ctx context.Context, scope string, list func(context.Context) BindingsFact) BindingsFact {
	b.mu.Lock()
	if b.scope == nil {
		b.scope = map[string]*scopeLists{}
	}
	s := b.scope[scope]
	if s == nil {
		s = &scopeLists{}
		b.scope[scope] = s
	}
	var l *bindingList
	switch {
	case s.running == nil:
		l = &bindingList{done: make(chan struct{})}
		s.running = l
		go b.run(scope, s, l, list)
	case s.next == nil:
		// The running list may have begun before this call: wait for the next one.
		s.next = &bindingList{done: make(chan struct{})}
		fallthrough
	default:
		l = s.next
	}
	b.mu.Unlock()
	select {
	case <-l.done:
		return l.fact
	case <-ctx.Done():
		return BindingsFact{Err: fmt.Errorf("waiting for the bindings of %q: %w", scope, ctx.Err())}
	}
}

// run reads l, then starts the list its late askers wait for, if any; the last one forgets the
// scope, so nothing is kept once no review asks.
func (b *bindingLists) run(scope string, s *scopeLists, l *bindingList, list func(context.Context) BindingsFact) {
	ctx, cancel := context.WithTimeout(context.Background(), bindingListTimeout)
	l.fact = list(ctx)
	cancel()
	b.mu.Lock()
	s.running, s.next = s.next, nil
	if s.running != nil {
		go b.run(scope, s, s.running, list)
	} else {
		delete(b.scope, scope)
	}
	b.mu.Unlock()
	close(l.done)
}
