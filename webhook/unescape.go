package webhook

import (
	"bufio"
	"bytes"
	"io"
)

// This file answers: how many bytes does a review really take? The API server encodes an
// AdmissionReview with Go's encoding/json, which writes every <, > and & in a string as \u003c,
// \u003e, \u0026: six bytes for one. A 1.3 MB Pod of < became a 7.8 MB review, over the 7 MiB the
// guard reads, the webhook answered 413, and the Pods entry's Ignore admitted it armed; a 1 MB
// HTML ConfigMap nobody reads could not be updated (team G). So the body is read through
// htmlUnescaper, which writes those three escapes back as the characters they stand for — the
// same JSON, inside a string or a key — and only what is left counts against maxReviewBytes.

// htmlUnescaper reads JSON from r with \u003c, \u003e and \u0026 (any case of hex digit) written
// as <, > and &. Every other escape is copied as it is, its backslash and the byte after it
// together, so an escaped backslash (\\u003c is the text \u003c) stays one.
type htmlUnescaper struct {
	r *bufio.Reader
	// pending is the second byte of an escape pair that did not fit the caller's buffer.
	pending    byte
	hasPending bool
}

// unescapeAhead is how far ahead of its caller htmlUnescaper reads: an escape is six bytes, and
// every connection being read holds its own (at 32 KiB, half of what a hostile client sending a
// byte at a time held; bodybuffer.go).
const unescapeAhead = 4 << 10

func newHTMLUnescaper(r io.Reader) *htmlUnescaper {
	return &htmlUnescaper{r: bufio.NewReaderSize(r, unescapeAhead)}
}

func (u *htmlUnescaper) Read(p []byte) (int, error) {
	n := 0
	if u.hasPending && len(p) > 0 {
		p[0], u.hasPending, n = u.pending, false, 1
	}
	for n < len(p) {
		if u.r.Buffered() == 0 && n > 0 {
			return n, nil // what is here now; the next Read waits for more
		}
		if _, err := u.r.Peek(1); err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		buf, _ := u.r.Peek(u.r.Buffered())
		// Copy and decode from what is buffered, in one pass, as far as p and the buffer go;
		// an escape cut by the buffer's end is left for the next pass, which refills it.
		i := 0
		for i < len(buf) && n < len(p) {
			b := bytes.IndexByte(buf[i:], '\\')
			if b != 0 {
				if b < 0 {
					b = len(buf) - i
				}
				m := copy(p[n:], buf[i:i+b])
				n, i = n+m, i+m
				continue
			}
			if len(buf)-i < 6 {
				break
			}
			if c, ok := htmlEscaped(buf[i : i+6]); ok {
				p[n] = c
				n, i = n+1, i+6
				continue
			}
			p[n] = '\\'
			n++
			if n < len(p) {
				p[n] = buf[i+1]
				n++
			} else {
				u.pending, u.hasPending = buf[i+1], true
			}
			i += 2
		}
		_, _ = u.r.Discard(i)
		if i > 0 || n == len(p) {
			continue
		}
		// A backslash with fewer than 6 bytes behind it in the buffer: ask for them.
		esc, _ := u.r.Peek(6)
		if c, ok := htmlEscaped(esc); ok {
			p[n] = c
			n++
			_, _ = u.r.Discard(6)
			continue
		}
		if len(esc) < 2 { // a backslash at the end: the decoder will say what is wrong
			p[n] = '\\'
			n++
			_, _ = u.r.Discard(1)
			continue
		}
		p[n] = '\\'
		n++
		if n < len(p) {
			p[n] = esc[1]
			n++
		} else {
			u.pending, u.hasPending = esc[1], true
		}
		_, _ = u.r.Discard(2)
	}
	return n, nil
}

// htmlEscaped reports the character esc (\u003c, \u003e or \u0026) stands for.
func htmlEscaped(esc []byte) (byte, bool) {
	if len(esc) < 6 || esc[0] != '\\' || esc[1] != 'u' || esc[2] != '0' || esc[3] != '0' {
		return 0, false
	}
	switch lo := esc[5] | 0x20; {
	case esc[4] == '3' && lo == 'c':
		return '<', true
	case esc[4] == '3' && lo == 'e':
		return '>', true
	case esc[4] == '2' && esc[5] == '6':
		return '&', true
	}
	return 0, false
}
