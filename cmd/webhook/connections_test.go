package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

// TestConnectionsOpenAtOnceAreCapped is the final red team's flood in small: clients that finish a
// TLS handshake and send nothing each held about 50 KiB, and 3,000 of them took the webhook past
// its memory limit. With --max-connections=8, twenty such clients get eight handshakes (the rest
// wait in the backlog), readiness stays up (its handshake does not queue behind them), and once
// they go a review is answered again.
func TestConnectionsOpenAtOnceAreCapped(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	dir := t.TempDir()
	ca := servingCert(t, dir)
	port := freePort(t)
	probes, _ := startWebhook(t, []string{
		"--kubeconfig=" + c.Kubeconfig, "--cert-rotation=false", "--cert-dir=" + dir,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--namespace=" + ns,
		"--max-connections=8",
	}, nil)
	eventually(t, 30*time.Second, "/readyz", func() error {
		if code, body := get(probes + "/readyz"); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	// Twenty clients at once, each allowed 2 s for its handshake: well inside the 5 s after which
	// the server hangs up on a client that sent no request, so no slot frees meanwhile.
	var (
		mu         sync.Mutex
		held       []net.Conn
		handshakes int
		wg         sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, h := range held {
			h.Close()
		}
	})
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return // the backlog is full: refused, which holds nothing either
			}
			_ = raw.SetDeadline(time.Now().Add(2 * time.Second))
			err = tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}).Handshake()
			mu.Lock()
			defer mu.Unlock()
			held = append(held, raw)
			if err == nil {
				handshakes++
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of 20 idle clients completed a handshake", handshakes)
	if handshakes > 8 {
		t.Fatalf("%d idle clients completed a TLS handshake; the cap is 8", handshakes)
	}
	if code, body := get(probes + "/readyz"); code != 200 {
		t.Fatalf("/readyz with the connections at their cap: %d %s", code, body)
	}

	for _, h := range held {
		h.Close()
	}
	held = nil
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	eventually(t, 20*time.Second, "a review once the clients went", func() error {
		resp, err := client.Post(fmt.Sprintf("https://%s/validate", addr), "application/json", strings.NewReader(`{}`))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}
