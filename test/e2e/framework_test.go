package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/noetl/ehdb-election/internal/repo"
)

// The system suite runs the project's real binaries as host processes against the test cluster:
// writers authenticate with their ServiceAccount's token, the webhook with its own, so RBAC,
// admission and the election are exercised exactly as in a cluster, minus the kubelet.

var builtBinaries struct {
	once sync.Once
	dir  string
	err  error
}

// binaries builds ehdb-writer and the webhook once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	builtBinaries.once.Do(func() {
		root, err := repo.Root()
		if err != nil {
			builtBinaries.err = err
			return
		}
		dir, err := os.MkdirTemp("", "ehdb-e2e-bin-")
		if err != nil {
			builtBinaries.err = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/ehdb-writer", "./cmd/webhook")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			builtBinaries.err = fmt.Errorf("building binaries: %v\n%s", err, out)
			return
		}
		builtBinaries.dir = dir
	})
	if builtBinaries.err != nil {
		t.Fatal(builtBinaries.err)
	}
	return builtBinaries.dir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writer is one ehdb-writer process on the host.
type writer struct {
	t         *testing.T
	name      string // its HOSTNAME: the StatefulSet pod name, which gives the shard
	cmd       *exec.Cmd
	metrics   string // http://127.0.0.1:port/metrics
	intervals string
	logPath   string
	done      chan struct{}
}

type writerSpec struct {
	hostname   string // e.g. noetl-cmdbus-writer-0
	namespace  string
	kubeconfig string
	leaseSecs  int
	renewSecs  int
	dir        string // where the intervals file and the log go (shared by the scenario's writers)
	extraEnv   []string
}

func startWriter(t *testing.T, s writerSpec) *writer {
	t.Helper()
	bin := filepath.Join(binaries(t), "ehdb-writer")
	port := freePort(t)
	w := &writer{
		t:         t,
		name:      s.hostname,
		metrics:   fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
		intervals: filepath.Join(s.dir, "intervals-"+s.hostname+".jsonl"),
		done:      make(chan struct{}),
	}
	logFile, err := os.CreateTemp(s.dir, s.hostname+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	w.logPath = logFile.Name()
	cmd := exec.Command(bin,
		"--kubeconfig="+s.kubeconfig,
		"--metrics-addr="+fmt.Sprintf("127.0.0.1:%d", port),
		"--intervals-file="+w.intervals,
	)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOSTNAME=" + s.hostname,
		"NOETL_EHDB_ELECTION=true",
		"NOETL_EHDB_ELECTION_LEASE_SECS=" + strconv.Itoa(s.leaseSecs),
		"NOETL_EHDB_ELECTION_RENEW_SECS=" + strconv.Itoa(s.renewSecs),
		"NOETL_EHDB_ELECTION_NAMESPACE=" + s.namespace,
	}, s.extraEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting writer %s: %v", s.hostname, err)
	}
	w.cmd = cmd
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.signal(syscall.SIGCONT)
		w.signal(syscall.SIGKILL)
		<-w.done
		if t.Failed() {
			data, _ := os.ReadFile(w.logPath)
			t.Logf("--- log of writer %s (pid %d) ---\n%s", w.name, cmd.Process.Pid, tail(string(data), 40))
		}
	})
	eventually(t, 20*time.Second, "writer "+s.hostname+" serves /metrics", func() error {
		_, err := w.scrape()
		return err
	})
	return w
}

func (w *writer) signal(sig syscall.Signal) {
	if w.exited() {
		return
	}
	_ = w.cmd.Process.Signal(sig)
}

func (w *writer) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM (the kubelet's way) and waits for a clean exit.
func (w *writer) stop() {
	w.t.Helper()
	w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		w.t.Fatalf("writer %s did not exit within 20s of SIGTERM", w.name)
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		w.t.Errorf("writer %s exited with code %d after SIGTERM", w.name, code)
	}
}

// kill sends SIGKILL: a crash, no release.
func (w *writer) kill() {
	w.signal(syscall.SIGKILL)
	<-w.done
}

// metricsSnapshot is one scrape, with series keyed like `name` or `name{label="value"}`.
type metricsSnapshot map[string]float64

func (m metricsSnapshot) get(key string) float64 {
	v, ok := m[key]
	if !ok {
		panic(fmt.Sprintf("series %s missing from the scrape", key))
	}
	return v
}

func (w *writer) scrape() (metricsSnapshot, error) {
	return scrapeURL(w.metrics)
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

func scrapeURL(url string) (metricsSnapshot, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	out := metricsSnapshot{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := name
			if len(m.GetLabel()) > 0 {
				var parts []string
				for _, l := range m.GetLabel() {
					parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] = metricValue(m)
		}
	}
	return out, nil
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// token is the writer's claim as its scrape states it.
type token struct {
	valid bool
	epoch uint64
	holds bool
}

func (w *writer) token() (token, error) {
	m, err := w.scrape()
	if err != nil {
		return token{}, err
	}
	return token{
		valid: m.get("ehdb_election_token_valid") == 1,
		epoch: uint64(m.get("ehdb_election_epoch")),
		holds: m.get("ehdb_election_holds_lease") == 1,
	}, nil
}

// waitValid waits until exactly one of ws reports a valid token, and returns it with its epoch.
func waitValid(t *testing.T, timeout time.Duration, ws ...*writer) (*writer, uint64) {
	t.Helper()
	var holder *writer
	var epoch uint64
	eventually(t, timeout, "one writer holds a valid token", func() error {
		holder = nil
		for _, w := range ws {
			if w.exited() {
				continue
			}
			tok, err := w.token()
			if err != nil {
				return err
			}
			if tok.valid {
				// Two scrapes are two instants: a handover between them can make both look
				// valid. The intervals safety checker judges overlap exactly; here, look again.
				if holder != nil {
					return fmt.Errorf("%s and %s both report token_valid=1 across two scrapes", holder.name, w.name)
				}
				holder, epoch = w, tok.epoch
			}
		}
		if holder == nil {
			return fmt.Errorf("no writer reports token_valid=1")
		}
		return nil
	})
	return holder, epoch
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// interval is one writer's validity of one epoch, as its intervals file states it.
type interval struct {
	Identity string    `json:"identity"`
	Epoch    uint64    `json:"epoch"`
	From     time.Time `json:"from"`
	Until    time.Time `json:"until"`
}

// checkSafety is the suite's safety checker for one shard's writers: no two validity intervals
// of different holders overlap, and epochs strictly increase from one holder to the next. Every
// process on this machine reads the same clock, so intervals from different writers compare.
func checkSafety(t *testing.T, files ...string) []interval {
	t.Helper()
	last := map[string]interval{} // identity#epoch -> last line
	for _, f := range files {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var iv interval
			if err := json.Unmarshal(sc.Bytes(), &iv); err != nil {
				t.Fatalf("safety checker: %s: bad line %q: %v", f, sc.Text(), err)
			}
			last[iv.Identity+"/"+strconv.FormatUint(iv.Epoch, 10)] = iv
		}
		fh.Close()
	}
	var ivs []interval
	for _, iv := range last {
		if iv.Until.After(iv.From) {
			ivs = append(ivs, iv)
		}
	}
	sortIntervals(ivs)
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		if cur.From.Before(prev.Until) {
			t.Errorf("SAFETY: overlap: %s epoch %d valid [%s, %s] and %s epoch %d valid from %s",
				prev.Identity, prev.Epoch, prev.From.Format(time.StampMicro), prev.Until.Format(time.StampMicro),
				cur.Identity, cur.Epoch, cur.From.Format(time.StampMicro))
		}
		if cur.Epoch <= prev.Epoch {
			t.Errorf("SAFETY: epoch did not increase: %s held %d, then %s held %d", prev.Identity, prev.Epoch, cur.Identity, cur.Epoch)
		}
	}
	return ivs
}

func sortIntervals(ivs []interval) {
	slices.SortFunc(ivs, func(a, b interval) int { return a.From.Compare(b.From) })
}
