package e2e

import (
	"strings"
	"testing"
	"time"
)

// The checkers themselves, on hand-made histories: each rule must fire on the history that breaks
// it and stay quiet on its neighbour that does not.
func TestCheckers(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	iv := func(id string, epoch uint64, from, until int) interval {
		return interval{Identity: id, Epoch: epoch, From: at(from), Until: at(until)}
	}
	for _, tc := range []struct {
		name    string
		ivs     []interval
		resets  []time.Time
		samples []scrapeSample
		want    string // "" = no violation
	}{
		{name: "handover", ivs: []interval{iv("a", 1, 0, 1000), iv("b", 2, 1000, 2000)}},
		{name: "overlap", ivs: []interval{iv("a", 1, 0, 1000), iv("b", 2, 999, 2000)}, want: "overlap"},
		{name: "overlap with an earlier, longer holding", ivs: []interval{iv("a", 1, 0, 5000), iv("b", 2, 1000, 1500), iv("c", 3, 2000, 2500)}, want: "c epoch 3"},
		{name: "one process re-acquiring", ivs: []interval{iv("a", 1, 0, 1001), iv("a", 2, 1000, 2000)}},
		{name: "one process adopting an edited epoch", ivs: []interval{iv("a", 1, 0, 1000), iv("a", 2, 0, 2000)}, want: "changed epoch within one holding"},
		{name: "epoch reused", ivs: []interval{iv("a", 1, 0, 1000), iv("b", 1, 1000, 2000)}, want: "epoch did not increase"},
		{name: "epoch lower", ivs: []interval{iv("a", 5, 0, 1000), iv("b", 2, 1000, 2000)}, want: "epoch did not increase"},
		{name: "epoch lower after a reset", ivs: []interval{iv("a", 5, 0, 1000), iv("b", 2, 1000, 2000)}, resets: []time.Time{at(500)}},
		{name: "a reset before both does not excuse", ivs: []interval{iv("a", 5, 100, 1000), iv("b", 2, 1000, 2000)}, resets: []time.Time{at(50)}, want: "epoch did not increase"},
		{name: "scrape inside", ivs: []interval{iv("a", 1, 0, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 1, Valid: true, Start: at(400), End: at(420)}}},
		{name: "scrape straddling the end", ivs: []interval{iv("a", 1, 0, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 1, Valid: true, Start: at(990), End: at(1010)}}},
		{name: "scrape after the end", ivs: []interval{iv("a", 1, 0, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 1, Valid: true, Start: at(1001), End: at(1010)}}, want: "outside its validity"},
		{name: "scrape before the start", ivs: []interval{iv("a", 1, 100, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 1, Valid: true, Start: at(10), End: at(99)}}, want: "outside its validity"},
		{name: "scrape of an epoch never recorded", ivs: []interval{iv("a", 1, 0, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 2, Valid: true, Start: at(10), End: at(20)}}, want: "never recorded"},
		{name: "invalid scrape after the end", ivs: []interval{iv("a", 1, 0, 1000)},
			samples: []scrapeSample{{Identity: "a", Epoch: 1, Valid: false, Start: at(5000), End: at(5010)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := append(safetyViolations(tc.ivs, tc.resets), scrapeViolations(tc.samples, tc.ivs)...)
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("violations on a safe history: %q", got)
				}
				return
			}
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Fatalf("got %q, want a violation mentioning %q", got, tc.want)
			}
		})
	}
}

func TestLongestGap(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ivs := []interval{{From: at(1), Until: at(10)}, {From: at(2), Until: at(4)}, {From: at(13), Until: at(14)}, {From: at(14), Until: at(20)}}
	if gap, start := longestGap(ivs, at(0), at(21)); gap != 3*time.Second || !start.Equal(at(10)) {
		t.Fatalf("gap %v at %v, want 3s at %v", gap, start, at(10))
	}
	if gap, start := longestGap(ivs, at(0), at(30)); gap != 10*time.Second || !start.Equal(at(20)) {
		t.Fatalf("gap %v at %v, want the 10s tail at %v", gap, start, at(20))
	}
}

// Evidence that was never collected is the harness's failure, never a safety verdict; evidence
// that was collected and names no such holding stays a safety violation.
func TestScrapeVerdictsTellLostEvidenceFromAMissingHolding(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ivs := []interval{{Identity: "a", Epoch: 1, From: at(0), Until: at(1000)}}
	scrape := func(id string, epoch uint64) []scrapeSample {
		return []scrapeSample{{Identity: id, Epoch: epoch, Valid: true, Start: at(10), End: at(20)}}
	}
	for _, tc := range []struct {
		name                string
		samples             []scrapeSample
		recorded            map[string]bool
		wantSafety, wantHar string
	}{
		{name: "a process whose record was not collected", samples: scrape("b", 2), recorded: map[string]bool{"a": true}, wantHar: "no record of b was collected"},
		{name: "a process whose record names no such holding", samples: scrape("b", 2), recorded: map[string]bool{"a": true, "b": true}, wantSafety: "never recorded holding"},
		{name: "every record taken as complete (host-process suites)", samples: scrape("b", 2), wantSafety: "never recorded holding"},
		{name: "a recorded holding", samples: scrape("a", 1), recorded: map[string]bool{"a": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			safety, harness := scrapeVerdicts(tc.samples, ivs, tc.recorded)
			for _, c := range []struct {
				what string
				got  []string
				want string
			}{{"safety", safety, tc.wantSafety}, {"harness", harness, tc.wantHar}} {
				if c.want == "" && len(c.got) > 0 {
					t.Errorf("%s verdicts %q, want none", c.what, c.got)
				}
				if c.want != "" && !strings.Contains(strings.Join(c.got, "\n"), c.want) {
					t.Errorf("%s verdicts %q, want one mentioning %q", c.what, c.got, c.want)
				}
			}
		})
	}
}
