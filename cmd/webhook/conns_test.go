package main

import (
	"net"
	"net/http"
	"testing"
	"time"
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
		return func(c *cappedConn) { c.bodyDone, c.answering = true, ago(d); c.writing.Store(ago(d).UnixNano()) }
	}
	both := func(fs ...func(*cappedConn)) func(*cappedConn) {
		return func(c *cappedConn) {
			for _, f := range fs {
				f(c)
			}
		}
	}
	otherHost := func(c *cappedConn) { c.host = "10.0.0.2" }
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
		{"an answer being written for 10 ms is at work", []*cappedConn{conn("writing", http.StateActive, ago(time.Second), unread(10*time.Millisecond))}, "", ""},
		{"the body waited on longest", []*cappedConn{conn("slow", http.StateActive, ago(2*time.Second), reading(2*time.Second)), conn("slower", http.StateActive, ago(3*time.Second), reading(3*time.Second)), conn("new", http.StateNew, ago(5*time.Second), nil)}, "slower", ""},
		{"a stuck body of the busiest host first", []*cappedConn{conn("api", http.StateActive, ago(time.Second), both(otherHost, reading(time.Second))), conn("flood1", http.StateActive, ago(200*time.Millisecond), reading(200*time.Millisecond)), conn("flood2", http.StateActive, ago(300*time.Millisecond), reading(300*time.Millisecond))}, "flood2", ""},
		{"a read blocked for 10 ms is a body arriving", []*cappedConn{conn("arriving", http.StateActive, ago(time.Second), reading(10*time.Millisecond))}, "", ""},
		// Red team J, and the bench's flood: on a webhook starved of CPU the API server's body
		// has arrived but is not read yet. Nothing waits on the client: it keeps its place.
		{"a body not read yet, for a second, is not waiting on its client", []*cappedConn{conn("unread-body", http.StateActive, ago(time.Second), nil)}, "", ""},
		{"a silent one of 200 ms before an idle one", []*cappedConn{conn("idle", http.StateIdle, ago(time.Minute), nil), conn("silent", http.StateNew, ago(200*time.Millisecond), nil)}, "silent", ""},
		{"a silent one of 10 ms is a handshake", []*cappedConn{conn("handshake", http.StateNew, ago(10*time.Millisecond), nil)}, "", ""},
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
		{"a newcomer takes its own address's connection silent for 3 s", []*cappedConn{conn("api1", http.StateNew, ago(3*time.Second), nil)}, "api1", "10.0.0.1"},
		{"a flood's newcomer never takes the API server's idle connection", []*cappedConn{conn("api", http.StateIdle, ago(time.Minute), otherHost), conn("flood1", http.StateActive, ago(10*time.Millisecond), nil), conn("flood2", http.StateActive, ago(time.Second), judging)}, "", "10.0.0.1"},
		{"a host holding more than the newcomer's gives up its stuck body", []*cappedConn{conn("api1", http.StateActive, ago(2*time.Second), both(otherHost, reading(2*time.Second))), conn("api2", http.StateActive, ago(time.Second), both(otherHost, reading(time.Second))), conn("flood1", http.StateActive, ago(time.Second), judging)}, "api1", "10.0.0.1"},
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
