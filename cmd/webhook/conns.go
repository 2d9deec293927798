package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/noetl/ehdb-election/webhook"
)

// This file answers: which connections may stay open? At most max at once (each costs about
// 50 KiB whatever its client sends), and when a new connection arrives at the cap it takes the
// place of one that is doing nothing the API server would do. Only a client address holding more
// connections than the newcomer's, or the newcomer's own, gives one up, so a flood from one
// address churns through its own places and never the API server's; of those, in this order:
//   - the one whose review waits longest for a slot behind its own requester's, if the API
//     server refuses that review when it is not answered (webhook.PhaseQueued): closing it costs
//     the review what its deadline would, while the newcomer may carry another's Pod review, which
//     the API server admits unjudged when it cannot reach the guard. Heavy reviews through the API
//     server (a namespace admin's dry runs, team E) otherwise held every place, queued behind
//     their slots, and Pods failed open. They go before stuck ones: on a webhook starved of CPU
//     the API server's own bodies can look stuck (the bench's flood closed a Pod review's);
//   - the one whose request has waited on its client longest: a body arriving for more than
//     bodyGrace (the API server sends a review in one write), or an answer unread for more than
//     answerGrace (the API server reads it at once);
//   - a new one that has sent no request yet, of the client address holding the most
//     connections, the oldest: the API server sends its request as soon as its TLS handshake is done, so only
//     a flood of connects faster than max per handshake could catch one of its own;
//   - the longest idle one (a kept-alive connection between reviews: closing one races the API
//     server's next request on it, which then fails, so it goes last; the bench saw one EOF).
// Only when every connection that may give up its place is busy with a review whose body has
// arrived, or whose body is younger than bodyGrace, does the new one wait.
//
// Without the eviction the cap was a door to hold shut: 700 unauthenticated clients that sent one
// request each and then idled on keep-alive held all 256 places and the API server could not
// reach the webhook, so armed Pods failed open (the second red team); 700 that kept sending a
// claimed 7 MB body at 32 KiB every 450 ms did the same (the twelfth); and 200 plain TCP connects
// a second, sending nothing, did it while silent connections could give up their place only after
// a second: the server took in at most max a second and the API server's dial queued behind the
// rest in the kernel until its calls timed out (the thirteenth). The API server loses nothing by
// it: a kept-alive connection closed under it is redialled, and its bodies are never slow.

// bodyGrace is how long a request's body may take to arrive before its connection may give up
// its place to a new one: the API server's arrives with its headers.
const bodyGrace = 50 * time.Millisecond

// answerGrace is how long an answer may take to be written before its connection may give up its
// place: the API server reads its answer at once, and an answer of a few KiB fits the socket's
// buffer. A client that pipelines reviews and reads nothing fills it (the fourteenth red team).
const answerGrace = 100 * time.Millisecond

// capListener is a net.Listener with the cap and eviction above. Its Server must have ConnState
// set to the listener's track method, so it knows which connections are idle, and ConnContext to
// its connContext, so a request can say where it is (webhook.WithPhases).
type capListener struct {
	net.Listener
	max int

	mu     sync.Mutex
	freed  *sync.Cond
	open   map[*cappedConn]struct{}
	closed bool
}

func newCapListener(l net.Listener, max int) *capListener {
	c := &capListener{Listener: l, max: max, open: map[*cappedConn]struct{}{}}
	c.freed = sync.NewCond(&c.mu)
	return c
}

// cappedConn is one connection and what the server last said it was doing.
type cappedConn struct {
	net.Conn
	l      *capListener
	once   sync.Once
	opened time.Time
	state  http.ConnState
	since  time.Time // when it entered state
	host   string    // the client's address, without its port
	// bodyDone is set once the request being served has all of its body, answering while its
	// answer is being written (reached); both are cleared when the connection starts on another
	// request.
	bodyDone  bool
	answering time.Time
	// queued is set while the request's review, which fails closed, waits for a slot
	// (webhook.PhaseQueued).
	queued bool
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
		c.l.freed.Broadcast()
	})
	return err
}

// reached records where the connection's request is (webhook.WithPhases).
func (c *cappedConn) reached(p webhook.Phase) {
	c.l.mu.Lock()
	switch p {
	case webhook.PhaseBodyRead:
		c.bodyDone = true
	case webhook.PhaseAnswering:
		c.answering = time.Now()
	case webhook.PhaseAnswered:
		c.answering = time.Time{}
	case webhook.PhaseQueued:
		c.queued = true
	case webhook.PhaseJudging:
		c.queued = false
	}
	c.l.mu.Unlock()
}

// Accept accepts a connection, then makes a place for it (closing one that is doing nothing) or
// waits for one, so a place is given up only to a connection that has arrived.
func (l *capListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	host := remoteHost(conn)
	l.mu.Lock()
	for len(l.open) >= l.max && !l.closed {
		if victim := l.evictable(time.Now(), host); victim != nil {
			l.mu.Unlock()
			victim.Close()
			l.mu.Lock()
			continue
		}
		// Every connection that may give up its place is at work on a review: wait for one to
		// close or to go idle, checking again as a body's grace runs out.
		timer := time.AfterFunc(bodyGrace/4, l.freed.Broadcast)
		l.freed.Wait()
		timer.Stop()
	}
	if l.closed {
		l.mu.Unlock()
		conn.Close()
		return nil, net.ErrClosed
	}
	now := time.Now()
	c := &cappedConn{Conn: conn, l: l, opened: now, state: http.StateNew, since: now, host: host}
	l.open[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// evictable is the connection that gives up its place to a new one from newHost, or nil.
// l.mu is held.
//
// Only a client host holding more connections than newHost does, or newHost itself, gives one
// up. Without that rule a flood from one address that churns through every place, each of its
// bodies younger than bodyGrace, closed the API server's new connection while its TLS handshake
// was still under way, as the one silent connection there was: a loaded CI run under the race
// detector saw the review reset 1 ms after it connected, and the API server does not retry a
// POST that was reset. Now such a flood can take places only from itself, and a host holding
// fewer connections than the newcomer's is never a victim. Among the hosts that may give one up,
// queued connections go first, then stuck ones, then silent ones, then idle ones; of each, the
// busiest host's oldest, so one client's flood costs its own connections, not the API server's, even when the
// webhook is too starved of CPU to read a body within bodyGrace.
func (l *capListener) evictable(now time.Time, newHost string) *cappedConn {
	held := map[string]int{}
	for c := range l.open {
		held[c.host]++
	}
	var stuck, queued, silent, idle []*cappedConn
	for c := range l.open {
		if c.host != newHost && held[c.host] <= held[newHost] {
			continue
		}
		switch {
		case c.state == http.StateActive && c.stuck(now):
			stuck = append(stuck, c)
		case c.state == http.StateActive && c.queued:
			queued = append(queued, c)
		case c.state == http.StateNew:
			silent = append(silent, c)
		case c.state == http.StateIdle:
			idle = append(idle, c)
		}
	}
	if c := oldestOfBusiest(queued, held, func(c *cappedConn) time.Time { return c.since }); c != nil {
		return c
	}
	if c := oldestOfBusiest(stuck, held, (*cappedConn).stuckSince); c != nil {
		return c
	}
	if c := oldestOfBusiest(silent, held, func(c *cappedConn) time.Time { return c.opened }); c != nil {
		return c
	}
	return oldestOfBusiest(idle, held, func(c *cappedConn) time.Time { return c.since })
}

// oldestOfBusiest is, of the connections in cs, the one of the host holding the most
// connections whose since is earliest (across hosts tied for the most), or nil. l.mu is held.
func oldestOfBusiest(cs []*cappedConn, held map[string]int, since func(*cappedConn) time.Time) *cappedConn {
	var out *cappedConn
	for _, c := range cs {
		if out == nil || held[c.host] > held[out.host] || held[c.host] == held[out.host] && since(c).Before(since(out)) {
			out = c
		}
	}
	return out
}

// stuck reports whether c's request is waiting on its client: a body arriving for more than
// bodyGrace, or an answer not read for more than answerGrace. l.mu is held.
func (c *cappedConn) stuck(now time.Time) bool {
	return (!c.bodyDone && now.Sub(c.since) >= bodyGrace) || (!c.answering.IsZero() && now.Sub(c.answering) >= answerGrace)
}

// stuckSince is when c's request began to wait on its client. l.mu is held.
func (c *cappedConn) stuckSince() time.Time {
	if !c.bodyDone {
		return c.since
	}
	return c.answering
}

// connContext is the Server's ConnContext hook: a request on the connection can say its body has
// arrived.
func (l *capListener) connContext(ctx context.Context, conn net.Conn) context.Context {
	if tc, ok := conn.(*tls.Conn); ok {
		if c, ok := tc.NetConn().(*cappedConn); ok {
			return webhook.WithPhases(ctx, c.reached)
		}
	}
	return ctx
}

// track is the Server's ConnState hook: it records what each connection is doing.
func (l *capListener) track(conn net.Conn, state http.ConnState) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return
	}
	c, ok := tc.NetConn().(*cappedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	c.state, c.since = state, time.Now()
	if state == http.StateActive {
		c.bodyDone, c.answering, c.queued = false, time.Time{}, false // a new request: its body is still to come
	}
	l.mu.Unlock()
	if state == http.StateIdle {
		l.freed.Broadcast() // a waiting Accept may take its place
	}
}

func (l *capListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.freed.Broadcast()
	return l.Listener.Close()
}

// remoteHost is conn's client address without its port ("" when it has none).
func remoteHost(conn net.Conn) string {
	host, _, err := net.SplitHostPort(conn.RemoteAddr().String())
	if err != nil {
		return conn.RemoteAddr().String()
	}
	return host
}
