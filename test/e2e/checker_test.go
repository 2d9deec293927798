package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// interval is one writer's validity of one epoch, as its intervals file states it (in the
// machine's time, whatever clock the writer's election runs on).
type interval struct {
	Identity string    `json:"identity"`
	Epoch    uint64    `json:"epoch"`
	From     time.Time `json:"from"`
	Until    time.Time `json:"until"`
}

// readIntervals reads intervals files (JSON lines, written by ehdb-writer --intervals-file or
// copied from Pods): the last line per (identity, epoch) is that holding's interval. Missing
// files read as empty. Intervals that never began (until <= from) are left out. Sorted by start.
func readIntervals(files ...string) ([]interval, error) {
	last := map[string]interval{}
	for _, f := range files {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		err = parseIntervals(fh, last)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	var ivs []interval
	for _, iv := range last {
		if iv.Until.After(iv.From) {
			ivs = append(ivs, iv)
		}
	}
	sortIntervals(ivs)
	return ivs, nil
}

func sortIntervals(ivs []interval) {
	slices.SortFunc(ivs, func(a, b interval) int { return a.From.Compare(b.From) })
}

func parseIntervals(r io.Reader, last map[string]interval) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var iv interval
		if err := json.Unmarshal(sc.Bytes(), &iv); err != nil {
			return fmt.Errorf("bad line %q: %v", sc.Text(), err)
		}
		last[iv.Identity+"/"+strconv.FormatUint(iv.Epoch, 10)] = iv
	}
	return sc.Err()
}

// safetyViolations is the safety checker over one shard's intervals (sorted by start): no two
// processes' intervals overlap, one process never changes epoch within one holding (two epochs
// from the same start: an adopted outside edit), and epochs strictly increase from one holding to
// the next — except across an epoch
// reset: an instant at which a non-participant deleted the Lease or lowered its epoch, after which
// a process that never saw the old epochs may legitimately start lower (the spec leaves
// cross-process monotonicity to the chart's lease guard, which the soak puts in Warn mode). A
// pair of holdings is exempt only when a reset falls after the first began and before the second
// began. Overlap is never exempt.
func safetyViolations(ivs []interval, resets []time.Time) []string {
	var out []string
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		// Overlap with any earlier holding, not only the previous one: a long interval may
		// outlast several short ones.
		// One process's own intervals may touch: its re-acquisition replaces its token (a
		// process's Token() states one epoch at a time).
		for j := i - 1; j >= 0; j-- {
			if ivs[j].Identity == cur.Identity {
				if ivs[j].From.Equal(cur.From) {
					out = append(out, fmt.Sprintf("SAFETY: %s changed epoch within one holding: epoch %d and epoch %d both valid from %s",
						cur.Identity, ivs[j].Epoch, cur.Epoch, cur.From.Format(time.StampMicro)))
				}
				continue
			}
			if ivs[j].Until.After(cur.From) {
				out = append(out, fmt.Sprintf("SAFETY: overlap: %s epoch %d valid [%s, %s] and %s epoch %d valid from %s",
					ivs[j].Identity, ivs[j].Epoch, ivs[j].From.Format(time.StampMicro), ivs[j].Until.Format(time.StampMicro),
					cur.Identity, cur.Epoch, cur.From.Format(time.StampMicro)))
			}
		}
		exempt := slices.ContainsFunc(resets, func(r time.Time) bool { return r.After(prev.From) && !r.After(cur.From) })
		if cur.Epoch <= prev.Epoch && !exempt {
			out = append(out, fmt.Sprintf("SAFETY: epoch did not increase: %s held %d from %s, then %s held %d from %s",
				prev.Identity, prev.Epoch, prev.From.Format(time.StampMicro), cur.Identity, cur.Epoch, cur.From.Format(time.StampMicro)))
		}
	}
	return out
}

// checkSafety runs the safety checker over one shard's intervals files and fails the test on a
// violation, or when no interval was recorded at all (a checker over nothing proves nothing).
func checkSafety(t *testing.T, files ...string) []interval {
	t.Helper()
	return checkSafetyResets(t, nil, files...)
}

func checkSafetyResets(t *testing.T, resets []time.Time, files ...string) []interval {
	t.Helper()
	ivs, err := readIntervals(files...)
	if err != nil {
		t.Fatalf("safety checker: %v", err)
	}
	if len(ivs) == 0 {
		t.Errorf("safety checker: no validity interval recorded in %v: the writers never held a valid token, or never wrote it down", files)
	}
	reportViolations(t, "intervals", safetyViolations(ivs, resets))
	return ivs
}

// scrapeSample is one scrape of a writer's /metrics: issued at Start, answered by End, so the
// writer evaluated token_valid at some instant in [Start, End].
type scrapeSample struct {
	Identity   string
	Start, End time.Time
	Valid      bool
	Epoch      uint64
}

// scrapeViolations cross-checks the writers' own view of validity (token_valid on /metrics, what
// Token() says) against the intervals they recorded: a scrape showing token_valid 1 for epoch E
// must overlap [from, until] of that writer's holding of E. Only [Start, End] is known of the
// instant the writer evaluated, so a scrape is a violation only when the whole window misses the
// interval. (A broken validity rule in the election shows here even though the intervals, which
// are computed from the same variables, look fine.) Every writer's record is taken to be complete.
func scrapeViolations(samples []scrapeSample, ivs []interval) []string {
	safety, _ := scrapeVerdicts(samples, ivs, nil)
	return safety
}

// scrapeVerdicts is scrapeViolations over records that may not all have been collected: recorded,
// when not nil, names the processes whose record the checker holds (their start line was read). A
// valid scrape of a process whose record is missing is a harness error — its evidence was lost,
// so there is nothing to judge — never a safety verdict; a process whose record is there but names
// no such holding is a safety violation, as strictly as ever.
func scrapeVerdicts(samples []scrapeSample, ivs []interval, recorded map[string]bool) (safety, harness []string) {
	byKey := map[string]interval{}
	for _, iv := range ivs {
		byKey[iv.Identity+"/"+strconv.FormatUint(iv.Epoch, 10)] = iv
	}
	missing := map[string]bool{}
	for _, s := range samples {
		if !s.Valid {
			continue
		}
		iv, ok := byKey[s.Identity+"/"+strconv.FormatUint(s.Epoch, 10)]
		switch {
		case !ok && recorded != nil && !recorded[s.Identity]:
			if !missing[s.Identity] {
				missing[s.Identity] = true
				harness = append(harness, fmt.Sprintf("HARNESS: no record of %s was collected, yet its scrape in [%s, %s] shows token_valid 1 for epoch %d: its evidence is missing, so its scrapes are not judged",
					s.Identity, s.Start.Format(time.StampMicro), s.End.Format(time.StampMicro), s.Epoch))
			}
		case !ok:
			safety = append(safety, fmt.Sprintf("SAFETY: %s's scrape in [%s, %s] shows token_valid 1 for epoch %d, which it never recorded holding",
				s.Identity, s.Start.Format(time.StampMicro), s.End.Format(time.StampMicro), s.Epoch))
		case s.End.Before(iv.From) || s.Start.After(iv.Until):
			safety = append(safety, fmt.Sprintf("SAFETY: %s's scrape in [%s, %s] shows token_valid 1 for epoch %d outside its validity [%s, %s] (%s past its end)",
				s.Identity, s.Start.Format(time.StampMicro), s.End.Format(time.StampMicro), s.Epoch,
				iv.From.Format(time.StampMicro), iv.Until.Format(time.StampMicro), s.Start.Sub(iv.Until).Round(time.Microsecond)))
		}
	}
	return safety, harness
}

// longestGap is the longest stretch of [from, to] in which no interval is valid, and where it
// starts.
func longestGap(ivs []interval, from, to time.Time) (time.Duration, time.Time) {
	var gap time.Duration
	var at time.Time
	covered := from
	for _, iv := range ivs { // sorted by From
		if iv.From.After(covered) {
			end := iv.From
			if end.After(to) {
				end = to
			}
			if d := end.Sub(covered); d > gap {
				gap, at = d, covered
			}
		}
		if iv.Until.After(covered) {
			covered = iv.Until
		}
	}
	if to.After(covered) {
		if d := to.Sub(covered); d > gap {
			gap, at = d, covered
		}
	}
	return gap, at
}

// reportViolations fails the test with the first 20 violations and the count of the rest.
func reportViolations(t *testing.T, what string, vs []string) {
	t.Helper()
	for i, v := range vs {
		if i == 20 {
			t.Errorf("... and %d more violations in the %s", len(vs)-20, what)
			break
		}
		t.Error(v)
	}
}
