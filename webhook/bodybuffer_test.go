package webhook

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// A body read in steps of any size comes back whole, its prefix a copy of its first bytes, and no
// piece larger than what had arrived before it (so a client holds what it has sent).
func TestTheBodyBufferKeepsWhatArrived(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		steps []int
	}{
		{"empty", 0, []int{bodyChunk}},
		{"one byte", 1, []int{bodyChunk}},
		{"a piece exactly", minPiece, []int{bodyChunk}},
		{"ordinary review", 20 << 10, []int{bodyChunk}},
		{"a megabyte in chunks", 1 << 20, []int{bodyChunk}},
		{"odd steps", 100_003, []int{7, 4096, 1, bodyChunk, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
			src := iotest.HalfReader(bytes.NewReader(want)) // short reads, as a socket gives
			var b bodyBuffer
			for i := 0; ; i++ {
				step := tc.steps[i%len(tc.steps)]
				before := b.len()
				got, err := b.readFrom(src, step)
				if got > step || b.len() != before+got {
					t.Fatalf("step %d of %d: read %d, length %d after %d", i, step, got, b.len(), before)
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for _, p := range b.pieces {
				if cap(p) > max(held, minPiece) {
					t.Errorf("a piece of %d bytes after %d had arrived", cap(p), held)
				}
				held += len(p)
			}
			if p := b.prefix(reviewPrefixBytes); !bytes.Equal(p, want[:min(len(want), reviewPrefixBytes)]) {
				t.Errorf("prefix: %d bytes, not the body's first", len(p))
			}
			if got := b.bytes(); !bytes.Equal(got, want) {
				t.Errorf("bytes: %d bytes, want the %d sent", len(got), len(want))
			}
		})
	}
}
