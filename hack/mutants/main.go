// Command mutants checks that the election's simulation finds bugs, not only passes: it reverts,
// one at a time, each rule the package's safety rests on (in a copy of the package), runs the
// simulation at the budget `make test` gives it, and fails unless every mutant is caught.
//
//	go run ./hack/mutants            (make mutants)
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// mutant reverts one rule: old is replaced by new in file (relative to election/).
type mutant struct {
	name, file, old, new string
}

var mutants = []mutant{
	{"an absent Lease timed from the last sighting of the record, not of the absence", "driver.go",
		"\tcase first:\n\t\td.absentSince, d.absentWait = now, e.believed(nil)",
		"\tcase first:\n\t\td.absentSince, d.absentWait = d.obs.since, e.believed(nil)"},
	{"a renewal adopts whatever epoch the record carries", "driver.go",
		"case rec == nil || holderOf(rec) != e.identity || epochOf(rec) != d.epoch:",
		"case rec == nil || holderOf(rec) != e.identity:"},
	{"a candidate trusts the record's (possibly shortened) duration", "driver.go",
		"\tdur := max(e.cfg.LeaseDuration, d.longest, d.longestGone)\n\tif rec != nil {\n\t\tdur = max(dur, leaseDuration(rec, dur))\n\t}\n\treturn dur",
		"\tdur := e.cfg.LeaseDuration\n\tif rec != nil {\n\t\tdur = leaseDuration(rec, dur)\n\t}\n\t_ = d\n\treturn dur"},
	{"no clock-rate margin on the holder's validity", "election.go",
		"validFor:    cfg.LeaseDuration - time.Duration(float64(cfg.LeaseDuration)*MaxClockRateDifference),",
		"validFor:    cfg.LeaseDuration,"},
	{"a suspended process trusts its monotonic clock alone (no boot-clock check)", "election.go",
		"return now.Sub(sent) < e.validFor && b >= 0 && boot >= 0 && b-boot < e.validFor",
		"_ = b\n\treturn now.Sub(sent) < e.validFor"},
	// The rules of issue 16.
	// R-own reverts the whole second case of ours() (incarnation, freshness, duration). Its
	// freshness and duration parts alone (keeping the incarnation) were not caught: a record of
	// our incarnation naming us with our epoch, other than one our own writes or a harmless
	// edit produced, takes an outside write that lowers leaseTransitions or shortens the
	// duration, both of which the lease guard refuses (the simulation excuses what follows as
	// impersonation); any participant's acquisition raises the epoch.
	{"R-own: any record naming us with our epoch is our holding", "driver.go",
		"case rec.UID == d.ownUID && e.fresh(now, d.lastSend, d.lastBoot) && leaseDuration(rec, 0) >= e.cfg.LeaseDuration:",
		"case true:"},
	{"R-reclaim: re-acquire at once on any record naming us, not only at the edited resourceVersion", "driver.go",
		"\tcase d.reclaimable():\n\t\t// Our record,",
		"\tcase d.reclaimRV != \"\" && holder == e.identity:\n\t\t// Our record,"},
	{"R-release: Release hands over any record that carries our name", "election.go",
		"\tif !e.ours(rec, e.clock.Now()) {\n\t\treturn nil\n\t}\n\terr := e.putReleased(ctx, rec)",
		"\tif holderOf(rec) != e.identity {\n\t\treturn nil\n\t}\n\terr := e.putReleased(ctx, rec)"},
	{"R-lost-answer: a record naming us with the highest epoch seen is adopted as our lost acquisition", "driver.go",
		"\tcase holder == \"\" && !d.incUnheard:\n\t\te.write(ctx, true, Acquired) // released: free at once",
		"\tcase holder == e.identity && epochOf(d.rec) == d.maxSeen:\n\t\te.write(ctx, e.lapsed(now), Acquired)\n\tcase holder == \"\" && !d.incUnheard:\n\t\te.write(ctx, true, Acquired) // released: free at once"},
	{"R-duration: a candidate forgets the longest duration it saw", "driver.go",
		"dur := max(e.cfg.LeaseDuration, d.longest, d.longestGone)",
		"dur := max(e.cfg.LeaseDuration, 0*d.longest, 0*d.longestGone)"},
	{"R-duration: a takeover writes only its own duration", "driver.go",
		"\tif holderOf(rec) != \"\" {\n\t\tdur = max(dur, leaseDuration(rec, dur))\n\t}\n\treturn int32(",
		"\t_ = rec\n\treturn int32("},
	// No mutant for "a holder that sees its record's duration shortened treats it as a loss":
	// only an outside write can shorten a held record's duration (a takeover writes at least the
	// record's), the lease guard refuses that write, and the simulation excuses what follows as
	// impersonation; reverting the rule was not caught (issue 16's note).
	{"R-gone: a release on a recreated Lease forgets the durations seen on the deleted one", "driver.go",
		"\tif l.UID != d.longestUID {\n\t\td.longestGone = max(d.longestGone, d.longest)\n",
		"\tif l.UID != d.longestUID {\n"},
	{"R-recreated: a recreated Lease read ahead of the stream is taken over at once when released, or when timed", "driver.go",
		"return !e.d.incUnheard && expired(rec, now, dur)",
		"return expired(rec, now, dur)"},
	{"R-lost-create: a create lost to another's keeps the absence timed from before that holding", "driver.go",
		"\tif err != nil && op == \"create\" {",
		"\tif false {"},
	{"R-absence: an absence is timed from its first sighting, polls included", "driver.go",
		"return d.watching && !d.absentUnheard && e.clock.Since(d.absenceTimedFrom()) > d.absentWait",
		"return e.clock.Since(d.absentSince) > d.absentWait"},
	{"R-unheard: a read's absence of a Lease the watch still shows is timed at once", "driver.go",
		"return d.watching && !d.absentUnheard && e.clock.Since(d.absenceTimedFrom()) > d.absentWait",
		"return d.watching && e.clock.Since(d.absenceTimedFrom()) > d.absentWait"},
	{"R-incarnation: a record of another incarnation naming us with our epoch is our holding", "driver.go",
		"case rec.UID == d.ownUID && e.fresh(now, d.lastSend, d.lastBoot) && leaseDuration(rec, 0) >= e.cfg.LeaseDuration:",
		"case e.fresh(now, d.lastSend, d.lastBoot) && leaseDuration(rec, 0) >= e.cfg.LeaseDuration:"},
	{"R-incarnation: a record of another incarnation naming us reads as ours edited (re-acquired at once)", "driver.go",
		"holderOf(d.rec) == e.identity && d.rec.UID == d.ownUID && e.fresh(",
		"holderOf(d.rec) == e.identity && e.fresh("},
	{"R-stream: an absence known before the current stream is timed from the stream's start", "driver.go",
		"first := !d.known || d.rec != nil || d.watching && !d.absentSince.After(d.watchFrom)",
		"first := !d.known || d.rec != nil"},
	{"R-replay: a stream that shows an older record than a read did is trusted to be past what the read showed", "watch.go",
		"\t// Until it brings something at least as new, what a read shows later is ahead of it too.\n\td.streamLags = d.watching\n",
		"\tif true {\n\t\treturn\n\t}\n"},
	{"R-epoch-limit: an epoch that cannot be incremented stalls silently", "driver.go",
		"\t\t\te.countError(\"update\", err)\n\t\t\td.stale = true",
		"\t\t\td.stale = true"},
}

func main() {
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	caught, tried := 0, 0
	for _, m := range mutants {
		// MUTANTS=<substring> runs only the mutants whose name contains it.
		if f := os.Getenv("MUTANTS"); f != "" && !strings.Contains(m.name, f) {
			continue
		}
		tried++
		dir, err := os.MkdirTemp("", "ehdb-mutant-")
		if err != nil {
			fail(err)
		}
		if err := copyModule(root, dir); err != nil {
			fail(err)
		}
		path := filepath.Join(dir, "election", m.file)
		src, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		if bytes.Count(src, []byte(m.old)) != 1 {
			fail(fmt.Errorf("mutant %q: its code is not in election/%s once; update the mutant with the code", m.name, m.file))
		}
		if err := os.WriteFile(path, bytes.Replace(src, []byte(m.old), []byte(m.new), 1), 0o644); err != nil {
			fail(err)
		}
		cmd := exec.Command("go", "test", "-count=1", "-run", "TestRandomizedSimulation$", "./election/")
		// Every failure, not only the first: the mutant's caught by a violation, not by a
		// failure the simulation finds on the unmutated code too.
		cmd.Env = append(os.Environ(), "EHDB_SIM_TRACE=1")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var seeds, failing []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "seed ") && strings.Contains(l, "rerun") {
				seeds = append(seeds, strings.TrimSpace(l))
			}
		}
		switch {
		case err == nil:
			fmt.Printf("NOT CAUGHT %s\n", m.name)
		case len(seeds) == 0:
			// A failure that is not a violation (a build error, say) proves nothing.
			fail(fmt.Errorf("mutant %q failed without a violation:\n%s", m.name, out))
		default:
			// A seed counts only if the unmutated code passes it: one that fails there too
			// is a real failure (or a checker narrower than the doc), not this mutant caught.
			by := ""
			for _, l := range seeds[:min(len(seeds), 3)] {
				seed := seedOf(l)
				if seed == "" {
					continue
				}
				if passesUnmutated(root, seed) {
					by = seed
					break
				}
				failing = append(failing, seed)
			}
			if by == "" {
				fail(fmt.Errorf("mutant %q: the seeds that caught it fail on the unmutated code too (%s): a real failure, fix it first",
					m.name, strings.Join(failing, ", ")))
			}
			caught++
			fmt.Printf("caught     %s (seed %s passes unmutated)\n           %s\n", m.name, by, strings.Join(seeds, "\n           "))
		}
		os.RemoveAll(dir)
	}
	fmt.Printf("%d of %d mutants caught\n", caught, tried)
	if caught != tried {
		os.Exit(1)
	}
}

// copyModule copies the module's tracked files (as they are in the work tree) to another folder.
func copyModule(from, to string) error {
	ls := exec.Command("git", "ls-files", "-z")
	ls.Dir = from
	out, err := ls.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(from, rel))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, rel), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// seedOf reads the seed out of a simulation failure line ("seed N (rerun: ...").
func seedOf(line string) string {
	_, rest, ok := strings.Cut(line, "seed ")
	if !ok {
		return ""
	}
	seed, _, ok := strings.Cut(rest, " (rerun")
	if !ok {
		return ""
	}
	return seed
}

// passesUnmutated runs one seed of the simulation on the module as it is.
func passesUnmutated(root, seed string) bool {
	cmd := exec.Command("go", "test", "-count=1", "-run", "TestRandomizedSimulation$", "./election/")
	cmd.Env = append(os.Environ(), "EHDB_SIM_SEED="+seed)
	cmd.Dir = root
	return cmd.Run() == nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}
