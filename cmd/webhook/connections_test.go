package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/testcluster"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestConnectionsOpenAtOnceAreCapped is the red teams' floods in small. Clients that finish a TLS
// handshake and send nothing each held about 50 KiB, and 3,000 of them took the webhook past its
// memory limit (the first); so connections are capped. Clients that send one request and then
// idle on keep-alive then held every place of the cap, and the API server could not reach the
// webhook (the second); so at the cap a new connection takes the place of an idle one. With
// --max-connections=8, twenty such clients leave at most eight connections open, a review from a
// new client is answered at once, and readiness stays up.
func TestConnectionsOpenAtOnceAreCapped(t *testing.T) {
	probes, addr, pool := cappedWebhook(t, 8)

	// Twenty clients at once, each sending one request and then idling on its connection.
	var (
		mu   sync.Mutex
		held []*tls.Conn
		wg   sync.WaitGroup
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
			raw, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return
			}
			_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
			conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
			if _, err := fmt.Fprintf(conn, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				resp.Body.Close()
			}
			_ = raw.SetDeadline(time.Time{})
		}()
	}
	wg.Wait()

	// A review from a new client takes an idle client's place at once.
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	began := time.Now()
	resp, err := client.Post(fmt.Sprintf("https://%s/validate", addr), "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("a review with twenty idle clients connected: %v after %s", err, time.Since(began).Round(time.Millisecond))
	}
	resp.Body.Close()
	t.Logf("a review with twenty idle clients connected: answered %d in %s", resp.StatusCode, time.Since(began).Round(time.Millisecond))
	if code, body := get(probes + "/readyz"); code != 200 {
		t.Fatalf("/readyz with the connections at their cap: %d %s", code, body)
	}

	// How many of the idle clients still hold a connection: a read that times out is an open
	// one, an EOF or reset one the server closed.
	alive := 0
	for _, h := range held {
		_ = h.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var b [1]byte
		if _, err := h.Read(b[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				alive++
			}
		}
	}
	t.Logf("%d of %d idle clients still connected", alive, len(held))
	if alive > 8 {
		t.Fatalf("%d idle clients hold a connection; the cap is 8", alive)
	}
}

// TestSlowBodiesCannotHoldTheGuard is the twelfth red team's hold: clients with no credentials,
// each a POST claiming a 7 MB body and sending 32 KiB of it every 450 ms (faster than the 32 KiB/s
// a body must keep up), reconnecting whenever they are hung up on. 700 of them made the API
// server's calls time out, and the entries that fail open then admitted a ClusterRoleBinding
// delete that disarmed the writers, and an armed bare Pod. A connection whose body is still
// arriving is not the API server's (it sends a review in one write), so at the cap a new
// connection takes its place, and every connection may read the first part of its body from a
// reserve sized for the cap, so a review of ordinary size never waits for budget. With
// --max-connections=32 and 150 such clients, a review from a new client is answered well within
// the hold.
func TestSlowBodiesCannotHoldTheGuard(t *testing.T) {
	_, addr, pool := cappedWebhook(t, 32)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	chunk := []byte(strings.Repeat(" ", 32<<10))
	attacker := attackerDialer()
	slow := func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			raw, err := attacker.Dial("tcp", addr)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
			_, err = fmt.Fprintf(conn, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7000000\r\n\r\n")
			for err == nil {
				select {
				case <-stop:
					conn.Close()
					return
				case <-time.After(450 * time.Millisecond):
				}
				_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
				_, err = conn.Write(chunk)
			}
			conn.Close()
		}
	}
	for range 150 {
		wg.Add(1)
		go slow()
	}
	time.Sleep(3 * time.Second) // every slow client is in its body

	// An ordinary review's size (a Pod's, with its old object: tens of KiB).
	answeredFromNewClients(t, addr, pool, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"`+strings.Repeat("x", 40<<10)+`"}`, "150 slow bodies arriving")
}

// TestSilentConnectsCannotHoldTheGuard is the thirteenth red team's flood: plain TCP connects, no
// TLS, nothing sent, 200 a second. A silent new connection could give up its place only after 1 s,
// so the server took in at most the cap a second; the rest queued in the kernel ahead of the API
// server's dial until its calls timed out, and the fail-open entries admitted an armed bare Pod
// and a disarming ClusterRoleBinding delete. Now a silent connection gives up its place to any
// newer one (those of the source with the most of them first), so the accept queue never stalls.
// With --max-connections=32 and 300 connects a second, a review from a new client is answered.
func TestSilentConnectsCannotHoldTheGuard(t *testing.T) {
	_, addr, pool := cappedWebhook(t, 32)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	attacker := attackerDialer()
	atRate(&wg, stop, 300, 1500, func() {
		conn, err := attacker.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer conn.Close()
		go func() { <-stop; conn.Close() }()
		var b [1]byte
		_, _ = conn.Read(b[:]) // until the server closes it
	})
	time.Sleep(3 * time.Second)

	answeredFromNewClients(t, addr, pool, `{}`, "300 silent connects a second")
}

// atRate runs client rate times a second, each in a goroutine of wg, at most most at once, until
// stop is closed: a flood of connects.
func atRate(wg *sync.WaitGroup, stop <-chan struct{}, rate, most int, client func()) {
	open := make(chan struct{}, most)
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			select {
			case open <- struct{}{}:
			default:
				continue
			}
			wg.Go(func() { defer func() { <-open }(); client() })
		}
	})
}

// cappedWebhook starts the webhook on 127.0.0.1 with --max-connections=max and returns its probe
// address, its admission address and the pool that verifies its certificate.
func cappedWebhook(t *testing.T, max int) (probes, addr string, pool *x509.CertPool) {
	t.Helper()
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	dir := t.TempDir()
	ca := servingCert(t, dir)
	port := freePort(t)
	probes, _ = startWebhook(t, []string{
		"--kubeconfig=" + c.Kubeconfig, "--cert-rotation=false", "--cert-dir=" + dir,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--namespace=" + ns,
		"--max-connections=" + strconv.Itoa(max),
	}, nil)
	waitReady(t, 30*time.Second, probes)
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return probes, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), pool
}

// attackerDialer dials from an address of its own, as a client in the cluster does: the API
// server's is never an attacker's.
func attackerDialer() *net.Dialer {
	return &net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
}

// answeredFromNewClients posts body three times, each from a new connection as a redialled API
// server's, and fails unless each is answered within 3 s while under (the attack) goes on.
func answeredFromNewClients(t *testing.T, addr string, pool *x509.CertPool, body, under string) {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for i := range 3 {
		began := time.Now()
		resp, err := client.Post(fmt.Sprintf("https://%s/validate", addr), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("review %d with %s: %v after %s", i, under, err, time.Since(began).Round(time.Millisecond))
		}
		resp.Body.Close()
		t.Logf("review %d with %s: answered %d in %s", i, under, resp.StatusCode, time.Since(began).Round(time.Millisecond))
		client.CloseIdleConnections()
	}
}

// TestTheAPIServersCallsPastTheCapAreAnswered is red team J's flood in small: one client address,
// as the API server is, with more calls in flight than the webhook keeps connections (40 at a cap
// of 8), each on a connection of its own as HTTP/1.1 has it and kept alive between calls. The
// API server's newest connections closed each other as silent, and its idle ones were closed as
// it reused them: each such call failed (EOF, "server closed idle connection"), and the API server
// admitted the armed Pods whose reviews they carried. Now every call is answered: past the cap,
// a new connection waits while the next call takes a connection that a finished one frees.
func TestTheAPIServersCallsPastTheCapAreAnswered(t *testing.T) {
	_, addr, pool := cappedWebhook(t, 8)
	body := string(wt.Review(t, "CREATE", metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "noetl"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "x", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}}}}}, nil))
	// As the API server's webhook client: keep-alive, idle connections kept for reuse.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 25}}
	var (
		mu       sync.Mutex
		answered int
		failed   []string
		wg       sync.WaitGroup
	)
	end := time.Now().Add(3 * time.Second)
	for range 40 {
		wg.Go(func() {
			for time.Now().Before(end) {
				resp, err := client.Post(fmt.Sprintf("https://%s/validate?timeout=10s", addr), "application/json", strings.NewReader(body))
				mu.Lock()
				if err != nil {
					failed = append(failed, err.Error())
				} else {
					answered++
				}
				mu.Unlock()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls answered, %d failed", answered, len(failed))
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls failed (each an armed Pod the API server would admit), the first: %s", len(failed), answered+len(failed), failed[0])
	}
}

// TestSlowClientsCannotHoldTheGuard is the connection cap against clients that are never quite
// silent: each keeps the server's read of it just short of a grace, or connects faster than a
// grace frees places. From the attacker's own address, at a cap of 16 (the tricklers hold every
// place, as many as there are), while each flood goes on a review from a new client (as a
// redialled API server's) is answered.
//   - A handshake trickled a byte every 50 ms: its server never waits 100 ms on it, and it held
//     its place until the handshake's deadline (5 s, the API server's timeout).
//   - Headers trickled a byte every 40 ms, after a handshake: the same, its reads short of
//     bodyGrace.
//   - A TLS record header and then nothing, 300 connects a second: a connection that has spoken
//     keeps its place a second, so places free at the cap a second, and the rest queued in the
//     kernel ahead of the API server's dial.
func TestSlowClientsCannotHoldTheGuard(t *testing.T) {
	_, addr, pool := cappedWebhook(t, 16)
	// A TLS handshake record header announcing 16 KiB that never all arrive.
	recordHeader := []byte{0x16, 0x03, 0x01, 0x40, 0x00}
	trickle := func(conn net.Conn, every time.Duration, stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write([]byte{'a'}); err != nil {
				return
			}
		}
	}
	cases := []struct {
		name        string
		concurrency int
		rate        int // connects a second; 0: each of concurrency reconnects when hung up on
		client      func(conn net.Conn, stop <-chan struct{})
	}{
		{"a handshake trickled a byte every 50 ms", 16, 0, func(conn net.Conn, stop <-chan struct{}) {
			if _, err := conn.Write(recordHeader); err == nil {
				trickle(conn, 50*time.Millisecond, stop)
			}
		}},
		{"headers trickled a byte every 40 ms", 16, 0, func(conn net.Conn, stop <-chan struct{}) {
			tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
			_ = tc.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := fmt.Fprintf(tc, "POST /validate HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
				return
			}
			_ = tc.SetDeadline(time.Time{})
			trickle(tc, 40*time.Millisecond, stop)
		}},
		{"a record header and then nothing, 300 connects a second", 1500, 300, func(conn net.Conn, stop <-chan struct{}) {
			if _, err := conn.Write(recordHeader); err != nil {
				return
			}
			go func() { <-stop; conn.Close() }()
			var b [1]byte
			_, _ = conn.Read(b[:]) // until the server closes it
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			defer func() { close(stop); wg.Wait() }()
			attacker := attackerDialer()
			one := func() bool {
				conn, err := attacker.Dial("tcp", addr)
				if err != nil {
					return false
				}
				defer conn.Close()
				tc.client(conn, stop)
				return true
			}
			if tc.rate == 0 {
				for range tc.concurrency {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							if !one() {
								time.Sleep(50 * time.Millisecond)
							}
						}
					})
				}
			} else {
				atRate(&wg, stop, tc.rate, tc.concurrency, func() { one() })
			}
			// Every place is the flood's. A trickler's hold is cut short by its handshake's
			// deadline (5 s): the reviews begin well before it.
			settle := 3 * time.Second
			if tc.rate == 0 {
				settle = 1500 * time.Millisecond
			}
			time.Sleep(settle)
			answeredFromNewClients(t, addr, pool, `{}`, tc.name)
		})
	}
}
