package status

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Liveness is judged on the API server's clock, not the viewer's: the writers' renewTimes come
// from their own clocks, which the election keeps close to the cluster's, while the laptop running
// this view may be minutes off. The only clock reading the Kubernetes API hands out is the Date
// header of every answer (whole seconds, RFC 7231), so the view estimates how far the local clock
// is from it and shifts its own readings by that much.

// EstimateSkew estimates how far the local clock is ahead of the server's (local − server; negative
// when behind) from one answer: the local clock read just before the request was sent (sent) and
// just after the answer's headers arrived (received), and the answer's Date header (date).
//
// The server stamped the header at an instant of [date, date+1s) on its clock, and that instant was
// within [sent, received] on ours, so the skew lies in (sent − date − 1s, received − date]. When 0
// lies in that interval the local clock is consistent with the server's as far as the header can
// tell, and is used as is (it keeps its sub-second precision); otherwise the skew is the interval's
// midpoint, off by at most half its width (½ s plus half the round trip).
func EstimateSkew(sent, received, date time.Time) time.Duration {
	lo := sent.Sub(date) - time.Second
	hi := received.Sub(date)
	if lo < 0 && 0 <= hi {
		return 0
	}
	return lo + (hi-lo)/2
}

// ServerClock is the local clock corrected by the skew seen in the API server's answers. Its zero
// observations leave it the local clock. It is safe for concurrent use: answers of a watch and of
// the lists before it may arrive on several goroutines.
type ServerClock struct {
	Local clock.PassiveClock

	mu       sync.Mutex
	skew     time.Duration
	observed bool
}

// Now is the API server's current time as best known: the local clock minus the latest skew.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Local.Now().Add(-c.skew)
}

// Skew is the latest estimate of local − server, and whether any answer carried a Date header.
func (c *ServerClock) Skew() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skew, c.observed
}

// observe records one answer's Date header, ignoring answers without a parseable one.
func (c *ServerClock) observe(sent, received time.Time, header string) {
	if header == "" {
		return
	}
	date, err := http.ParseTime(header)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew, c.observed = EstimateSkew(sent, received, date), true
}

// WrapTransport is a rest.Config transport wrapper that feeds every answer's Date header to the
// clock. Only API server answers may pass through it: a pod-proxy answer carries the pod's Date.
func (c *ServerClock) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return dateRecorder{next: rt, clock: c}
}

type dateRecorder struct {
	next  http.RoundTripper
	clock *ServerClock
}

// WrappedRoundTripper lets client-go reach the transport beneath: when a --request-timeout expires,
// net/http cancels through the chain's CancelRequest, and client-go's wrappers pass that down to
// whatever can cancel; a wrapper that hides what it wraps gets "Warning: unable to cancel request"
// logged instead (k8s.io/client-go/transport tryCancelRequest).
func (d dateRecorder) WrappedRoundTripper() http.RoundTripper { return d.next }

func (d dateRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := d.clock.Local.Now()
	resp, err := d.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	d.clock.observe(sent, d.clock.Local.Now(), resp.Header.Get("Date"))
	return resp, nil
}
