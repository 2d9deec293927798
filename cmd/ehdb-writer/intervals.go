package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/noetl/ehdb-election/election"
)

// openIntervals opens the intervals file ("-" = stderr) and writes the process's start line, so a
// checker holding this file knows the process's record is in it: a holding missing from a record
// that exists is the writer's fault, a record that does not exist is the collector's. It returns
// the recorder and what closes the file.
func openIntervals(path string, stderr io.Writer, identity string, log *slog.Logger, toReal func(time.Time) time.Time) (*intervals, func(), error) {
	var out io.Writer = stderr // "-": in a Pod, the lines go to the container's log
	closeFile := func() {}
	if path != "-" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("opening the intervals file: %w", err)
		}
		out, closeFile = f, func() { f.Close() }
	}
	rec := &intervals{w: out, identity: identity, log: log, toReal: toReal}
	if err := rec.start(time.Now()); err != nil {
		closeFile()
		return nil, nil, fmt.Errorf("writing the start line: %w", err)
	}
	return rec, closeFile, nil
}

// intervals writes the validity intervals file. Each line is one write(2) on an O_APPEND file, so
// several writers (a pod name's successive processes) can share it without interleaving.
type intervals struct {
	mu       sync.Mutex
	w        io.Writer
	identity string
	log      *slog.Logger
	// toReal maps the election's clock to the machine's: the file states real instants, which
	// compare across writers whatever clock each election runs on. nil means the same clock.
	toReal func(time.Time) time.Time
	now    func() time.Time // the machine's clock; nil means time.Now
	// fail ends the process when a line cannot be written: a record with a hole would let the
	// checker judge a holding it cannot see. nil means log and exit 1.
	fail func(error)

	last intervalLine // the last line written
}

type intervalLine struct {
	Identity string `json:"identity"`
	Epoch    uint64 `json:"epoch"`
	From     string `json:"from"`
	Until    string `json:"until"`
}

// startLine opens a process's record; its fields differ from an interval's, so readers of
// intervals see it as an interval that never began.
type startLine struct {
	Identity string `json:"identity"`
	Started  string `json:"started"`
}

func (r *intervals) start(at time.Time) error {
	b, err := json.Marshal(startLine{Identity: r.identity, Started: at.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	_, err = r.w.Write(append(b, '\n'))
	return err
}

func (r *intervals) record(ev election.Event) {
	switch ev.Outcome {
	case election.Acquired, election.Renewed, election.Lost, election.Released:
	default:
		return
	}
	from, until := ev.From, ev.Until
	if r.toReal != nil && !from.IsZero() {
		from, until = r.toReal(from), r.toReal(until)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A new acquisition replaces the token of a holding that lapsed without a loss (its record
	// expired, so the election re-acquires at epoch + 1): that epoch's validity ended when the new
	// token was published, which is before this call. Close it here, so the file does not claim
	// the old epoch valid until its lease would have run out.
	if ev.Outcome == election.Acquired && r.last.Identity != "" && r.last.Epoch != ev.Epoch {
		now := time.Now()
		if r.now != nil {
			now = r.now()
		}
		if lastUntil, err := time.Parse(time.RFC3339Nano, r.last.Until); err == nil && lastUntil.After(now) {
			closed := r.last
			closed.Until = now.UTC().Format(time.RFC3339Nano)
			r.write(closed)
		}
	}
	r.write(intervalLine{
		Identity: r.identity,
		Epoch:    ev.Epoch,
		From:     from.UTC().Format(time.RFC3339Nano),
		Until:    until.UTC().Format(time.RFC3339Nano),
	})
}

func (r *intervals) write(l intervalLine) {
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	r.last = l
	if _, err := r.w.Write(append(b, '\n')); err != nil {
		if r.fail != nil {
			r.fail(err)
			return
		}
		r.log.Error("cannot write the intervals file: stopping, the record would be incomplete", "error", err)
		os.Exit(1)
	}
}
