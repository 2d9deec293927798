package e2e

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a loopback TCP proxy in front of the API server for ONE writer, so a test can
// partition that writer alone: pass traffic, delay it, or blackhole it (bytes read and dropped,
// connections left hanging, as a lost network path looks to a client).
type proxy struct {
	l       net.Listener
	target  string
	mode    atomic.Int32 // proxyPass, proxyBlackhole
	delayNS atomic.Int64
	mu      sync.Mutex
	conns   []net.Conn
}

const (
	proxyPass int32 = iota
	proxyBlackhole
)

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) blackhole()               { p.mode.Store(proxyBlackhole) }
func (p *proxy) heal()                    { p.mode.Store(proxyPass); p.delayNS.Store(0) }
func (p *proxy) setDelay(d time.Duration) { p.delayNS.Store(int64(d)) }
func (p *proxy) blackholed() bool         { return p.mode.Load() == proxyBlackhole }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.blackholed() {
			// A new connection during a partition: the SYN was "lost". Hold it open, send nothing.
			p.track(c)
			go func() { _, _ = io.Copy(io.Discard, c) }()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, up)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, cs...)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, consulting the mode for every chunk so that a partition
// also stalls connections that were open before it began.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delayNS.Load()); d > 0 {
				time.Sleep(d)
			}
			if !p.blackholed() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
