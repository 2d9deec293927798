package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

// cuttableProxy forwards loopback TCP to target until cut: then it drops every open connection
// and refuses new ones, as a network partition from the API server would.
type cuttableProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cuttableProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

func (p *cuttableProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestReadinessFollowsTheWatches: /readyz turns false when the webhook's watches break after the
// first sync (the API server unreachable), and true again once they recover. A replica whose
// Lease cache silently trails the cluster must not be sent reviews.
func TestReadinessFollowsTheWatches(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCuttableProxy(t, u.Host)

	// The admin kubeconfig, through the proxy (the API server's certificate is for 127.0.0.1).
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + proxy.ln.Addr().String()
	}
	dir := t.TempDir()
	proxied := filepath.Join(dir, "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, proxied); err != nil {
		t.Fatal(err)
	}
	servingCert(t, dir)
	probes, _ := startWebhook(t, []string{
		"--kubeconfig=" + proxied, "--cert-rotation=false", "--cert-dir=" + dir,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(freePort(t)), "--namespace=" + ns,
	}, func(o *options) { o.shutdownTimeout = 2 * time.Second })
	readyz := func() (int, string) { return get(probes + "/readyz?verbose") }
	eventually(t, 30*time.Second, "ready", func() error {
		if code, body := readyz(); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	proxy.setCut(true)
	eventually(t, 30*time.Second, "not ready once the watches break", func() error {
		code, body := readyz()
		if code == 200 {
			return fmt.Errorf("still ready: %s", body)
		}
		if !strings.Contains(body, "[-]watches") {
			return fmt.Errorf("not ready, but not for the watches: %s", body)
		}
		return nil
	})

	proxy.setCut(false)
	eventually(t, 60*time.Second, "ready again once the watches recover", func() error {
		if code, body := readyz(); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}
