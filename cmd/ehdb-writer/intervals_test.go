package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/noetl/ehdb-election/election"
)

// The record opens with the process's start, before any holding: a checker can then tell a
// record that names no such holding from a record it never got.
func TestIntervalsFileOpensWithTheStartLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w-0.jsonl")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := time.Now()
	rec, closeFile, err := openIntervals(path, io.Discard, "w-0#u", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 1, From: from, Until: from.Add(time.Second)})
	closeFile()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the start line and one interval, got:\n%s", data)
	}
	var st startLine
	if err := json.Unmarshal([]byte(lines[0]), &st); err != nil || st.Identity != "w-0#u" {
		t.Fatalf("first line %q is not the start line of w-0#u (%v)", lines[0], err)
	}
	if at, err := time.Parse(time.RFC3339Nano, st.Started); err != nil || at.Before(before.Add(-time.Second)) {
		t.Fatalf("started %q: %v", st.Started, err)
	}
	if !strings.Contains(lines[1], `"epoch":1`) {
		t.Fatalf("second line %q is not the interval", lines[1])
	}
}

func TestIntervalsFileThatCannotBeOpenedIsAnError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, _, err := openIntervals(filepath.Join(t.TempDir(), "missing", "w-0.jsonl"), io.Discard, "w-0#u", log, nil); err == nil {
		t.Fatal("no error for an intervals file in a folder that does not exist")
	}
	if _, _, err := openIntervals("-", failingWriter{}, "w-0#u", log, nil); err == nil {
		t.Fatal("no error when the start line cannot be written")
	}
}

// A line that cannot be written ends the process rather than leave a hole in its record.
func TestIntervalsWriteFailureStopsTheRecorder(t *testing.T) {
	var failed error
	rec := &intervals{w: failingWriter{}, identity: "w-0#u", fail: func(err error) { failed = err }}
	from := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 1, From: from, Until: from.Add(time.Second)})
	if failed == nil {
		t.Fatal("a failed write went unnoticed")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
