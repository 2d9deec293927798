package webhook

import "io"

// This file answers: how is a request body held while it arrives? In pieces that grow with it,
// so what a request holds follows what its client has sent, never what it claimed. The bench's
// hostile connections (a POST claiming 7 MiB, a byte at a time) each held 64 KiB for the byte
// they had sent — a 32 KiB piece of body and the unescaper's 32 KiB read-ahead — and a body grown
// by append left about four times its size behind as garbage; 100 of them took the webhook to
// 67-71 MiB of RSS.

// The first piece is minPiece; each next one is as large as the body so far, up to bodyChunk, so
// a review of ordinary size (tens of KiB) takes a few pieces and the largest (7 MiB) takes about
// two hundred.
const minPiece = 4 << 10

// bodyBuffer is a body read so far.
type bodyBuffer struct {
	pieces [][]byte
	n      int
}

func (b *bodyBuffer) len() int { return b.n }

// readFrom reads up to want bytes from r, or until r's first error, which it returns as it is
// (io.EOF: the body ended), and says how many it read.
func (b *bodyBuffer) readFrom(r io.Reader, want int) (int, error) {
	got := 0
	for got < want {
		k := len(b.pieces) - 1
		if k < 0 || len(b.pieces[k]) == cap(b.pieces[k]) {
			b.pieces = append(b.pieces, make([]byte, 0, min(max(b.n, minPiece), bodyChunk, want-got)))
			k++
		}
		p := b.pieces[k]
		m, err := readChunk(r, p[len(p):len(p)+min(cap(p)-len(p), want-got)])
		b.pieces[k] = p[:len(p)+m]
		got += m
		b.n += m
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// bytes is the body in one slice (copied once when it took more than one piece). b is empty
// after it.
func (b *bodyBuffer) bytes() []byte {
	var out []byte
	if len(b.pieces) == 1 {
		out = b.pieces[0]
	} else {
		out = make([]byte, 0, b.n)
		for _, p := range b.pieces {
			out = append(out, p...)
		}
	}
	b.pieces, b.n = nil, 0
	return out
}

// prefix is a copy of the body's first n bytes (all of it when shorter).
func (b *bodyBuffer) prefix(n int) []byte {
	out := make([]byte, 0, min(n, b.n))
	for _, p := range b.pieces {
		if len(out) == cap(out) {
			break
		}
		out = append(out, p[:min(len(p), cap(out)-len(out))]...)
	}
	return out
}
