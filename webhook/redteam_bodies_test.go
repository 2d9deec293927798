package webhook_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// paddedPod is an armed bare Pod with its election off (refused whenever it is judged) and a
// variable of n copies of pad, as the API server sends it: encoding/json writes <, > and & as
// six bytes each, a control character too.
func paddedPod(t testing.TB, pad string, n int) []byte {
	t.Helper()
	p := barePod(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION", "false"))...), "noetl-cmdbus-writer-0")
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "PAD", Value: strings.Repeat(pad, n)})
	return wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, p, nil)
}

// Team G: a Pod whose review is larger than the guard reads only because the API server escapes
// its < six-fold was answered HTTP 413, and the Pods entry's Ignore admitted it armed; a review
// larger than the guard reads in any case is refused now, not left to the failure policy.
func TestReviewsLargeOnlyByTheirEscapesAreJudged(t *testing.T) {
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name  string
		body  []byte
		code  int32
		words []string
	}{
		{"1.3 MB of < in a variable (7.8 MB escaped; was HTTP 413, so admitted)", paddedPod(t, "<", 1_300_000), http.StatusForbidden, []string{"election is not enabled"}},
		{"the same in &", paddedPod(t, "&", 1_300_000), http.StatusForbidden, []string{"election is not enabled"}},
		{"1.3 MB of a control character (7.8 MB, which no unescaping shortens)", paddedPod(t, "\x01", 1_300_000), http.StatusRequestEntityTooLarge,
			[]string{"more than the 7 MiB the guard reads", "refusing Pod noetl/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) <= 7<<20 {
				t.Fatalf("the review is %d bytes, not over the 7 MiB it is to exceed", len(tc.body))
			}
			code, out, raw := post(t, srv.URL+"?timeout=10s", "application/json", tc.body)
			if code != http.StatusOK || out.Response == nil || out.Response.Allowed || out.Response.Result.Code != tc.code {
				t.Fatalf("HTTP %d %.300s; want an answer refusing it with code %d", code, raw, tc.code)
			}
			for _, w := range tc.words {
				if !strings.Contains(out.Response.Result.Message, w) {
					t.Errorf("the refusal does not say %q: %s", w, out.Response.Result.Message)
				}
			}
		})
	}
}

// Team G: six large reviews at once (6.9 MB each, escaped) each took part of the pool for large
// bodies, chunk by chunk, and waited for the rest until their deadline: all six got HTTP 429 and
// the API server admitted every Pod. A body now takes all it can need at once, in turn.
func TestLargeBodiesAtOnceAreEachJudged(t *testing.T) {
	if testing.Short() {
		t.Skip("with the full suite, not the race detector's short one: it times bodies arriving side by side")
	}
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, LookupTimeout: 10 * time.Second}))
	t.Cleanup(srv.Close)
	body := paddedPod(t, "x", 3<<19) // 1.5 MiB: six of them cost more than the pool holds
	var wg sync.WaitGroup
	codes := make([]string, 6)
	if 6*4*len(body) <= 28<<20 {
		t.Fatalf("six bodies of %d bytes fit the pool", len(body))
	}
	start := time.Now()
	for i := range codes {
		// Each sent as the API server's client would under load: in pieces, all six bodies
		// arriving side by side (fast enough never to be hung up on).
		pr, pw := io.Pipe()
		go func() {
			for off := 0; off < len(body); off += 256 << 10 {
				if _, err := pw.Write(body[off:min(off+256<<10, len(body))]); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			pw.Close()
		}()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"?timeout=10s", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		wg.Go(func() {
			defer pr.Close()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var out admissionv1.AdmissionReview
			_ = json.Unmarshal(raw, &out)
			switch {
			case resp.StatusCode != http.StatusOK:
				codes[i] = resp.Status + " " + string(raw)
			case out.Response == nil || out.Response.Allowed:
				codes[i] = "allowed"
			default:
				codes[i] = "refused"
			}
		})
	}
	wg.Wait()
	for _, c := range codes {
		if c != "refused" {
			t.Fatalf("six reviews of 1.5 MiB at once, answered in %s: %q; want each judged and refused", time.Since(start).Round(time.Millisecond), codes)
		}
	}
}

// Team H: 40 Pods of 1.45 MB of < at once. Each review is 8.7 MB on the wire, so each claimed the
// whole pool, they were read one at a time, and those still waiting at their deadline got HTTP
// 429: the Pods entry's Ignore admitted 38 of 40. A body still waiting for the pool shortly
// before its deadline is now read to its end and refused (code 429 in the answer).
func TestBodiesWaitingForThePoolAreRefusedInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("200 MB sent at once: with the full suite, not the race detector's short one")
	}
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}}))
	t.Cleanup(srv.Close)
	body := paddedPod(t, "<", 1_450_000)
	var wg sync.WaitGroup
	got := make([]string, 24)
	for i := range got {
		wg.Go(func() {
			code, out, raw := postNoFatal(srv.URL+"?timeout=2s", body)
			switch {
			case code != http.StatusOK || out.Response == nil:
				got[i] = fmt.Sprintf("HTTP %d %.120s", code, raw)
			case out.Response.Allowed:
				got[i] = "allowed"
			default:
				got[i] = fmt.Sprint(out.Response.Result.Code)
			}
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != "403" && g != "429" {
			t.Fatalf("24 reviews of 8.7 MB at once: %q; want each judged (403) or refused unjudged (429), none an HTTP error the Pods entry's Ignore admits", got)
		}
	}
}

// stalledBody is a request body that gives data and then waits for release, telling blocked
// when the handler asks for more.
type stalledBody struct {
	data    []byte
	blocked func()
	release <-chan struct{}
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	b.blocked()
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

// The bench's hostile connections (a POST claiming 7 MiB, a byte at a time, or 32 KiB every
// 450 ms) took the webhook to 67-71 MiB of RSS, over the 64 MiB goal: each request held a 32 KiB
// read-ahead buffer and a 32 KiB piece of body for the one byte it had sent, and one drained
// unjudged (too large, or no budget for it) kept 64 KiB of its prefix and a 32 KiB buffer. What
// a request holds grows with what its client has sent, and one being drained holds what its
// answer needs.
func TestAStalledBodyHoldsLittle(t *testing.T) {
	large := paddedPod(t, "a", 8<<20) // past the 7 MiB the guard judges
	for _, tc := range []struct {
		name string
		n    int
		data []byte
	}{
		{"one byte of a claimed 7 MiB", 200, []byte("{")},
		{"a review too large to judge, being drained", 8, large[:7<<20+64<<10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := webhook.NewHTTPHandler(&webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}})
			release := make(chan struct{})
			var blocked, done sync.WaitGroup
			blocked.Add(tc.n)
			// Twice: what a sync.Pool holds (encoding/json's buffers) goes only at the second.
			var before, after runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range tc.n {
				r := httptest.NewRequest(http.MethodPost, "/validate?timeout=30s", &stalledBody{data: tc.data, blocked: sync.OnceFunc(blocked.Done), release: release})
				r.Header.Set("Content-Type", "application/json")
				r.ContentLength = int64(len(large))
				done.Go(func() { h.ServeHTTP(httptest.NewRecorder(), r) })
			}
			blocked.Wait()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			close(release)
			done.Wait()
			per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(tc.n)
			t.Logf("a request that has sent %d bytes of %d holds %d bytes of heap", len(tc.data), len(large), per)
			if per > 16<<10 {
				t.Errorf("a request that has sent %d bytes of %d holds %d bytes of heap, want at most 16 KiB", len(tc.data), len(large), per)
			}
		})
	}
}
