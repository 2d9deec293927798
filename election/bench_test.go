package election

import (
	"context"
	"testing"

	"github.com/noetl/ehdb-election/election/fake"
)

// holding returns a holder on the in-memory store with the real clock, as a writer would run it.
func holding(tb testing.TB) *Election {
	tb.Helper()
	store := fake.NewLeaseStore()
	// The real clock, as a writer runs it (Options.Clock unset).
	e := newElection(store, testConfig(lease, renew), Options{Identity: "bench#1", Logger: discard})
	e.round(context.Background())
	if !e.Token().Valid {
		tb.Fatal("not holding")
	}
	return e
}

// The write path's read must not allocate (and takes no lock).
func TestTokenDoesNotAllocate(t *testing.T) {
	e := holding(t)
	if n := testing.AllocsPerRun(1000, func() { _ = e.Token() }); n != 0 {
		t.Fatalf("Token() allocates %v times per call", n)
	}
}

func BenchmarkToken(b *testing.B) {
	e := holding(b)
	b.ReportAllocs()
	b.ResetTimer()
	var valid int
	for i := 0; i < b.N; i++ {
		if e.Token().Valid {
			valid++
		}
	}
	if valid != b.N {
		b.Fatal("lost the token")
	}
}

func BenchmarkTokenParallel(b *testing.B) {
	e := holding(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = e.Token()
		}
	})
}

// BenchmarkTick is one renewal round (decide and PUT) on the in-memory store.
func BenchmarkTick(b *testing.B) {
	e := holding(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.round(ctx)
	}
	b.StopTimer()
	if got := outcomes(e)[Renewed]; got != uint64(b.N) {
		b.Fatalf("%d renewals in %d rounds", got, b.N)
	}
}
