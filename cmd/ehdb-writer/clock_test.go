package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/noetl/ehdb-election/election"
)

func TestSkewedClockReadsOffsetAndRate(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		offset time.Duration
		rate   float64
	}{
		{"ahead and fast", 3 * time.Minute, 1.005},
		{"behind and slow", -2 * time.Minute, 0.995},
		{"exact", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := clocktesting.NewFakeClock(start)
			c, err := newSkewedClock(base, tc.offset, tc.rate)
			if err != nil {
				t.Fatal(err)
			}
			t0 := c.Now()
			if want := start.Add(tc.offset); !t0.Equal(want) {
				t.Fatalf("Now at the anchor = %v, want %v", t0, want)
			}
			base.Step(200 * time.Second)
			elapsed := time.Duration(float64(200*time.Second) * tc.rate)
			if got := c.Since(t0); got != elapsed {
				t.Errorf("Since after 200s of real time = %v, want %v", got, elapsed)
			}
			if got, want := c.Now(), start.Add(tc.offset+elapsed); !got.Equal(want) {
				t.Errorf("Now = %v, want %v", got, want)
			}
			// Real undoes the skew: a reading maps back to the real instant it was taken at.
			for _, local := range []time.Time{t0, c.Now(), c.Now().Add(3 * time.Second)} {
				real := c.Real(local)
				if back := c.local(real); back.Sub(local).Abs() > time.Nanosecond {
					t.Errorf("local(Real(%v)) = %v", local, back)
				}
			}
			if got := c.Real(c.Now()); got.Sub(base.Now()).Abs() > time.Nanosecond {
				t.Errorf("Real(Now) = %v, want the base's %v", got, base.Now())
			}
		})
	}
}

// A timer armed for a local duration fires after that duration of local time, i.e. d/rate of real
// time: a fast clock's renewals come early in real time, a slow clock's late.
func TestSkewedClockTimersRunOnLocalTime(t *testing.T) {
	for _, rate := range []float64{1.005, 0.995} {
		base := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		c, err := newSkewedClock(base, -time.Minute, rate)
		if err != nil {
			t.Fatal(err)
		}
		d := 3 * time.Second
		realD := time.Duration(float64(d) / rate)
		timer := c.NewTimer(d)
		base.Step(realD - time.Millisecond)
		select {
		case <-timer.C():
			t.Fatalf("rate %v: a %v timer fired %v of real time early", rate, d, time.Millisecond)
		default:
		}
		base.Step(time.Millisecond)
		select {
		case got := <-timer.C():
			if !got.Equal(c.Now()) {
				t.Errorf("rate %v: the timer delivered %v, want the clock's reading %v", rate, got, c.Now())
			}
		default:
			t.Fatalf("rate %v: a %v timer did not fire after %v of real time", rate, d, realD)
		}
		// Reset re-arms on local time; Stop disarms.
		timer.Reset(d)
		if !timer.Stop() {
			t.Errorf("rate %v: Stop of an armed timer returned false", rate)
		}
		base.Step(2 * realD)
		select {
		case <-timer.C():
			t.Errorf("rate %v: a stopped timer fired", rate)
		default:
		}
	}
}

func TestClockFlags(t *testing.T) {
	for _, args := range [][]string{{"--clock-rate=0"}, {"--clock-rate=-1"}, {"--clock-rate=3"}, {"--clock-offset=soon"}} {
		if c := run(context.Background(), args, env(), io.Discard, nil); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
	addr, stop, code, logs := startRun(t, env("HOSTNAME", "w-0"), "--clock-offset=-90s", "--clock-rate=1.004")
	get(t, "http://"+addr+"/metrics")
	stop()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, logs.String())
	}
	if !bytes.Contains([]byte(logs.String()), []byte(`"offset":"-1m30s","rate":1.004`)) {
		t.Errorf("the skew is not logged:\n%s", logs.String())
	}
}

// The intervals file states real instants whatever clock the election runs on.
func TestIntervalsOfASkewedElectionAreReal(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	base := clocktesting.NewFakeClock(start)
	c, err := newSkewedClock(base, 5*time.Minute, 0.995)
	if err != nil {
		t.Fatal(err)
	}
	base.Step(10 * time.Second)
	from := c.Now()
	var buf bytes.Buffer
	rec := &intervals{w: &buf, identity: "w-0#u", toReal: c.Real}
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 1, From: from, Until: from.Add(3 * time.Second)})
	var l intervalLine
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	gotFrom, _ := time.Parse(time.RFC3339Nano, l.From)
	gotUntil, _ := time.Parse(time.RFC3339Nano, l.Until)
	if !gotFrom.Equal(start.Add(10 * time.Second)) {
		t.Errorf("from %v, want the real instant %v", gotFrom, start.Add(10*time.Second))
	}
	// 3 s on a clock running at 0.995 last 3/0.995 s of real time.
	rate := 0.995
	if want := time.Duration(float64(3*time.Second) / rate); gotUntil.Sub(gotFrom)-want > time.Nanosecond || want-gotUntil.Sub(gotFrom) > time.Nanosecond {
		t.Errorf("the interval lasts %v of real time, want %v", gotUntil.Sub(gotFrom), want)
	}
}

// A lapsed holding re-acquired at epoch + 1 ends the old epoch's interval when the new token was
// published; a renewal that changed the epoch (an adopted outside edit) closes nothing, so the
// checker sees the two epochs of one holding.
func TestIntervalsCloseALapsedEpochOnReacquisition(t *testing.T) {
	from := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	now := from.Add(time.Second)
	var buf bytes.Buffer
	rec := &intervals{w: &buf, identity: "w-0#u", now: func() time.Time { return now }}
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 3, From: from, Until: from.Add(3 * time.Second)})
	rec.record(election.Event{Outcome: election.Acquired, Epoch: 4, From: now.Add(-time.Millisecond), Until: now.Add(3 * time.Second)})
	rec.record(election.Event{Outcome: election.Renewed, Epoch: 9, From: now.Add(-time.Millisecond), Until: now.Add(4 * time.Second)})
	want := `{"identity":"w-0#u","epoch":3,"from":"2030-01-02T03:04:05Z","until":"2030-01-02T03:04:08Z"}
{"identity":"w-0#u","epoch":3,"from":"2030-01-02T03:04:05Z","until":"2030-01-02T03:04:06Z"}
{"identity":"w-0#u","epoch":4,"from":"2030-01-02T03:04:05.999Z","until":"2030-01-02T03:04:09Z"}
{"identity":"w-0#u","epoch":9,"from":"2030-01-02T03:04:05.999Z","until":"2030-01-02T03:04:10Z"}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
