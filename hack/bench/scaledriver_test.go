package main

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// TestMissDetector feeds one election's successful writes (send times, in seconds from the
// window's start) to the detector with the production timings (lease 15 s, renew 5 s: late after
// 7.5 s, lapsed after 14.85 s) and checks what it counts as missed.
func TestMissDetector(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name         string
		before       []float64 // writes before the window begins (at 0)
		writes       []float64 // writes in the window
		end          float64
		late, lapsed int
		maxGap       float64
	}{
		{name: "on time", before: []float64{-3}, writes: []float64{2, 7, 12, 17, 22, 27}, end: 30, maxGap: 5},
		{name: "renew + slack exactly is on time", before: []float64{-1}, writes: []float64{6.5, 14}, end: 16, maxGap: 7.5},
		{name: "a stall of 8 s makes one renewal late", before: []float64{-3}, writes: []float64{2, 7, 20, 25}, end: 30, late: 1, maxGap: 13},
		{name: "a stall past the token's validity is late and lapsed", before: []float64{-3}, writes: []float64{2, 18, 23}, end: 25, late: 1, lapsed: 1, maxGap: 16},
		{name: "a gap straddling the window's start counts", before: []float64{-6}, writes: []float64{3, 8}, end: 10, late: 1, maxGap: 9},
		{name: "gaps before the window do not count", before: []float64{-40, -20, -4}, writes: []float64{1, 6}, end: 10, maxGap: 5},
		{name: "no renewal by the window's end is late", before: []float64{-3}, writes: []float64{2}, end: 10, late: 1, maxGap: 8},
		{name: "silent for the whole window: late and lapsed", before: []float64{-1}, end: 30, late: 1, lapsed: 1, maxGap: 31},
		{name: "never wrote: counted from the window's start", end: 8, late: 1, maxGap: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newMissDetector(15*time.Second, 5*time.Second)
			for _, s := range tc.before {
				d.Write(at(s), at(s).Add(time.Millisecond))
			}
			d.Begin(at(0))
			for _, s := range tc.writes {
				d.Write(at(s), at(s).Add(3*time.Millisecond))
			}
			m, lat := d.End(at(tc.end))
			if m.Late != tc.late || m.Lapsed != tc.lapsed || m.MaxGap != time.Duration(tc.maxGap*float64(time.Second)) {
				t.Errorf("late %d, lapsed %d, max gap %s; want %d, %d, %gs", m.Late, m.Lapsed, m.MaxGap, tc.late, tc.lapsed, tc.maxGap)
			}
			if len(lat) != len(tc.writes) {
				t.Errorf("%d latencies, want one per write in the window (%d)", len(lat), len(tc.writes))
			}
			for _, l := range lat {
				if l != 3*time.Millisecond {
					t.Errorf("latency %s, want 3ms", l)
				}
			}
		})
	}
}

// TestMissesTotal: every kind counts toward the total, and Any follows it.
func TestMissesTotal(t *testing.T) {
	for _, m := range []Misses{{Late: 1}, {Lapsed: 1}, {TokenDrops: 1}, {Lost: 1}, {Errors: 1}} {
		if m.Total() != 1 || !m.Any() {
			t.Errorf("%+v: total %d, any %v; want 1, true", m, m.Total(), m.Any())
		}
	}
	if (Misses{MaxGap: time.Hour}).Any() {
		t.Error("a long gap alone is not a miss: Late and Lapsed classify it")
	}
}

// TestCountingLimiter: requests that find a token are not counted, however slow the machine;
// every request the bucket holds back is, with the time it waited.
func TestCountingLimiter(t *testing.T) {
	stats := &throttleStats{}
	l := &countingLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(20, 3), stats: stats}
	for range 5 {
		if err := l.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waits, waited := stats.read()
	if waits != 2 {
		t.Errorf("%d requests counted as held back, want 2 (a burst of 3, then 5 requests)", waits)
	}
	// Two tokens at 20/s: the second comes 100 ms after the burst.
	if d := time.Duration(waited); d < 60*time.Millisecond {
		t.Errorf("held back for %s in all, want about 100ms", d)
	}
}
