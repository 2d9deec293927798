package main

import (
	"context"
	"crypto/tls"
	"errors"
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
//     more than bodyGrace (the API server sends a review in one write), or a request still
//     arriving after arrivalGrace, or a write of its answer blocked for more than answerGrace
//     (the API server reads it at once);
//   - a new one, of the client address holding the most connections the oldest, that has sent
//     nothing for silentGrace, or has spoken and not finished its handshake and request within
//     arrivalGrace: the API server sends its request as soon as its TLS handshake is done;
//   - the longest idle one, idle for idleGrace or more (a kept-alive connection between reviews:
//     closing one races the API server's next request on it, which then fails, so it goes last).
// Each counts only while the server's read of it is blocked with nothing received unread (the
// kernel's word, SIOCINQ, outranks the server's reads): a connection the server has not got round
// to is not waiting on its client.
// What is doing the API server's work never gives up its place: its bodies, the handshakes of
// its new connections, the connections it is about to reuse. With more of its calls in flight
// than there are places (red team J: a namespace admin's 66 concurrent dry-run Pod creates, past
// the 64 places of the time), its newest connections closed each other as silent and its idle
// ones were closed under it, and armed Pods failed open on EOF; now the new connection waits in
// the lobby while the API server's next call takes a connection a review of its frees, and the
// default cap (256) is about the concurrency a namespace admin's API Priority and Fairness share
// gives her on a default API server.
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

// arrivalGrace is how long a connection's handshake, once its client has spoken, or its request,
// once begun, may take to arrive before it may give up its place whenever its server waits on its
// client, however often that client sends a byte: the API server's arrive in milliseconds, but
// a client starved of CPU must not lose its handshake (CI run 71: one reset of 981 calls when a
// new connection that had spoken could give up its place 100 ms after it opened), and a client
// that keeps each of the server's reads just short of a grace (a byte every 50 ms) held its place
// until the handshake's or the headers' deadline (5 s, the API server's own timeout).
const arrivalGrace = time.Second

// idleGrace is how long a kept-alive connection must have been idle before it may give up its
// place: closing one races the client's next request on it, which then fails (the API server
// does not resend a POST; Go's transport reports "server closed idle connection"), and under
// load the API server reuses an idle connection within milliseconds.
const idleGrace = time.Second

// capListener is a net.Listener with the cap and eviction above. Its Server must have ConnState
// set to the listener's track method, so it knows which connections are idle, and ConnContext to
// its connContext, so a request can say where it is (webhook.WithPhases).
//
// It takes connections in from the kernel as they arrive, into a lobby, and gives the Server the
// waiting one of the client address holding the fewest places first. Taken in the kernel's order,
// a flood from one address that connected faster than its own places could be given up queued
// ahead of the API server's dial: a connection that has spoken keeps its place for arrivalGrace,
// so at the cap one address could be let in at most max times a second, and past that its
// connections waited in front of the API server's until its calls timed out.
type capListener struct {
	net.Listener
	max int

	mu       sync.Mutex
	freed    *sync.Cond
	open     map[*cappedConn]struct{}
	lobby    []waiting // arrived, without a place, oldest first
	takeErr  error     // why taking in stopped
	closed   bool
	takingIn sync.Once
}

// waiting is a connection in the lobby.
type waiting struct {
	conn net.Conn
	host string
}

// lobbySize is how many connections may wait in the lobby for a place: more than the dials a
// busy API server has under way at once. Each costs its socket and what its client has sent (at
// most socketBuffer's worth), nothing of the server's until it is let in; past it one of the
// address with the most waiting is hung up on (turnAway), so a flood displaces its own and
// never the API server's.
const lobbySize = 128

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
	// bodyDone is set once the request being served has all of its body (reached); it is
	// cleared when the connection starts on another request.
	bodyDone bool
	// queued is set while the request's review, which fails closed, waits for a slot
	// (webhook.PhaseQueued).
	queued bool
	// reading and writing are when a Read or Write now blocked on the connection began (unix
	// nanoseconds; 0 when none is): the ground truth of a server waiting on its client.
	reading, writing atomic.Int64
	// heard is set once the client has sent the connection a byte.
	heard atomic.Bool
}

func (c *cappedConn) Read(p []byte) (int, error) {
	c.reading.Store(time.Now().UnixNano())
	defer c.reading.Store(0)
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
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
	case webhook.PhaseQueued:
		c.queued = true
	case webhook.PhaseJudging:
		c.queued = false
	}
	c.l.mu.Unlock()
}

// Accept lets in the next connection: of the lobby, the waiting one of the client address holding
// the fewest places (the oldest of those), once it has a place, made by closing one that is
// doing nothing or by waiting for one, so a place is given up only to a connection that has
// arrived.
func (l *capListener) Accept() (net.Conn, error) {
	l.takingIn.Do(func() { go l.takeIn() })
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.closed {
			return nil, net.ErrClosed
		}
		i := l.next()
		if i < 0 {
			if l.takeErr != nil {
				return nil, l.takeErr
			}
			l.freed.Wait()
			continue
		}
		w := l.lobby[i]
		if len(l.open) < l.max {
			l.lobby = append(l.lobby[:i], l.lobby[i+1:]...)
			now := time.Now()
			c := &cappedConn{Conn: w.conn, l: l, opened: now, state: http.StateNew, since: now, host: w.host}
			l.open[c] = struct{}{}
			return c, nil
		}
		if victim := l.evictable(time.Now(), w.host); victim != nil {
			l.mu.Unlock()
			victim.Close()
			l.mu.Lock()
			continue
		}
		// Every connection that may give up its place is at work on a review: wait for one to
		// close or to go idle, or for a newcomer from an address holding fewer, checking again as
		// a grace runs out.
		timer := time.AfterFunc(bodyGrace/4, l.freed.Broadcast)
		l.freed.Wait()
		timer.Stop()
	}
}

// placesByHost is how many open connections each client address holds. l.mu is held.
func (l *capListener) placesByHost() map[string]int {
	held := map[string]int{}
	for c := range l.open {
		held[c.host]++
	}
	return held
}

// next is the index in the lobby of the connection to let in next, or -1. l.mu is held.
func (l *capListener) next() int {
	if len(l.lobby) == 0 {
		return -1
	}
	held := l.placesByHost()
	best := 0
	for i, w := range l.lobby {
		if held[w.host] < held[l.lobby[best].host] {
			best = i
		}
	}
	return best
}

// takeIn moves connections from the kernel into the lobby until the listener closes. A
// temporary error (out of file descriptors) is waited out, as net/http's Serve does.
func (l *capListener) takeIn() {
	var delay time.Duration
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Temporary() && !errors.Is(err, net.ErrClosed) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			l.mu.Lock()
			l.takeErr = err
			l.mu.Unlock()
			l.freed.Broadcast()
			return
		}
		delay = 0
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		l.lobby = append(l.lobby, waiting{conn: conn, host: remoteHost(conn)})
		var out net.Conn
		if len(l.lobby) > lobbySize {
			out = l.turnAway()
		}
		l.mu.Unlock()
		if out != nil {
			out.Close()
		}
		l.freed.Broadcast()
	}
}

// turnAway takes out of the full lobby the oldest connection of the address with the most
// waiting (of those tied, the one that connected last), and returns it to be hung up on. l.mu is
// held.
//
// The oldest of its own, not the newest: a client with more calls than places (an HTTP/1.1
// client such as the API server's dials a connection for each call that finds none idle) gives
// the first connection to go idle to the call that has waited longest, so its oldest dial is the
// one no call is waiting on any longer. Turning away the newest failed 11,886 of 15,878 such
// calls (TestTheAPIServersCallsPastTheCapAreAnswered). Of the addresses tied, the one that
// connected last: a flood from many addresses, each with one waiting, is still arriving, while
// the API server's one waiting dial would otherwise be turned away for being the oldest.
func (l *capListener) turnAway() net.Conn {
	count, last := map[string]int{}, map[string]int{}
	for i, w := range l.lobby {
		count[w.host]++
		last[w.host] = i
	}
	host := l.lobby[0].host
	for h, n := range count {
		if n > count[host] || n == count[host] && last[h] > last[host] {
			host = h
		}
	}
	for i, w := range l.lobby {
		if w.host == host {
			l.lobby = append(l.lobby[:i], l.lobby[i+1:]...)
			return w.conn
		}
	}
	return nil // not reached: host has a connection waiting
}

// evictable is the connection that gives up its place to a new one from newHost, or nil.
// l.mu is held.
//
// Only a client host holding more connections than newHost does, or newHost itself, gives one
// up, unless it is stuck (provably waiting on its client). Without that rule a flood from one address that churns through every place, each of its
// bodies younger than bodyGrace, closed the API server's new connection while its TLS handshake
// was still under way, as the one silent connection there was: a loaded CI run under the race
// detector saw the review reset 1 ms after it connected, and the API server does not retry a
// POST that was reset. Now such a flood can take places only from itself, and a host holding
// fewer connections than the newcomer's is never a victim. Among the hosts that may give one up,
// queued connections go first, then stuck ones, then silent ones, then idle ones; of each, the
// busiest host's oldest, so one client's flood costs its own connections, not the API server's, even when the
// webhook is too starved of CPU to read a body within bodyGrace.
func (l *capListener) evictable(now time.Time, newHost string) *cappedConn {
	held := l.placesByHost()
	var stuck, queued, silent, idle []*cappedConn
	for c := range l.open {
		// What provably waits on its client (the kernel's word) gives up its place to anyone:
		// from a fresh address each, a flood's hosts held one place apiece, as few as the API
		// server's newcomer, and gave up none (red team M).
		if c.stuck(now) {
			stuck = append(stuck, c)
			continue
		}
		if c.host != newHost && held[c.host] <= held[newHost] {
			continue
		}
		switch {
		case c.state == http.StateActive && c.queued:
			queued = append(queued, c)
		case c.state == http.StateNew && c.silent(now, c.host == newHost):
			silent = append(silent, c)
		case c.state == http.StateIdle && now.Sub(c.since) >= idleGrace && c.waitingOnClient(now, idleGrace):
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

// stuck reports whether c is waiting on its client: a write to it blocked for more than
// answerGrace, whatever the server was writing (an answer, a refusal, the handshake's flight:
// the API server reads at once, and what the server writes fits the socket's buffer), or, while
// it is serving a request, a read of that request blocked for more than bodyGrace, or the
// request still arriving after arrivalGrace. A request the server has not got round to reading
// (a webhook starved of CPU, a body waiting for the body budget) is not stuck: the bench's flood
// closed the API server's connections whose bodies had arrived but had not been read within
// bodyGrace. Red team L's refusals, written before the answering phase to clients that read
// none of them, held their places for the 35 s write timeout while only an answer's write
// counted. l.mu is held.
func (c *cappedConn) stuck(now time.Time) bool {
	if w := blockedSince(c.writing.Load()); !w.IsZero() && now.Sub(w) >= answerGrace {
		return true
	}
	return c.state == http.StateActive && !c.bodyDone &&
		(c.waitingOnClient(now, bodyGrace) || now.Sub(c.since) >= arrivalGrace && c.waitingOnClient(now, 0))
}

// waitingOnClient reports whether c's server has waited grace or more for its client's next
// bytes: a read on c blocked that long, and nothing received that it has yet to read. Both are
// the ground truth of a server waiting on its client, not of a client waiting for a server that
// has not got round to it: on a machine loaded by other tests, the race detector on, the API
// server's new connections sat unread for over 100 ms and were closed as silent (CI run 70: 10 of
// 589 calls failed), and a kept-alive one whose next request had arrived, its reader woken but
// not yet run, could be closed as idle under the request. l.mu is held.
func (c *cappedConn) waitingOnClient(now time.Time, grace time.Duration) bool {
	r := blockedSince(c.reading.Load())
	if r.IsZero() || now.Sub(r) < grace {
		return false
	}
	n, _ := unread(c.Conn)
	return n == 0
}

// silent reports whether new connection c may give up its place as silent: to a newcomer from
// another address once it is newGrace old and its server waits on it (so a client that keeps
// each read short of a grace still gives way to the API server); to one from its own address only
// once it has kept its server waiting arrivalGrace. A client's own newcomer gains it nothing but
// a place for another of its dials, while a client starved of CPU between its connect and its
// ClientHello, or within its handshake, loses the call it carries: CI run 73, loaded by two red
// teams, failed one of the API server's 460 calls on EOF. l.mu is held.
func (c *cappedConn) silent(now time.Time, own bool) bool {
	if own {
		return c.waitingOnClient(now, arrivalGrace)
	}
	return now.Sub(c.opened) >= c.newGrace() && c.waitingOnClient(now, 0)
}

// newGrace is how old a new connection must be to count as silent while its server waits on its
// client: silentGrace while it has sent nothing (a TLS client sends its ClientHello as it
// connects, so by the time the server reads, it is there), arrivalGrace once it has spoken (what
// follows, the handshake's other flight and the request, waits on the client's CPU too).
func (c *cappedConn) newGrace() time.Duration {
	if c.heard.Load() {
		return arrivalGrace
	}
	return silentGrace
}

// stuckSince is when c began to wait on its client. l.mu is held.
func (c *cappedConn) stuckSince() time.Time {
	if w := blockedSince(c.writing.Load()); !w.IsZero() {
		return w
	}
	return blockedSince(c.reading.Load())
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
		c.bodyDone, c.queued = false, false // a new request: its body is still to come
	}
	l.mu.Unlock()
	if state == http.StateIdle {
		l.freed.Broadcast() // a waiting Accept may take its place
	}
}

func (l *capListener) Close() error {
	l.mu.Lock()
	l.closed = true
	lobby := l.lobby
	l.lobby = nil
	l.mu.Unlock()
	l.freed.Broadcast()
	for _, w := range lobby {
		w.conn.Close()
	}
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
