package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"time"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// maxReviewBytes is controller-runtime's limit: two objects of at most 3 MiB and the rest.
const maxReviewBytes = 7 << 20

// A body must keep arriving: every bodyChunk of it (or its rest) within bodyChunkTimeout of the
// one before, at least 32 KiB/s. The API server sends a review in one write; a client slower than
// this is hung up on (HTTP 408) instead of holding a connection and the bytes it has sent.
const (
	bodyChunk        = 32 << 10
	bodyChunkTimeout = time.Second
)

// The body budget counts bytes actually read, never a claimed Content-Length, at decodeFactor
// times their size: what one body byte costs until its review is answered (the body, the
// objects' raw copies, the decoded objects). The first smallBody bytes of every body are charged
// to a reserve of their own, sized for every connection of Handler.MaxConnections, so a review of
// ordinary size (tens of KiB) never waits for budget, however many bodies are arriving or
// stalled (the twelfth red team's slow bodies queued ahead of the API server's; red team M's
// held a reserve for a quarter of the cap); the rest to a pool sized for one review of the
// largest size, which large bodies share first come, first served.
const (
	decodeFactor = 4
	smallBody    = 64 << 10
	largePool    = decodeFactor * maxReviewBytes // 28 MiB: one review of 7 MiB, or several smaller
)

// DefaultMaxConnections is the connections one process keeps open at once by default: about the
// API server's calls in flight to it on a default API server (a namespace admin's share of API
// Priority and Fairness, workload-low, is about 245 of its 600 seats), since with HTTP/1.1 each
// call has a connection; a call past the cap waits in cmd/webhook's lobby for one (red team J:
// 66 concurrent dry-run Pod creates of one namespace admin were past the 64 of the time, when
// such calls closed each other). Each costs about 90 KB of the process's memory and up to 80 KiB
// of the kernel's, charged to the same container limit: 512 of them measured 88 MiB of RSS
// (red team L: at 0.4-0.7 MB each when they echoed headers, the webhook reached 668 MiB).
const DefaultMaxConnections = 256

// Phase is where a request is in its connection's handling, as the handler reports it
// (WithPhases).
type Phase int

const (
	// PhaseBodyRead: the request's whole body has arrived.
	PhaseBodyRead Phase = iota
	// PhaseAnswering: the answer is being written.
	PhaseAnswering
	// PhaseAnswered: the answer has been written and flushed.
	PhaseAnswered
	// PhaseQueued: the review fails closed when unanswered (failsOpen) and waits for a slot
	// while its requester holds one already (slots.go). Its connection may give up its place to a
	// new one: closed, it costs the review what its deadline would (a refusal), its requester is
	// being served, and the newcomer may carry another's Pod review, which fails open.
	PhaseQueued
	// PhaseJudging: the review has its slot.
	PhaseJudging
)

type phasesKey struct{}

// WithPhases returns ctx carrying f, which the handler calls as a request on the connection
// reaches each Phase. A server that caps its connections can so tell one whose body is still
// arriving, or whose answer its client does not read — never the API server's, which sends a
// review in one write and reads its answer at once — from one at work.
func WithPhases(ctx context.Context, f func(Phase)) context.Context {
	return context.WithValue(ctx, phasesKey{}, f)
}

func reached(ctx context.Context, p Phase) {
	if f, ok := ctx.Value(phasesKey{}).(func(Phase)); ok {
		f(p)
	}
}

// answerTimeout is how long after a review's deadline its answer may take to be written. A
// client that does not read its answers (the fourteenth red team pipelined reviews and read
// nothing) holds its connection until then, not for the server's 35 s write timeout.
const answerTimeout = time.Second

// NewHTTPHandler serves h at an admission path. It reads the body before anything else, counting
// what arrives against the body budget, and hangs up on a client that sends slower than 32 KiB/s;
// only a complete body takes one of the h.MaxInFlight slots that bound the reviews judged at once.
// So a client, authenticated or not, holds only what it has sent, and only while it keeps
// sending. A review that finds no budget or slot before its deadline (the API server's
// ?timeout=, at most h.LookupTimeout) gets HTTP 429, which the API server handles by the entry's
// failure policy; the same deadline bounds the review's lookups.
//
// It checks the envelope itself, because controller-runtime's decoder answers any apiVersion and
// kind (it would answer "admission.k8s.io/v9" or a Pod as if they were reviews): anything that is
// not a POSTed admission.k8s.io/v1 AdmissionReview with a request gets HTTP 400 (405, 408, 413)
// and a plain-text reason. A proper review whose object is missing or undecodable gets a denial
// with code 400.
func NewHTTPHandler(h *Handler) http.Handler {
	limit := h.MaxInFlight
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	conns := h.MaxConnections
	if conns <= 0 {
		conns = DefaultMaxConnections
	}
	// The reserve holds the first smallBody bytes of every connection's body at once, so no body
	// of ordinary size waits for another's: sized for 64 of the cap's connections, it was held by
	// 160 addresses each sending 64 KiB of a claimed 7 MiB and then nothing (waiting for the
	// pool), and the API server's reviews waited behind them until a 429 admitted its Pods (red
	// team M). What it holds costs memory only as the bytes arrive (at most 16 MiB of body at the
	// default cap), and decoding them happens in a review slot.
	return &transport{h: h, slots: newSlots(limit), budget: newBodyBudget(int64(conns)*decodeFactor*smallBody, largePool)}
}

type transport struct {
	h      *Handler
	slots  *slots
	budget *bodyBudget
}

func (t *transport) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Until the body is read, every answer also ends the connection: net/http would otherwise
	// read what is left of a small body, at whatever pace the client sends it, to reuse the
	// connection.
	// A refusal is short and must be read at once: a client that reads none of it is hung up on
	// at answerTimeout, not at the server's write timeout.
	refuse := func(msg string, code int) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerTimeout))
		w.Header().Set("Connection", "close")
		http.Error(w, bounded(msg), code)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse("admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		refuse(fmt.Sprintf("Content-Type %.64q, want application/json", r.Header.Get("Content-Type")), http.StatusBadRequest)
		return
	}
	if r.ContentLength > maxWireBytes {
		refuse(fmt.Sprintf("request larger than %d bytes", maxWireBytes), http.StatusRequestEntityTooLarge)
		return
	}
	ctx, cancel := requestDeadline(r, t.h.LookupTimeout)
	defer cancel()

	most := int64(maxReviewBytes + 1)
	if r.ContentLength >= 0 {
		most = min(most, r.ContentLength)
	}
	charge := t.budget.charge(most)
	defer charge.release()
	body, status, err := readBody(ctx, w, r, charge)
	// A body that was read to its end but will not be judged is answered from its prefix.
	var req Request
	var resp Response
	switch {
	case errors.Is(err, errReviewTooLarge), errors.Is(err, errBodiesBusy):
		var ok bool
		if req, ok = reviewPrefix(body); !ok {
			refuse(err.Error(), status)
			return
		}
		resp = t.h.unjudgedBody(ctx, req, err)
	case err != nil:
		refuse(err.Error(), status)
		return
	}
	reached(r.Context(), PhaseBodyRead)
	rc := http.NewResponseController(w)
	if d, ok := ctx.Deadline(); ok {
		_ = rc.SetWriteDeadline(d.Add(answerTimeout))
	}
	// answer writes what write writes and flushes it, the connection marked as answering.
	answer := func(write func() error) error {
		reached(r.Context(), PhaseAnswering)
		defer reached(r.Context(), PhaseAnswered)
		if err := write(); err != nil {
			return err
		}
		return rc.Flush()
	}
	plain := func(msg string, code int) {
		_ = answer(func() error { http.Error(w, bounded(msg), code); return nil })
	}

	if resp.Result == nil { // not answered yet: decoded, given a slot, judged
		if req, err = decodeReview(body); err != nil {
			plain("malformed AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		who := requesterOf(req.UserInfo)
		queued := false
		release, ok, busy := t.slots.acquire(ctx, who, failsOpen(req), func() { queued = true; reached(ctx, PhaseQueued) })
		switch {
		case !ok && busy:
			resp = t.h.unjudged(ctx, req, http.StatusTooManyRequests, "its requester's reviews hold their share",
				fmt.Sprintf("not judged in time: %s has %d reviews or more being judged already; try again", who, t.slots.share))
		case !ok:
			plain(fmt.Sprintf("the guard is working on %d reviews already; try again", t.slots.limit), http.StatusTooManyRequests)
			return
		default:
			if queued {
				reached(ctx, PhaseJudging)
			}
			resp = t.h.Handle(ctx, req)
			// Judged: the slot and the body's budget are free before the answer is written, so
			// a client that does not read it holds neither.
			release()
		}
	}
	uid := req.UID
	charge.release()
	resp.UID = uid
	boundAnswer(&resp.AdmissionResponse)
	w.Header().Set("Content-Type", "application/json")
	out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: &resp.AdmissionResponse}
	if err := answer(func() error { return json.NewEncoder(w).Encode(out) }); err != nil {
		t.h.logger(ctx).Info("could not write the answer", "error", err.Error(), "uid", uid)
	}
}

// readBody reads the whole body through htmlUnescaper, charging every chunk to the budget before
// reading it and requiring each within bodyChunkTimeout (where the connection supports read
// deadlines). The status goes with the error: 408 too slow, 413 too large, 429 no budget before
// the deadline. A body over maxReviewBytes once unescaped, or still waiting for budget shortly
// before its deadline, is read to its end (drainRest: up to maxWireBytes, kept no further than
// what an answer needs of its first reviewPrefixBytes, returned with errReviewTooLarge or
// errBodiesBusy), so that it can be answered.
func readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, charge *bodyCharge) ([]byte, int, error) {
	rc := http.NewResponseController(w)
	deadlines := rc.SetReadDeadline(time.Time{}) == nil
	defer func() {
		if deadlines {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}()
	// keepUp gives the next chunk bodyChunkTimeout, and never past the review's deadline, or, for
	// the rest of a body that will not be judged, half of answerTimeout past it: the answer must
	// still be written before the API server gives up.
	keepUp := func(past time.Duration) {
		if deadlines {
			dl := time.Now().Add(bodyChunkTimeout)
			if d, ok := ctx.Deadline(); ok && d.Add(past).Before(dl) {
				dl = d.Add(past)
			}
			_ = rc.SetReadDeadline(dl)
		}
	}
	src := newHTMLUnescaper(r.Body)
	// A body waits for budget until shortly before its deadline, so that one still waiting can be
	// read to its end and refused in time (drainRest), never answered 429: team H's 40 Pods of
	// 1.45 MB of <, each claiming the whole pool, queued past their deadline, got 429, and the
	// Pods entry's Ignore admitted 38 of them.
	waitCtx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, d.Add(-min(time.Second, time.Until(d)/4)))
		defer cancel()
	}
	// Held as it arrives: a Content-Length is a claim, never an allocation.
	var body bodyBuffer
	for {
		// A chunk is charged no further than the body can reach (its Content-Length): a charge for
		// bytes that cannot come, made while waiting only for the body's end, would queue behind
		// bodies waiting for the whole pool.
		n := min(bodyChunk, maxReviewBytes+1-body.len())
		charged := max(0, min(n, int(charge.most)-body.len()))
		if err := charge.acquire(waitCtx, charged); err != nil {
			if body.len() == 0 {
				return nil, http.StatusTooManyRequests, errors.New("the guard holds as many request bodies as it may; try again")
			}
			return drainRest(r.Body, keepUp, answerPrefix(body.prefix(reviewPrefixBytes)), int64(body.len()), errBodiesBusy)
		}
		keepUp(0)
		got, err := body.readFrom(src, n)
		if got > charged { // more than the Content-Length said: net/http never lets it through
			return nil, http.StatusBadRequest, errors.New("the body is longer than its Content-Length")
		}
		charge.refund(charged - got)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, http.StatusRequestTimeout, fmt.Errorf("the body arrives slower than %d KiB/s (%d bytes in)", bodyChunk>>10, body.len())
		case body.len() > maxReviewBytes:
			return drainRest(r.Body, keepUp, answerPrefix(body.prefix(reviewPrefixBytes)), int64(body.len()), errReviewTooLarge)
		case errors.Is(err, io.EOF):
			charge.done()
			return body.bytes(), 0, nil
		case err != nil:
			return nil, http.StatusBadRequest, fmt.Errorf("reading the request: %w", err)
		}
	}
}

// readChunk fills p from r, or reads until r's first error, which it returns as it is (io.EOF:
// the body ended).
func readChunk(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// errReviewTooLarge: the review is larger than the guard judges (once unescaped). errBodiesBusy:
// the body budget had no room for the rest of it before its deadline.
var (
	errReviewTooLarge = errors.New("too large")
	errBodiesBusy     = errors.New("no budget for its body")
)

// reviewPrefixBytes is how much of a review that is not judged is kept to answer it: the API
// server writes the request's uid, kind, name, namespace and operation before its objects.
const reviewPrefixBytes = 64 << 10

// maxWireBytes bounds what is read of a review that is not judged: more than the API server
// sends (a 3 MiB request body as the object, escaped six-fold, and an old object of 1.5 MiB,
// etcd's limit, so).
const maxWireBytes = 64 << 20

// drainRest reads what is left of a body that will not be judged from the wire (not unescaped:
// nothing of it is kept) and discards it, so that it can be answered, and returns its prefix
// with cause (errReviewTooLarge or errBodiesBusy), or 413 when even the wire's bound is passed.
// total is what was read before.
func drainRest(src io.Reader, keepUp func(past time.Duration), prefix []byte, total int64, cause error) ([]byte, int, error) {
	// Read a piece at a time, each bodyChunk given its own bodyChunkTimeout as readBody gives it.
	buf := make([]byte, minPiece)
	for since := bodyChunk; ; {
		if since >= bodyChunk {
			keepUp(answerTimeout / 2)
			since = 0
		}
		got, err := readChunk(src, buf)
		total += int64(got)
		since += got
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, http.StatusRequestTimeout, fmt.Errorf("the body arrives slower than %d KiB/s (%d bytes in)", bodyChunk>>10, total)
		case total > maxWireBytes:
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request larger than %d bytes", maxWireBytes)
		case errors.Is(err, io.EOF):
			return prefix, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: %d bytes, with <, > and & unescaped", cause, total)
		case err != nil:
			return nil, http.StatusBadRequest, fmt.Errorf("reading the request: %w", err)
		}
	}
}

// reviewPrefix decodes what the prefix of an AdmissionReview says of its request before the
// objects (uid, kind, resource, name, namespace, operation, user); ok is false when it does not
// say them all, or says one longer than the API server ever sends (checkLengths).
func reviewPrefix(prefix []byte) (Request, bool) {
	r, _, ok := scanPrefix(prefix)
	return r, ok
}

// answerPrefix is a copy of as much of prefix as reviewPrefix reads (nothing when it would not
// answer from it): a body drained for tens of seconds holds that, not reviewPrefixBytes.
func answerPrefix(prefix []byte) []byte {
	_, end, ok := scanPrefix(prefix)
	if !ok {
		return nil
	}
	return append([]byte(nil), prefix[:end]...)
}

// scanPrefix is reviewPrefix, with how far into prefix it read.
func scanPrefix(prefix []byte) (Request, int, bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	var r admissionv1.AdmissionRequest
	var apiVersion, kind string
	top := map[string]any{"apiVersion": &apiVersion, "kind": &kind}
	inRequest := map[string]any{"uid": &r.UID, "kind": &r.Kind, "resource": &r.Resource, "subResource": &r.SubResource,
		"name": &r.Name, "namespace": &r.Namespace, "operation": &r.Operation, "userInfo": &r.UserInfo}
	into, inReq := top, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return Request{}, 0, false
		}
		switch tok {
		case json.Delim('{'):
			continue
		case json.Delim('}'):
			return Request{}, 0, false
		}
		key, isKey := tok.(string)
		switch {
		case !isKey:
			return Request{}, 0, false
		case !inReq && key == "request":
			into, inReq = inRequest, true
			continue
		case inReq && (key == "object" || key == "oldObject"):
			ok := apiVersion == "admission.k8s.io/v1" && kind == "AdmissionReview" && r.UID != "" && r.Kind.Kind != "" && r.Operation != "" && checkLengths(&r) == nil
			return Request{AdmissionRequest: r}, int(dec.InputOffset()), ok
		}
		dst, known := into[key]
		if !known {
			dst = &json.RawMessage{}
		}
		if err := dec.Decode(dst); err != nil {
			return Request{}, 0, false
		}
	}
}

// decodeReview decodes an admission.k8s.io/v1 AdmissionReview with a request, case-sensitively
// as the API server and controller-runtime decode it, in one pass over the body.
func decodeReview(body []byte) (Request, error) {
	var env struct {
		APIVersion string                        `json:"apiVersion"`
		Kind       string                        `json:"kind"`
		Request    *admissionv1.AdmissionRequest `json:"request"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &env); err != nil {
		return Request{}, fmt.Errorf("not JSON, or a field of the wrong type: %w", err)
	}
	if env.APIVersion != "admission.k8s.io/v1" || env.Kind != "AdmissionReview" {
		return Request{}, fmt.Errorf("got apiVersion %.64q kind %.64q, want admission.k8s.io/v1 AdmissionReview", env.APIVersion, env.Kind)
	}
	if env.Request == nil {
		return Request{}, errors.New("no request")
	}
	if err := checkLengths(env.Request); err != nil {
		return Request{}, err
	}
	return Request{AdmissionRequest: *env.Request}, nil
}

// checkLengths refuses a request whose fields are longer than the API server ever sends them.
func checkLengths(r *admissionv1.AdmissionRequest) error {
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{
		{"uid", string(r.UID), maxUID}, {"name", r.Name, 253}, {"namespace", r.Namespace, 63}, {"subResource", r.SubResource, 253},
		{"operation", string(r.Operation), 16}, {"kind.group", r.Kind.Group, 253}, {"kind.version", r.Kind.Version, 63}, {"kind.kind", r.Kind.Kind, 253},
		{"resource.group", r.Resource.Group, 253}, {"resource.version", r.Resource.Version, 63}, {"resource.resource", r.Resource.Resource, 253},
	} {
		if len(f.value) > f.max {
			return fmt.Errorf("request.%s is %d bytes, longer than the API server ever sends (%d)", f.name, len(f.value), f.max)
		}
	}
	return nil
}

// bounded is a plain-text refusal cut to maxPlainMessage: it says what was wrong, never all of
// what the client sent. Red team L's refusals echoed a 60 KB Content-Type four-fold to clients
// that read none of it, and 700 such connections, each holding its header and message until the
// write timed out, took the webhook to 641 MiB.
func bounded(msg string) string { return cut(msg, maxPlainMessage) }

// boundAnswer cuts what an answer says to maxAnswerMessage and its warnings to maxWarnings of
// maxWarning bytes each: the guard's messages quote what the object says (a name, an armed
// value of "enforce" and a megabyte of spaces), and a review is answered to whoever sends it.
// The API server keeps no more: it passes on about 4 KiB of warnings, each cut to 256
// characters once past that (k8s.io/apiserver's warning recorder).
func boundAnswer(r *admissionv1.AdmissionResponse) {
	if r.Result != nil {
		r.Result.Message = cut(r.Result.Message, maxAnswerMessage)
	}
	if len(r.Warnings) > 0 {
		r.Warnings = cutAll(r.Warnings)
	}
}

// Bounds of what an answer says.
const (
	maxPlainMessage  = 512
	maxAnswerMessage = 16 << 10
	maxWarnings      = 16
	maxWarning       = 1 << 10
)

// cutAll is ss as boundAnswer bounds warnings: at most maxWarnings of maxWarning bytes each.
func cutAll(ss []string) []string {
	out := make([]string, 0, min(len(ss), maxWarnings))
	for _, s := range ss[:min(len(ss), maxWarnings)] {
		out = append(out, cut(s, maxWarning))
	}
	return out
}

// cut is s cut to at most n bytes, at a character's start, marked "..." when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("...")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// maxUID bounds the request uid the answer echoes and the logs carry: the API server's is a UUID
// (36 bytes). The fourteenth red team's 7 MB uids, each copied into two log lines and an answer
// that escaped it six-fold, took the webhook past 220 MB of memory within a second.
const maxUID = 128

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
