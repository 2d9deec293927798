package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// maxReviewBytes is controller-runtime's limit: two objects of at most 3 MiB and the rest.
const maxReviewBytes = 7 << 20

// maxBodyBytesInFlight bounds the request bodies one process holds at once (each counted at its
// Content-Length, or at maxReviewBytes when it does not say): reviews are a few KiB, so this
// only ever queues the rare object near the API server's size limit, and a flood of large bodies
// cannot take the process past its memory limit.
const maxBodyBytesInFlight = 3 * maxReviewBytes

// NewHTTPHandler serves h at an admission path. It checks the envelope before controller-runtime
// decodes it, because that decoder answers any apiVersion and kind (it would answer
// "admission.k8s.io/v9" or a Pod as if they were reviews): anything that is not a POSTed
// admission.k8s.io/v1 AdmissionReview with a request gets HTTP 400 (405, 413) and a plain-text
// reason. A proper review whose object is missing or undecodable gets a denial with code 400.
//
// At most h.MaxInFlight reviews are worked on at once, body included: a review that finds no
// slot before its deadline (the API server's ?timeout=, at most h.LookupTimeout) gets HTTP 429,
// which the API server handles by the entry's failure policy. The same deadline bounds the
// review's lookups.
func NewHTTPHandler(h *Handler) http.Handler {
	wh := NewWebhook(h)
	limit := h.MaxInFlight
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	slots := make(chan struct{}, limit)
	bodies := semaphore.NewWeighted(maxBodyBytesInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxReviewBytes {
			http.Error(w, fmt.Sprintf("request larger than %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		ctx, cancel := requestDeadline(r, h.LookupTimeout)
		defer cancel()
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-ctx.Done():
			http.Error(w, fmt.Sprintf("the guard is working on %d reviews already; try again", limit), http.StatusTooManyRequests)
			return
		}
		weight := r.ContentLength
		if weight < 0 {
			weight = maxReviewBytes
		}
		if err := bodies.Acquire(ctx, weight); err != nil {
			http.Error(w, "the guard holds as many large reviews as it may; try again", http.StatusTooManyRequests)
			return
		}
		defer bodies.Release(weight)
		r = r.WithContext(ctx)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			http.Error(w, fmt.Sprintf("Content-Type %q, want application/json", r.Header.Get("Content-Type")), http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) > maxReviewBytes {
			http.Error(w, fmt.Sprintf("request larger than %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if err := checkEnvelope(body); err != nil {
			http.Error(w, "malformed AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Type", "application/json")
		wh.ServeHTTP(w, r)
	})
}

// requestDeadline is the context of one review: it ends at 90% of the timeout the API server
// put in the URL (?timeout=5s), leaving time to answer, and never later than max (0: 4 s).
func requestDeadline(r *http.Request, max time.Duration) (context.Context, context.CancelFunc) {
	if max <= 0 {
		max = 4 * time.Second
	}
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d*9/10 < max {
		max = d * 9 / 10
	}
	return context.WithTimeout(r.Context(), max)
}

// checkEnvelope requires an admission.k8s.io/v1 AdmissionReview with a request.
func checkEnvelope(body []byte) error {
	var env struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Request    json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if env.APIVersion != "admission.k8s.io/v1" || env.Kind != "AdmissionReview" {
		return fmt.Errorf("got apiVersion %q kind %q, want admission.k8s.io/v1 AdmissionReview", env.APIVersion, env.Kind)
	}
	if len(env.Request) == 0 || string(env.Request) == "null" {
		return fmt.Errorf("no request")
	}
	if env.Request[0] != '{' {
		return fmt.Errorf("request is not an object")
	}
	return nil
}
