package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// attacker is one hostile connection to the webhook: no credentials, a POST whose headers claim
// a body it sends at its own pace.
type attacker struct {
	conn net.Conn
	// closedEarly is set when the server hung up (or answered) before the claimed body was sent.
	closedEarly atomic.Bool
}

// slowPost opens a TLS connection, sends headers claiming claimed bytes, then prefix at once,
// then one byte per tick until stop is closed or the server hangs up.
func slowPost(t *testing.T, addr string, claimed int, prefix []byte, tick time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) *attacker {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // #nosec G402 -- the attacker checks nothing
	if err != nil {
		t.Fatalf("attacker dial: %v", err)
	}
	a := &attacker{conn: conn}
	fmt.Fprintf(conn, "POST %s?timeout=30s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", webhook.Path, claimed)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer conn.Close()
		hungUp := make(chan string, 1)
		go func() {
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil && line == "" {
				line = "EOF: " + err.Error()
			}
			hungUp <- line
		}()
		if len(prefix) > 0 {
			if _, err := conn.Write(prefix); err != nil {
				a.closedEarly.Store(true)
				return
			}
		}
		for sent := len(prefix); sent < claimed; sent++ {
			select {
			case <-stop:
				return
			case line := <-hungUp:
				_ = line
				a.closedEarly.Store(true)
				return
			case <-time.After(tick):
			}
			if _, err := conn.Write([]byte{' '}); err != nil {
				a.closedEarly.Store(true)
				return
			}
		}
	}()
	return a
}

// transportCase is a review the API server sends and the answer the promise requires.
type transportCase struct {
	name    string
	body    []byte
	allowed bool
}

func transportCases(t *testing.T) []transportCase {
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	depKind := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	unrelated := deployment(sts())
	unrelated.Name = "unrelated"
	return []transportCase{
		{"a correct armed StatefulSet", wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil), true},
		{"an unrelated Deployment", wt.Review(t, admissionv1.Create, depKind, unrelated, nil), true},
		// Pods fail open: an answer that is not a decision admits it.
		{"an armed Pod with the election off and the default ServiceAccount", wt.Review(t, admissionv1.Create, podKind, pod(sts(wt.Armed()), wt.WriterName+"-0"), nil), false},
	}
}

// TestTransportSurvivesHostileClients: connections without credentials that claim large bodies
// and trickle them, that send most of a large body and stall, or that hold many small requests
// open, hold neither the review slots nor the body budget: every review the API server sends
// meanwhile gets a decision (never a 429, which would admit a Pod), and every such connection is
// hung up on before it has sent what it claimed.
func TestTransportSurvivesHostileClients(t *testing.T) {
	attacks := []struct {
		name    string
		n       int
		claimed int
		prefix  int
	}{
		{"100 connections claiming 7 MiB, a byte a second", 100, 7 << 20, 0},
		{"100 connections claiming 2 KB, a byte a second", 100, 2000, 0},
		{"8 connections sending 6 MiB of 7 at once, then a byte a second", 8, 7 << 20, 6 << 20},
		// Red team M: the first 64 KiB of a body came from a reserve for 64 connections, of the
		// cap's 256; 160 addresses each sending 64 KiB of a claimed 7 MiB and then nothing held
		// it (waiting for the pool), and the API server's reviews waited behind them for a 429:
		// 36 of 288 armed Pods admitted, 280 of 288 with the cap full.
		{"100 connections sending 64 KiB of 7 MiB at once, then a byte a second", 100, 7 << 20, 64 << 10},
	}
	for _, at := range attacks {
		t.Run(at.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewUnstartedServer(webhook.NewHTTPHandler(h))
			var active sync.WaitGroup
			var mu sync.Mutex
			opened := 0
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					mu.Lock()
					opened++
					mu.Unlock()
				}
			}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			addr := strings.TrimPrefix(srv.URL, "https://")

			runtime.GC()
			base := wt.HeapObjects()
			stop := make(chan struct{})
			var attackers []*attacker
			for range at.n {
				attackers = append(attackers, slowPost(t, addr, at.claimed, bytes.Repeat([]byte{' '}, at.prefix), time.Second, stop, &active))
			}
			for deadline := time.Now().Add(20 * time.Second); ; {
				mu.Lock()
				o := opened
				mu.Unlock()
				if o >= at.n || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond) // let every attacker's headers (and prefix) arrive

			// What the attackers cost: bytes they sent, never bytes they claimed.
			extra := int64(wt.HeapObjects()) - int64(base)
			if limit := int64(at.n)*int64(at.prefix) + 32<<20; extra > limit {
				t.Errorf("with the attackers' headers in, the heap grew by %d MiB; they sent %d MiB in all", extra>>20, int64(at.n)*int64(at.prefix)>>20)
			}
			client := srv.Client()
			for round := range 3 {
				for _, c := range transportCases(t) {
					code, allowed, raw := wt.Decide(client, srv.URL, c.body)
					if code != http.StatusOK || allowed != c.allowed {
						t.Errorf("round %d, %s under attack: HTTP %d allowed=%v, want 200 allowed=%v: %.300s", round, c.name, code, allowed, c.allowed, raw)
					}
				}
				time.Sleep(time.Second)
			}
			// Give the server until the review deadline it was sent (30 s) to hang up on them.
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if countClosed(attackers) == len(attackers) {
					break
				}
			}
			closed := countClosed(attackers)
			close(stop)
			active.Wait()
			if closed != len(attackers) {
				t.Errorf("%d of %d hostile connections still open after 30 s, sending slower than any API server", len(attackers)-closed, len(attackers))
			}
		})
	}
}

func countClosed(as []*attacker) int {
	n := 0
	for _, a := range as {
		if a.closedEarly.Load() {
			n++
		}
	}
	return n
}

// The transport says where each request is, so the server's connection cap can tell a client
// that does not read its answers (the fourteenth red team pipelined reviews and read nothing,
// holding every place) from one at work: its body read, its answer being written, written. A
// malformed review's answer is marked as one too.
func TestTheTransportSaysWhereARequestIs(t *testing.T) {
	var mu sync.Mutex
	var phases []webhook.Phase
	h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}}
	srv := httptest.NewUnstartedServer(webhook.NewHTTPHandler(h))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return webhook.WithPhases(ctx, func(p webhook.Phase) { mu.Lock(); phases = append(phases, p); mu.Unlock() })
	}
	srv.Start()
	t.Cleanup(srv.Close)
	want := []webhook.Phase{webhook.PhaseBodyRead, webhook.PhaseAnswering, webhook.PhaseAnswered}
	for _, body := range [][]byte{wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil), []byte(`{}`)} {
		mu.Lock()
		phases = nil
		mu.Unlock()
		post(t, srv.URL, "application/json", body)
		mu.Lock()
		got := slices.Clone(phases)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Errorf("%.40s: phases %v, want %v", body, got, want)
		}
	}
}
