package main

import (
	"math"
	"slices"
	"time"
)

// summary is the distribution of one measured delay over its trials.
type summary struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
}

// summarize sorts a copy of ds and reads its percentiles by the nearest-rank method: the smallest
// sample with at least p% of the samples at or below it. Nothing is interpolated, so every figure
// is a delay that was actually measured; with 20 samples p99 is the maximum.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return summary{
		N:   len(s),
		Min: s[0],
		P50: percentile(s, 50),
		P90: percentile(s, 90),
		P99: percentile(s, 99),
		Max: s[len(s)-1],
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}
