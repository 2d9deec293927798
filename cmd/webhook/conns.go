package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// This file answers: which connections may stay open? At most max at once (each costs about
// 50 KiB whatever its client sends), and at the cap a new connection takes the place of one that
// is doing nothing: the longest idle one (a kept-alive connection between reviews), else the
// oldest one that has not sent a request within newGrace of opening. Only when every connection
// is busy with a request does a new one wait in the kernel's backlog.
//
// Without the eviction the cap was a door to hold shut: 700 unauthenticated clients that sent one
// request each and then idled on keep-alive (90 s) held all 256 slots, the API server could not
// reach the webhook, and armed Pods failed open (the second red team). The API server loses
// nothing by it: a kept-alive connection closed under it is redialled.

// newGrace is how long a new connection may take for its TLS handshake and first request before
// it may give up its place: the API server sends its request at once.
const newGrace = time.Second

// capListener is a net.Listener with the cap and eviction above. Its Server must have ConnState
// set to the listener's track method, so it knows which connections are idle.
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

// Accept waits for a place (making one when a connection is doing nothing), then accepts.
func (l *capListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	for len(l.open) >= l.max && !l.closed {
		if victim := l.evictable(time.Now()); victim != nil {
			l.mu.Unlock()
			victim.Close()
			l.mu.Lock()
			continue
		}
		// Every connection is at work: wait for one to close or to go idle, checking again
		// as a new one's grace runs out.
		timer := time.AfterFunc(newGrace/4, l.freed.Broadcast)
		l.freed.Wait()
		timer.Stop()
	}
	l.mu.Unlock()
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	c := &cappedConn{Conn: conn, l: l, opened: now, state: http.StateNew, since: now}
	l.mu.Lock()
	l.open[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// evictable is the connection that gives up its place, or nil. l.mu is held.
func (l *capListener) evictable(now time.Time) *cappedConn {
	var idle, fresh *cappedConn
	for c := range l.open {
		switch {
		case c.state == http.StateIdle && (idle == nil || c.since.Before(idle.since)):
			idle = c
		case c.state == http.StateNew && now.Sub(c.opened) >= newGrace && (fresh == nil || c.opened.Before(fresh.opened)):
			fresh = c
		}
	}
	if idle != nil {
		return idle
	}
	return fresh
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
