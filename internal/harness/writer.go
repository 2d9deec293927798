package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// WriterSpec is one ehdb-writer process's setting.
type WriterSpec struct {
	Bin        string // the ehdb-writer binary
	Hostname   string // its HOSTNAME: a StatefulSet pod name, whose ordinal is the shard
	Namespace  string // where its Lease lives
	Kubeconfig string // authenticates as the writer's ServiceAccount
	LeaseSecs  int
	RenewSecs  int
	Dir        string   // its log and the shard's intervals file go here
	ExtraEnv   []string // KEY=VALUE
	// ClockOffset and ClockRate run the writer's election on a skewed clock (ehdb-writer's
	// --clock-offset/--clock-rate): a node whose clock is off and ticks at its own pace. The
	// intervals file still states real instants. Zero values mean the machine's clock.
	ClockOffset time.Duration
	ClockRate   float64
}

// Writer is a running ehdb-writer.
type Writer struct {
	Name       string
	Identity   string // the holder identity it writes into the Lease, as its start-up log states it
	MetricsURL string
	Intervals  string // the JSON-lines validity intervals file (shared by one pod name's writers)
	LogPath    string
	cmd        *exec.Cmd
	done       chan struct{}
}

// StartWriter starts the writer and waits until it serves /metrics.
func StartWriter(s WriterSpec) (*Writer, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp(s.Dir, s.Hostname+"-*.log")
	if err != nil {
		return nil, err
	}
	w := &Writer{
		Name:       s.Hostname,
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
		Intervals:  filepath.Join(s.Dir, "intervals-"+s.Hostname+".jsonl"),
		LogPath:    logFile.Name(),
		done:       make(chan struct{}),
	}
	args := []string{
		"--kubeconfig=" + s.Kubeconfig,
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", port),
		"--intervals-file=" + w.Intervals,
	}
	if s.ClockOffset != 0 {
		args = append(args, "--clock-offset="+s.ClockOffset.String())
	}
	if s.ClockRate != 0 && s.ClockRate != 1 {
		args = append(args, "--clock-rate="+strconv.FormatFloat(s.ClockRate, 'g', -1, 64))
	}
	w.cmd = exec.Command(s.Bin, args...)
	w.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOSTNAME=" + s.Hostname,
		"NOETL_EHDB_ELECTION=true",
		"NOETL_EHDB_ELECTION_LEASE_SECS=" + strconv.Itoa(s.LeaseSecs),
		"NOETL_EHDB_ELECTION_RENEW_SECS=" + strconv.Itoa(s.RenewSecs),
		"NOETL_EHDB_ELECTION_NAMESPACE=" + s.Namespace,
	}, s.ExtraEnv...)
	w.cmd.Stdout, w.cmd.Stderr = logFile, logFile
	// The writer dies with whoever started it: a test or demo that is killed leaves no writer.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting writer %s: %w", s.Hostname, err)
	}
	go func() {
		_ = w.cmd.Wait()
		logFile.Close()
		close(w.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := w.Scrape()
		if err == nil {
			// The start-up line is written as /metrics starts serving, not necessarily before.
			if w.Identity, err = startupIdentity(w.LogPath); err == nil {
				return w, nil
			}
		}
		if w.Exited() || time.Now().After(deadline) {
			w.Kill()
			return nil, fmt.Errorf("writer %s never served /metrics: %w (log %s)", s.Hostname, err, w.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the writer's process id.
func (w *Writer) Pid() int { return w.cmd.Process.Pid }

// Signal sends sig unless the writer has exited.
func (w *Writer) Signal(sig syscall.Signal) {
	if !w.Exited() {
		_ = w.cmd.Process.Signal(sig)
	}
}

// Exited reports whether the process has ended.
func (w *Writer) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM (the kubelet's way: the writer releases its Lease) and waits for a clean exit.
func (w *Writer) Stop(timeout time.Duration) error {
	w.Signal(syscall.SIGCONT)
	w.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.Kill()
		return fmt.Errorf("writer %s did not exit within %s of SIGTERM", w.Name, timeout)
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("writer %s exited with code %d after SIGTERM", w.Name, code)
	}
	return nil
}

// Kill sends SIGKILL, a crash with no release, and waits for the process to end.
func (w *Writer) Kill() {
	w.Signal(syscall.SIGKILL)
	<-w.done
}

// Scrape reads the writer's /metrics.
func (w *Writer) Scrape() (Metrics, error) { return Scrape(w.MetricsURL) }

// Token is a writer's claim as its scrape states it.
type Token struct {
	Valid bool
	Holds bool
	Epoch uint64
}

// Token scrapes the writer and reads its claim.
func (w *Writer) Token() (Token, error) {
	m, err := w.Scrape()
	if err != nil {
		return Token{}, err
	}
	var errs []error
	read := func(k string) float64 {
		v, err := m.Value(k)
		errs = append(errs, err)
		return v
	}
	tok := Token{
		Valid: read("ehdb_election_token_valid") == 1,
		Holds: read("ehdb_election_holds_lease") == 1,
		Epoch: uint64(read("ehdb_election_epoch")),
	}
	return tok, errors.Join(errs...)
}

// startupIdentity reads the identity from the writer's "ehdb-writer started" log line.
func startupIdentity(logPath string) (string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			Identity string `json:"identity"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ehdb-writer started" && line.Identity != "" {
			return line.Identity, nil
		}
	}
	return "", fmt.Errorf("the writer's log %s states no identity", logPath)
}
