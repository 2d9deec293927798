package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noetl/ehdb-election/webhook"
)

// This file answers: which connections may stay open? At most max at once (each costs about
// 50 KiB whatever its client sends), and when a new connection arrives at the cap it takes the
// place of one that is doing nothing the API server would do. Only a client address holding more
// connections than the newcomer's, or the newcomer's own, gives one up, so a flood from one
// address churns through its own places and never the API server's; of those, in this order:
//   - the one whose review waits longest for a slot while its own requester holds its share of
//     them (webhook's perRequester), if the API
//     server refuses that review when it is not answered (webhook.PhaseQueued): closing it costs
//     the review what its deadline would, while the newcomer may carry another's Pod review, which
//     the API server admits unjudged when it cannot reach the guard. Heavy reviews through the API
//     server (a namespace admin's dry runs, team E) otherwise held every place, queued behind
//     their slots, and Pods failed open;
//   - the one whose request has waited on its client longest: a read of its request blocked for
//     more than bodyGrace (the API server sends a review in one write), or a write of its answer
//     blocked for more than answerGrace (the API server reads it at once);
//   - a new one that has sent no request for silentGrace, of the client address holding the
//     most connections, the oldest:
//     the API server sends its request as soon as its TLS handshake is done;
//   - the longest idle one, idle for idleGrace or more (a kept-alive connection between reviews:
//     closing one races the API server's next request on it, which then fails, so it goes last).
// What is doing the API server's work never gives up its place: its bodies, the handshakes of
// its new connections, the connections it is about to reuse. With more of its calls in flight
// than there are places (red team J: a namespace admin's 66 concurrent dry-run Pod creates, past
// the 64 places of the time), its newest connections closed each other as silent and its idle
// ones were closed under it, and armed Pods failed open on EOF; now the new connection waits in
// the kernel's backlog while the API server's next call takes a connection a review of its
// frees, and the default cap (512) is above the concurrency a namespace admin's API Priority
// and Fairness share gives her on a default API server.
// When none may give up its place, the new one waits.
//
// Without the eviction the cap was a door to hold shut: 700 unauthenticated clients that sent one
// request each and then idled on keep-alive held all 256 places and the API server could not
// reach the webhook, so armed Pods failed open (the second red team); 700 that kept sending a
// claimed 7 MB body at 32 KiB every 450 ms did the same (the twelfth); and 200 plain TCP connects
// a second, sending nothing, did it while silent connections could give up their place only after
// a second: the server took in at most max a second and the API server's dial queued behind the
// rest in the kernel until its calls timed out (the thirteenth). The API server loses nothing by
// it: a kept-alive connection closed under it is redialled, and its bodies are never slow.

// bodyGrace is how long the server may wait on a request's client for more of its request (a
// read blocked on the connection) before the connection may give up its place to a new one: the
// API server sends its request in one write.
const bodyGrace = 50 * time.Millisecond

// answerGrace is how long an answer's write may stay blocked before its connection may give up
// its place: the API server reads its answer at once, and an answer of a few KiB fits the socket's
// buffer. A client that pipelines reviews and reads nothing fills it (the fourteenth red team).
const answerGrace = 100 * time.Millisecond

// silentGrace is how long a new connection may send nothing before it may give up its place.
// The API server sends its request as soon as its TLS handshake is done, but that handshake is
// this server's work, and the API server's own next connection must not close it (red team J:
// with more of its calls in flight than places, the API server's newest connections closed each
// other, and 1,140 of 2,987 armed Pods failed open on EOF). It stays short: at the cap a flood of
// silent connects from one address gets new places only as fast as its own age past it (the
// thirteenth red team's 300 a second).
const silentGrace = 100 * time.Millisecond

// idleGrace is how long a kept-alive connection must have been idle before it may give up its
// place: closing one races the client's next request on it, which then fails (the API server
// does not resend a POST; Go's transport reports "server closed idle connection"), and under
// load the API server reuses an idle connection within milliseconds.
const idleGrace = time.Second

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
	// reading and writing are when a Read or Write now blocked on the connection began (unix
	// nanoseconds; 0 when none is): the ground truth of a server waiting on its client.
	reading, writing atomic.Int64
}

func (c *cappedConn) Read(p []byte) (int, error) {
	c.reading.Store(time.Now().UnixNano())
	defer c.reading.Store(0)
	return c.Conn.Read(p)
}

func (c *cappedConn) Write(p []byte) (int, error) {
	c.writing.Store(time.Now().UnixNano())
	defer c.writing.Store(0)
	return c.Conn.Write(p)
}

// blockedSince is when the call that started at nanos began (zero time for none).
func blockedSince(nanos int64) time.Time {
	if nanos == 0 {
		return time.Time{}
	}
	return time.Unix(0, nanos)
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
		case c.state == http.StateNew && now.Sub(c.opened) >= silentGrace:
			silent = append(silent, c)
		case c.state == http.StateIdle && now.Sub(c.since) >= idleGrace:
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

// stuck reports whether c's request is waiting on its client: a read of its request blocked for
// more than bodyGrace, or a write of its answer blocked for more than answerGrace. A request the
// server has not got round to reading (a webhook starved of CPU, a body waiting for the body
// budget) is not stuck: the bench's flood closed the API server's connections whose bodies had
// arrived but had not been read within bodyGrace. l.mu is held.
func (c *cappedConn) stuck(now time.Time) bool {
	r, w := blockedSince(c.reading.Load()), blockedSince(c.writing.Load())
	return (!c.bodyDone && !r.IsZero() && now.Sub(r) >= bodyGrace) || (!c.answering.IsZero() && !w.IsZero() && now.Sub(w) >= answerGrace)
}

// stuckSince is when c's request began to wait on its client. l.mu is held.
func (c *cappedConn) stuckSince() time.Time {
	if r := blockedSince(c.reading.Load()); !c.bodyDone && !r.IsZero() {
		return r
	}
	return blockedSince(c.writing.Load())
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
