package charttest

import (
	"context"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/election/fake"
)

// TestAlertsOnRecordedSeries records the series of real elections (the election package over its
// in-memory store, a 1 s lease) as Prometheus would scrape them — target labels added, the info
// metric's namespace renamed to exported_namespace, stale markers when a writer dies — through a
// hot standby, a crash of the holder and the standby's takeover, then a crash of the last writer.
// The chart's alerts are evaluated over that recording and compared, at every evaluation, with an
// independent Go reading of the same samples: "no writer of the shard had a valid token for `for`".
func TestAlertsOnRecordedSeries(t *testing.T) {
	const (
		scrape = 100 * time.Millisecond
		lease  = time.Second
		shardN = 5
	)
	forDur := 2 * lease
	rec := newScrapeRecorder(scrape)
	ctx := context.Background()
	store := fake.NewLeaseStore()
	cfg := election.Config{Enabled: true, LeaseDuration: lease, RenewInterval: lease / 4, Shard: shardN, HasShard: true, Namespace: "noetl"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	start := func(pod string) (*election.Election, context.CancelFunc) {
		reg := prometheus.NewRegistry()
		cctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		e, err := election.Start(cctx, store, cfg, election.Options{Registerer: reg, Identity: election.NewIdentity(pod), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		rec.add(pod, reg)
		return e, cancel
	}
	waitValid := func(e *election.Election, who string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			rec.tick()
			return e.Token().Valid, nil
		})
		if err != nil {
			t.Fatalf("%s never held a valid token: %v", who, err)
		}
	}
	run := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			rec.tick()
			time.Sleep(5 * time.Millisecond)
		}
	}

	a, stopA := start("noetl-cmdbus-writer-5")
	waitValid(a, "the first writer")
	if !rec.hasInfo {
		stopA()
		t.Skip("this tree's election package exports no ehdb_election_info (the per-shard alerts join on it)")
	}
	b, stopB := start("noetl-cmdbus-writer-5-standby")
	run(forDur + time.Second) // a hot standby beside a valid holder, longer than the alert's for
	stopA()                   // the holder crashes: no release
	rec.kill("noetl-cmdbus-writer-5")
	waitValid(b, "the standby") // it takes over once the Lease has expired and stayed unchanged for a lease
	run(time.Second)
	stopB() // the last writer crashes
	rec.kill("noetl-cmdbus-writer-5-standby")
	run(forDur + time.Second)
	st := rec.storage()
	until := rec.elapsed()

	values := ruleValues(map[string]any{"alerts": map[string]any{"noValidToken": map[string]any{"for": "2s"}}})
	alerts := renderedAlerts(t, values)

	// The alert, evaluated as Prometheus would every scrape interval.
	got, err := firingStep(st, alerts["EhdbElectionShardNoValidToken"], scrape, until)
	if err != nil {
		t.Fatal(err)
	}
	// The oracle: at each evaluation, is there a writer of the shard whose latest token_valid
	// sample (not a stale marker) is 1? Firing once that has been false for `for`.
	var since time.Duration = -1
	var sawStandby, sawTakeover, sawFiring bool
	var longestGap time.Duration // without a valid writer, before the last crash
	holders := map[string]bool{}
	for at := time.Duration(0); at <= until; at += scrape {
		valid, present := 0, 0
		for _, s := range st.series {
			if s.Labels().Get(labels.MetricName) != "ehdb_election_token_valid" {
				continue
			}
			if v, ok := latest(s, at); ok {
				present++
				if v == 1 {
					valid++
					holders[s.Labels().Get("pod")] = true
				}
			}
		}
		sawStandby = sawStandby || (valid == 1 && present == 2)
		sawTakeover = sawTakeover || len(holders) == 2
		want := false
		if valid == 0 && at > 0 {
			if since < 0 {
				since = at
			}
			want = at-since >= forDur
			if present > 0 && at-since > longestGap {
				longestGap = at - since
			}
		} else {
			since = -1
		}
		fired := len(got[at]) > 0
		if fired {
			sawFiring = true
			if l := got[at][0]; l.Get("shard") != "5" || l.Get("lease") != "ehdb-shard-00000005" || l.Get("namespace") != "noetl" {
				t.Errorf("at %v the alert names %v; want shard 5, its lease and namespace", at, l)
			}
		}
		if fired != want && at > forDur { // before the first writer is valid the oracle has no shard yet
			t.Errorf("at %v: alert firing %v; the recording says %v (valid writers %d of %d)", at, fired, want, valid, present)
		}
	}
	t.Logf("recorded %d series over %v; longest time without a valid writer while one was running: %v", len(st.series), until, longestGap)
	if !sawStandby || !sawTakeover || !sawFiring {
		t.Errorf("the recording did not cover the scenario: hot standby %v, takeover %v, alert after the last crash %v", sawStandby, sawTakeover, sawFiring)
	}

	// Two acquisitions, epochs 1 then 2: neither flapping (more than 3) nor backwards.
	for _, n := range []string{"EhdbElectionShardFlapping", "EhdbElectionShardEpochWentBackwards"} {
		got, err := firingStep(st, alerts[n], time.Second, until) // coarser: their subqueries span 10 m and 1 h
		if err != nil {
			t.Fatal(err)
		}
		for at, ls := range got {
			if len(ls) > 0 {
				t.Errorf("%s fired at %v: %v", n, at, ls)
				break
			}
		}
	}
}

// latest is the value of s's last sample at or before at, unless that is a stale marker or older
// than Prometheus's 5 m lookback.
func latest(s *storage.SeriesEntry, at time.Duration) (float64, bool) {
	it := s.Iterator(nil)
	var v float64
	var ts int64 = -1
	for it.Next() != 0 {
		t, f := it.At()
		if t > at.Milliseconds() {
			break
		}
		ts, v = t, f
	}
	if ts < 0 || value.IsStaleNaN(v) || at.Milliseconds()-ts > (5*time.Minute).Milliseconds() {
		return 0, false
	}
	return v, true
}

// scrapeRecorder scrapes registries as Prometheus would: every interval, each live writer's series with
// the target labels added.
type scrapeRecorder struct {
	interval time.Duration
	start    time.Time
	next     time.Duration
	writers  map[string]prometheus.Gatherer
	dead     map[string]bool
	series   map[string]*recSeries
	hasInfo  bool
}

type recSeries struct {
	lbls    labels.Labels
	pod     string
	samples []chunks.Sample
}

func newScrapeRecorder(interval time.Duration) *scrapeRecorder {
	return &scrapeRecorder{interval: interval, start: time.Now(), writers: map[string]prometheus.Gatherer{}, dead: map[string]bool{}, series: map[string]*recSeries{}}
}

func (r *scrapeRecorder) add(pod string, g prometheus.Gatherer) { r.writers[pod] = g }

func (r *scrapeRecorder) elapsed() time.Duration { return r.next - r.interval }

// kill marks a writer dead: its next scrape fails, and Prometheus writes a stale marker for each
// of its series.
func (r *scrapeRecorder) kill(pod string) {
	r.dead[pod] = true
}

// tick takes every scrape that is due.
func (r *scrapeRecorder) tick() {
	for time.Since(r.start) >= r.next {
		at := r.next.Milliseconds()
		pods := make([]string, 0, len(r.writers))
		for p := range r.writers {
			pods = append(pods, p)
		}
		sort.Strings(pods)
		for _, pod := range pods {
			if r.dead[pod] {
				for _, s := range r.series {
					if s.pod == pod && (len(s.samples) == 0 || !value.IsStaleNaN(s.samples[len(s.samples)-1].F())) {
						s.samples = append(s.samples, fsample{t: at, f: math.Float64frombits(value.StaleNaN)})
					}
				}
				continue
			}
			r.scrape(pod, at)
		}
		r.next += r.interval
	}
}

func (r *scrapeRecorder) scrape(pod string, at int64) {
	mfs, err := r.writers[pod].Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ehdb_election_") {
			continue
		}
		if mf.GetName() == "ehdb_election_info" {
			r.hasInfo = true
		}
		for _, m := range mf.GetMetric() {
			b := labels.NewBuilder(labels.FromStrings(labels.MetricName, mf.GetName(),
				"job", "noetl-cmdbus-writer", "instance", pod+".noetl-cmdbus-writer-headless:9090", "namespace", "noetl", "pod", pod))
			for _, lp := range m.GetLabel() {
				name := lp.GetName()
				if name == "namespace" || name == "job" || name == "instance" || name == "pod" {
					name = "exported_" + name // honor_labels: false
				}
				b.Set(name, lp.GetValue())
			}
			var v float64
			switch {
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			default:
				continue
			}
			l := b.Labels()
			s, ok := r.series[l.String()]
			if !ok {
				s = &recSeries{lbls: l, pod: pod}
				r.series[l.String()] = s
			}
			s.samples = append(s.samples, fsample{t: at, f: v})
		}
	}
}

func (r *scrapeRecorder) storage() *memStorage {
	st := &memStorage{}
	for _, s := range r.series {
		st.series = append(st.series, storage.NewListSeries(s.lbls, s.samples))
	}
	sort.Slice(st.series, func(i, j int) bool { return labels.Compare(st.series[i].Labels(), st.series[j].Labels()) < 0 })
	return st
}
