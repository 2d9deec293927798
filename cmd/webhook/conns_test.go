package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Which connection gives up its place at the cap, as a table over what each one is doing. The
// fourteenth red team held every place with clients that pipelined complete reviews and read no
// answer (their requests looked at work, so nothing was evicted); the thirteenth with silent
// connects, the twelfth with slowly arriving bodies. The newcomer is from a host holding nothing,
// as a redialling API server is, unless the case says it is the flood's (10.0.0.1).
func TestTheConnectionThatGivesUpItsPlace(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	conn := func(name string, state http.ConnState, since time.Time, edit func(*cappedConn)) *cappedConn {
		c := &cappedConn{Conn: stubConn{name}, opened: since, state: state, since: since, host: "10.0.0.1"}
		if state != http.StateActive {
			c.reading.Store(since.UnixNano()) // a new or idle connection's server waits on its client
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	judging := func(c *cappedConn) { c.bodyDone = true } // body in, being judged
	// reading: a read of the request blocked on the client for d; unread: the answer's write
	// blocked for d.
	reading := func(d time.Duration) func(*cappedConn) {
		return func(c *cappedConn) { c.reading.Store(ago(d).UnixNano()) }
	}
	unread := func(d time.Duration) func(*cappedConn) {
		return func(c *cappedConn) { c.bodyDone = true; c.writing.Store(ago(d).UnixNano()) }
	}
	both := func(fs ...func(*cappedConn)) func(*cappedConn) {
		return func(c *cappedConn) {
			for _, f := range fs {
				f(c)
			}
		}
	}
	otherHost := func(c *cappedConn) { c.host = "10.0.0.2" }
	heard := func(c *cappedConn) { c.heard.Store(true) }                // it has sent a byte (a ClientHello)
	queued := func(c *cappedConn) { c.bodyDone, c.queued = true, true } // body in, waiting for a slot (fails closed)
	cases := []struct {
		name    string
		conns   []*cappedConn
		want    string // "" for none: the new connection waits
		newHost string // the newcomer's host; "" for one holding nothing
	}{
		{"every request judged: none", []*cappedConn{conn("a", http.StateActive, ago(time.Second), judging), conn("b", http.StateActive, ago(time.Second), judging)}, "", ""},
		{"an answer unread for 1 s, before an idle one",
			[]*cappedConn{conn("idle", http.StateIdle, ago(time.Minute), nil), conn("unread", http.StateActive, ago(2*time.Second), unread(time.Second)), conn("judging", http.StateActive, ago(3*time.Second), judging)}, "unread", ""},
		// Red team L: a refusal the transport writes before its answering phase (a Content-Type
		// echoed four-fold) to a client that reads nothing held its place for the 35 s write
		// timeout; so would the server's handshake flight. A write blocked on the client is the
		// client's, whatever the server was writing.
		{"a refusal's write blocked 200 ms", []*cappedConn{conn("refusal", http.StateActive, ago(time.Second), func(c *cappedConn) { c.writing.Store(ago(200 * time.Millisecond).UnixNano()) })}, "refusal", ""},
		{"a handshake's write blocked 200 ms", []*cappedConn{conn("handshake", http.StateNew, ago(300*time.Millisecond), func(c *cappedConn) { c.reading.Store(0); c.writing.Store(ago(200 * time.Millisecond).UnixNano()) })}, "handshake", ""},
		{"a handshake's write blocked 10 ms", []*cappedConn{conn("handshake", http.StateNew, ago(300*time.Millisecond), func(c *cappedConn) { c.reading.Store(0); c.writing.Store(ago(10 * time.Millisecond).UnixNano()) })}, "", ""},
		{"an answer being written for 10 ms is at work", []*cappedConn{conn("writing", http.StateActive, ago(time.Second), unread(10*time.Millisecond))}, "", ""},
		{"the body waited on longest", []*cappedConn{conn("slow", http.StateActive, ago(2*time.Second), reading(2*time.Second)), conn("slower", http.StateActive, ago(3*time.Second), reading(3*time.Second)), conn("new", http.StateNew, ago(5*time.Second), nil)}, "slower", ""},
		{"a stuck body of the busiest host first", []*cappedConn{conn("api", http.StateActive, ago(time.Second), both(otherHost, reading(time.Second))), conn("flood1", http.StateActive, ago(200*time.Millisecond), reading(200*time.Millisecond)), conn("flood2", http.StateActive, ago(300*time.Millisecond), reading(300*time.Millisecond))}, "flood2", ""},
		// Red team J, and the bench's flood: on a webhook starved of CPU the API server's body
		// has arrived but is not read yet. Nothing waits on the client: it keeps its place.
		{"a body not read yet, for a second, is not waiting on its client", []*cappedConn{conn("unread-body", http.StateActive, ago(time.Second), nil)}, "", ""},
		{"a silent one of 200 ms before an idle one", []*cappedConn{conn("idle", http.StateIdle, ago(time.Minute), nil), conn("silent", http.StateNew, ago(200*time.Millisecond), nil)}, "silent", ""},
		{"a silent one of 10 ms is a handshake", []*cappedConn{conn("handshake", http.StateNew, ago(10*time.Millisecond), nil)}, "", ""},
		// CI run 70: on a loaded machine the server had not got round to the API server's new
		// connections for over 100 ms. Not read yet, they are not waiting on their client.
		{"a new one of a second the server has not read from", []*cappedConn{conn("unhandled", http.StateNew, ago(time.Second), func(c *cappedConn) { c.reading.Store(0) })}, "", ""},
		{"an idle one whose next request has arrived", []*cappedConn{conn("reused", http.StateIdle, ago(time.Minute), func(c *cappedConn) { c.reading.Store(0) })}, "", ""},
		// CI run 71: a client starved of CPU mid-handshake is not silent; one that spoke and
		// then kept the server waiting a second may give up its place.
		{"a new one of 600 ms that has spoken, waited on for 200 ms, is mid-handshake", []*cappedConn{conn("handshaking", http.StateNew, ago(600*time.Millisecond), both(heard, reading(200*time.Millisecond)))}, "", ""},
		{"a new one that has spoken, then kept the server waiting 2 s", []*cappedConn{conn("stalled", http.StateNew, ago(3*time.Second), both(heard, reading(2*time.Second)))}, "stalled", ""},
		// A client that keeps the server's reads just short of a grace (a byte every 50 ms)
		// holds its place no longer than a legitimate handshake or request would take.
		{"a handshake trickled for 2 s, its read now blocked 10 ms", []*cappedConn{conn("trickle", http.StateNew, ago(2*time.Second), both(heard, reading(10*time.Millisecond)))}, "trickle", ""},
		{"a handshake of 500 ms that has spoken, its read now blocked 10 ms", []*cappedConn{conn("handshaking", http.StateNew, ago(500*time.Millisecond), both(heard, reading(10*time.Millisecond)))}, "", ""},
		{"headers trickled for 2 s, the read now blocked 10 ms", []*cappedConn{conn("trickle", http.StateActive, ago(2*time.Second), reading(10*time.Millisecond))}, "trickle", ""},
		{"a request of 500 ms arriving, the read now blocked 10 ms", []*cappedConn{conn("arriving", http.StateActive, ago(500*time.Millisecond), reading(10*time.Millisecond))}, "", ""},
		{"silent ones of the busiest host first", []*cappedConn{conn("lone", http.StateNew, ago(time.Second), otherHost), conn("flood1", http.StateNew, ago(150*time.Millisecond), nil), conn("flood2", http.StateNew, ago(200*time.Millisecond), nil)}, "flood2", ""},
		{"the longest idle last", []*cappedConn{conn("idle1", http.StateIdle, ago(2*time.Second), nil), conn("idle2", http.StateIdle, ago(time.Minute), nil), conn("judging", http.StateActive, ago(time.Second), judging)}, "idle2", ""},
		{"an idle one of 100 ms is about to be reused", []*cappedConn{conn("idle", http.StateIdle, ago(100*time.Millisecond), nil)}, "", ""},
		{"the idle one of the busiest host first", []*cappedConn{conn("api", http.StateIdle, ago(time.Minute), otherHost), conn("flood1", http.StateIdle, ago(2*time.Second), nil), conn("flood2", http.StateActive, ago(time.Second), judging)}, "flood1", ""},
		// The flake of CI run 46: a flood churning through every place, each body younger
		// than bodyGrace, closed the API server's connection in its TLS handshake.
		{"a flood's newcomer never takes the API server's handshake", []*cappedConn{conn("api", http.StateNew, ago(time.Millisecond), otherHost), conn("flood1", http.StateActive, ago(10*time.Millisecond), nil), conn("flood2", http.StateActive, ago(20*time.Millisecond), nil)}, "", "10.0.0.1"},
		{"a flood's newcomer takes its own silent one, not the API server's older one", []*cappedConn{conn("api", http.StateNew, ago(3*time.Second), otherHost), conn("flood1", http.StateNew, ago(3*time.Second), nil)}, "flood1", "10.0.0.1"},
		// Red team J: the API server's calls past the cap closed its own newest connections.
		{"a newcomer does not take its own address's handshake of 50 ms", []*cappedConn{conn("api1", http.StateNew, ago(50*time.Millisecond), nil), conn("api2", http.StateActive, ago(time.Second), judging)}, "", "10.0.0.1"},
		// CI run 73, loaded by two red teams: one of the API server's 460 calls failed on EOF.
		// Its own newcomer takes its own new connection only once it has kept the server
		// waiting a second: a client starved of CPU between its connect and its ClientHello, or
		// within its handshake, is not silent.
		{"a newcomer does not take its own address's new one waited on for 300 ms", []*cappedConn{conn("api1", http.StateNew, ago(300*time.Millisecond), nil)}, "", "10.0.0.1"},
		{"a newcomer does not take its own address's handshake of 2 s waited on for 300 ms", []*cappedConn{conn("api1", http.StateNew, ago(2*time.Second), both(heard, reading(300*time.Millisecond)))}, "", "10.0.0.1"},
		{"a newcomer takes its own address's connection silent for 3 s", []*cappedConn{conn("api1", http.StateNew, ago(3*time.Second), nil)}, "api1", "10.0.0.1"},
		{"a flood's newcomer never takes the API server's idle connection", []*cappedConn{conn("api", http.StateIdle, ago(time.Minute), otherHost), conn("flood1", http.StateActive, ago(10*time.Millisecond), nil), conn("flood2", http.StateActive, ago(time.Second), judging)}, "", "10.0.0.1"},
		{"a host holding more than the newcomer's gives up its stuck body", []*cappedConn{conn("api1", http.StateActive, ago(2*time.Second), both(otherHost, reading(2*time.Second))), conn("api2", http.StateActive, ago(time.Second), both(otherHost, reading(time.Second))), conn("flood1", http.StateActive, ago(time.Second), judging)}, "api1", "10.0.0.1"},
		// Red team M: from a fresh address each, every host held one place, as few as the API
		// server's newcomer, and gave up none, while the API server's calls waited past 5 s.
		// What provably waits on its client gives up its place to any newcomer.
		{"a stuck body of a host holding as many as the newcomer's", []*cappedConn{conn("sybil", http.StateActive, ago(time.Second), both(otherHost, reading(time.Second))), conn("api", http.StateActive, ago(time.Second), judging)}, "sybil", "10.0.0.1"},
		{"an idle one of a host holding as many as the newcomer's keeps its place", []*cappedConn{conn("sybil", http.StateIdle, ago(time.Minute), otherHost), conn("api", http.StateActive, ago(time.Second), judging)}, "", "10.0.0.1"},
		{"a review queued for a slot, before a silent and an idle one", []*cappedConn{conn("idle", http.StateIdle, ago(time.Minute), nil), conn("silent", http.StateNew, ago(time.Second), nil),
			conn("queued", http.StateActive, ago(time.Second), queued), conn("judging", http.StateActive, ago(2*time.Second), judging)}, "queued", ""},
		{"a queued review before a stuck body", []*cappedConn{conn("queued", http.StateActive, ago(time.Second), queued), conn("slow", http.StateActive, ago(time.Second), reading(time.Second))}, "queued", ""},
		{"the longest queued of the API server's own", []*cappedConn{conn("q1", http.StateActive, ago(time.Second), queued), conn("q2", http.StateActive, ago(2*time.Second), queued)}, "q2", "10.0.0.1"},
		{"a host holding as many as the newcomer's keeps its places", []*cappedConn{conn("other", http.StateIdle, ago(time.Minute), otherHost), conn("own", http.StateActive, ago(time.Second), judging)}, "", "10.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newCapListener(nil, len(tc.conns))
			for _, c := range tc.conns {
				c.l = l
				l.open[c] = struct{}{}
			}
			if tc.newHost == "" {
				tc.newHost = "10.0.0.9"
			}
			got := ""
			if v := l.evictable(now, tc.newHost); v != nil {
				got = v.Conn.(stubConn).name
			}
			if got != tc.want {
				t.Errorf("evicted %q, want %q", got, tc.want)
			}
		})
	}
}

// stubConn is a connection known by name only.
type stubConn struct{ name string }

func (stubConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (stubConn) Write([]byte) (int, error)        { return 0, net.ErrClosed }
func (stubConn) Close() error                     { return nil }
func (stubConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (stubConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (stubConn) SetDeadline(time.Time) error      { return nil }
func (stubConn) SetReadDeadline(time.Time) error  { return nil }
func (stubConn) SetWriteDeadline(time.Time) error { return nil }

// The kernel's word that a request has arrived outranks the server's reads: on a starved machine
// a kept-alive connection's next request sits received while its reader, woken, has not run, and
// closing the connection then resets the request under its client (the API server does not
// resend a POST). A real socket pair: the idle connection keeps its place while its client's bytes
// wait unread, and gives it up once they are read and it is idle again.
func TestAConnectionWhoseRequestHasArrivedIsNotIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, known := unread(server); !known {
		t.Skip("the kernel cannot be asked for a socket's unread bytes here")
	}

	now := time.Now()
	l := newCapListener(ln, 1)
	c := &cappedConn{Conn: server, l: l, opened: now.Add(-time.Hour), state: http.StateIdle, since: now.Add(-time.Minute), host: "127.0.0.1"}
	c.reading.Store(now.Add(-time.Minute).UnixNano()) // its reader has waited a minute, and has not run since
	l.open[c] = struct{}{}
	if _, err := client.Write([]byte("POST /validate HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		n, _ := unread(server)
		return n > 0, nil
	})
	if err != nil {
		t.Fatalf("the client's bytes never reached the server's socket: %v", err)
	}
	if v := l.evictable(now, "127.0.0.1"); v != nil {
		t.Fatal("an idle connection whose next request has arrived gave up its place: the request is reset under its client")
	}

	if _, err := io.ReadFull(server, make([]byte, len("POST /validate HTTP/1.1\r\n"))); err != nil {
		t.Fatal(err)
	}
	c.reading.Store(now.Add(-time.Minute).UnixNano())
	if v := l.evictable(now, "127.0.0.1"); v != c {
		t.Fatal("an idle connection with nothing from its client kept its place past idleGrace")
	}
}

// At the cap the next connection let in is the one of the address holding the fewest places, not
// the kernel's next: a flood that connects faster than its own places free (a connection that has
// spoken keeps its place for arrivalGrace) queued ahead of the API server's dial until its calls
// timed out. A full lobby hangs up on the flood's newest, never on the API server's connection.
func TestTheLobbyLetsInTheAddressHoldingFewestFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newCapListener(ln, 2)
	defer l.Close()
	flood := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func(d *net.Dialer) {
		t.Helper()
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	// inLobby waits until the lobby holds n connections from the flood and api from 127.0.0.1.
	inLobby := func(n, api int) {
		t.Helper()
		count := func() (flood, api int) {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, w := range l.lobby {
				if w.host == "127.0.0.1" {
					api++
				} else {
					flood++
				}
			}
			return flood, api
		}
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			f, a := count()
			return f == n && a == api, nil
		})
		if err != nil {
			f, a := count()
			t.Fatalf("the lobby holds %d of the flood's connections and %d of the API server's, want %d and %d", f, a, n, api)
		}
	}

	// The flood holds both places (new, not read from: not evictable), and fills the lobby.
	dial(flood)
	dial(flood)
	var placed []net.Conn
	for range 2 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		placed = append(placed, c)
	}
	for range lobbySize + 5 {
		dial(flood)
	}
	inLobby(lobbySize, 0)
	dial(&net.Dialer{}) // the API server's, from 127.0.0.1
	inLobby(lobbySize-1, 1)

	placed[0].Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := remoteHost(c); got != "127.0.0.1" {
		t.Fatalf("let in a connection from %s, ahead of the API server's", got)
	}
	placed[1].Close()
}

// What a connection waiting for its place, or holding one, may make the kernel keep, each way:
// it is charged to the webhook's memory cgroup once accepted. At the kernel's defaults 512
// clients that each sent a megabyte held 67 MB unread (130 KB each) of the webhook's 128 Mi, and
// red team L's refusals, unread, 50 KB each unsent. Each now holds at most what socketBuffer
// allows.
func TestAConnectionHoldsLittleOfTheKernelsMemory(t *testing.T) {
	ln, err := listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const clients = 8
	payload := make([]byte, 1<<20)
	// send writes payload to c for as long as the other side's window takes it.
	send := func(c net.Conn) {
		go func() {
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write(payload)
		}()
	}
	var servers []net.Conn
	for range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		send(c)
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		send(s)
		servers = append(servers, s)
	}
	if _, known := unread(servers[0]); !known {
		t.Skip("the kernel cannot be asked for a socket's queues here")
	}
	// Until what the kernel holds stops growing.
	most := func() (in, out int) {
		for _, c := range servers {
			i, _ := unread(c)
			o, _ := unsent(c)
			in, out = max(in, i), max(out, o)
		}
		return in, out
	}
	var lastIn, lastOut int
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		in, out := most()
		done := in > 0 && out > 0 && in == lastIn && out == lastOut
		lastIn, lastOut = in, out
		return done, nil
	})
	if err != nil {
		t.Fatalf("what each side sent never settled in the kernel: %v", err)
	}
	in, out := most()
	t.Logf("%d connections each way sending 1 MiB, unread: the kernel holds at most %d bytes unread and %d unsent for one", clients, in, out)
	// The kernel keeps twice socketBuffer each way, and lets a send queue take one segment past
	// its buffer.
	if in > 2*socketBuffer || out > 3*socketBuffer {
		t.Fatalf("the kernel holds %d bytes unread and %d unsent for one connection, over what socketBuffer (%d) allows", in, out, socketBuffer)
	}
}

// Which waiting connection a full lobby hangs up on, as a table over who waits (oldest first).
func TestTheFullLobbyTurnsAwayTheFloods(t *testing.T) {
	cases := []struct {
		name  string
		hosts []string // the lobby, oldest first: each a connection from that address
		want  int      // the index turned away
	}{
		// An HTTP/1.1 client with more calls than places: its oldest dial is the one no call
		// waits on any longer.
		{"one address: its oldest", []string{"api", "api", "api"}, 0},
		{"the oldest of the address with the most waiting", []string{"api", "flood", "flood", "flood"}, 1},
		// A flood from many addresses, one waiting each, still arriving: the API server's one
		// dial, the oldest, stays.
		{"addresses tied: the one that connected last", []string{"api", "f1", "f2", "f3"}, 3},
		{"tied at two: the oldest of the one that connected last", []string{"f1", "api", "f2", "f1", "api", "f2"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newCapListener(nil, 1)
			for i, h := range tc.hosts {
				l.lobby = append(l.lobby, waiting{conn: stubConn{strconv.Itoa(i)}, host: h})
			}
			got := l.turnAway().(stubConn).name
			if got != strconv.Itoa(tc.want) {
				t.Errorf("turned away %s (%s), want %d (%s)", got, tc.hosts[mustAtoi(t, got)], tc.want, tc.hosts[tc.want])
			}
			if len(l.lobby) != len(tc.hosts)-1 {
				t.Errorf("the lobby holds %d, want %d", len(l.lobby), len(tc.hosts)-1)
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
