// Command bench is `make bench`: it measures, in one run on this machine, the election's and the
// webhook's micro-benchmarks, failover on the local control plane for ehdb-election and for
// client-go's tools/leaderelection side by side, how the cost of 100 to 1,000 shard elections
// against one API server grows (`-only scale -scale-points …` runs that curve alone), and the
// webhook's admission latency against a no-op webhook, and prints a Markdown report (also written
// to <out>/report-<timestamp>.md and <out>/latest.md). It reports numbers; it asserts none.
//
// Everything runs on loopback, and everything it starts is stopped however the run ends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/noetl/ehdb-election/internal/repo"
)

// options are the run's sizes. The defaults are the full run; -quick shrinks every one of them.
type options struct {
	out   string
	quick bool
	only  []string // sections to run; empty: all

	benchtime   string        // go test -benchtime ("" = go's default)
	trials      int           // failover trials per scenario and implementation
	steady      time.Duration // failover steady-state window
	stagger     time.Duration // between the signals of successive failover trials
	scalePoints []int         // elections at each point of the scale curve
	scaleWindow time.Duration // steady-state window of each point
	scaleStall  time.Duration // stop the scale driver this long in each window (validates the miss detector)
	idleWindow  time.Duration // kube-apiserver at rest, for comparison
	requests    int           // admission requests per configuration
	concurrency int
	warmup      int // warm-up requests per configuration
	rounds      int // the admission requests are sent in this many rounds through all configurations
}

// sections: "budget" is the admission section's worst-review part alone.
var sections = []string{"micro", "admission", "budget", "failover", "scale"}

func defaultOptions(quick bool) options {
	if quick {
		return options{quick: true, benchtime: "100ms", trials: 5, steady: 10 * time.Second, stagger: 250 * time.Millisecond,
			scalePoints: []int{50, 100}, scaleWindow: 10 * time.Second, idleWindow: 3 * time.Second, requests: 200, concurrency: 8, warmup: 50, rounds: 2}
	}
	return options{trials: 20, steady: 20 * time.Second, stagger: 250 * time.Millisecond,
		scalePoints: []int{100, 250, 500, 1000}, scaleWindow: 30 * time.Second, idleWindow: 10 * time.Second, requests: 1000, concurrency: 8, warmup: 250, rounds: 5}
}

func (o options) runs(section string) bool {
	return len(o.only) == 0 || slices.Contains(o.only, section)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == candidateFlag {
		os.Exit(runCandidate(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == scaleDriverFlag {
		os.Exit(runScaleDriver(os.Args[2:]))
	}
	out := flag.String("out", ".cache/bench", "folder for the reports and this run's logs (relative: to the repository root)")
	quick := flag.Bool("quick", false, "a fast sanity run: fewer trials, fewer elections, shorter windows")
	only := flag.String("only", "", "run only these sections, comma-separated: "+strings.Join(sections, ","))
	points := flag.String("scale-points", "", "the scale section's points, elections each, comma-separated (default 100,250,500,1000; -quick 50,100)")
	window := flag.Duration("scale-window", 0, "the scale section's steady-state window per point (default 30s; -quick 10s)")
	stall := flag.Duration("scale-stall", 0, "stop the scale driver process (SIGSTOP) this long in each window: every election must show a miss")
	flag.Parse()
	opts := defaultOptions(*quick)
	if *points != "" {
		opts.scalePoints = nil
		for _, s := range strings.Split(*points, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "bench: -scale-points: %q is not a number of elections\n", s)
				os.Exit(2)
			}
			opts.scalePoints = append(opts.scalePoints, n)
		}
	}
	if *window > 0 {
		opts.scaleWindow = *window
	}
	opts.scaleStall = *stall
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			if !slices.Contains(sections, s) {
				fmt.Fprintf(os.Stderr, "bench: unknown section %q (want some of %s)\n", s, strings.Join(sections, ","))
				os.Exit(2)
			}
			opts.only = append(opts.only, s)
		}
	}
	opts.out = *out
	// controller-runtime's webhook server logs through its global logger; the bench has no use for it.
	ctrllog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts options, stdout io.Writer) (err error) {
	began := time.Now()
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(opts.out) {
		opts.out = filepath.Join(root, opts.out)
	}
	m := readMachine()
	stamp := m.Date.Format("20060102-150405")
	b := &bench{opts: opts, dir: filepath.Join(opts.out, "run-"+stamp), progress: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	defer b.cleanup()
	rep := &report{Opts: opts}

	if opts.runs("micro") {
		b.step("micro-benchmarks")
		rep.Micro = measureMicro(ctx, root, opts.benchtime)
	}
	if opts.runs("admission") || opts.runs("budget") || opts.runs("failover") || opts.runs("scale") {
		if err := b.startCluster(ctx, &m); err != nil {
			return fmt.Errorf("setting up the local control plane (logs in %s): %w", b.dir, err)
		}
	}
	if (opts.runs("admission") || opts.runs("budget")) && ctx.Err() == nil {
		r, err := b.measureAdmission(ctx)
		rep.Admission, rep.AdmissionErr = &r, err
	}
	if opts.runs("failover") {
		for _, c := range []contender{b.ours(), b.clientGo()} {
			if ctx.Err() != nil {
				break
			}
			r, err := b.measureFailover(ctx, c)
			if err != nil {
				rep.FailoverErrs = append(rep.FailoverErrs, fmt.Errorf("%s: %w", c.Name, err))
				continue
			}
			rep.Failover = append(rep.Failover, r)
		}
	}
	if opts.runs("scale") && ctx.Err() == nil {
		r, err := b.measureScale(ctx)
		rep.Scale, rep.ScaleErr = &r, err
	}
	b.cleanup()

	m.LoadEnd = loadAverage()
	rep.Machine, rep.Took = m, time.Since(began)
	text := render(rep)
	fmt.Fprint(stdout, text)
	file := filepath.Join(opts.out, "report-"+stamp+".md")
	if err := errors.Join(
		os.WriteFile(file, []byte(text), 0o644),
		os.WriteFile(filepath.Join(opts.out, "latest.md"), []byte(text), 0o644),
	); err != nil {
		return err
	}
	b.step("report written to %s (logs of this run in %s)", file, b.dir)
	return ctx.Err()
}
