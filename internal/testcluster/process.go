package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/noetl/ehdb-election/internal/repo"
)

// process is one control-plane component run from a cached binary, its output in a log file.
// Each runs in its own process group and dies with the test process (Pdeathsig), so an aborted
// test run cannot leave an API server behind.
type process struct {
	name    string
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

func (p *process) start() error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s (%s): %w", p.name, p.bin, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return nil
}

func (p *process) exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, and SIGKILL if it has not gone within grace.
func (p *process) stop(grace time.Duration) error {
	if p.cmd == nil || p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
		}
	}
	return nil
}

// logTail returns the last lines of the component's log, for error messages.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// binDir finds the control plane binaries: $EHDB_CONTROLPLANE_BIN, else the cache folder that
// `make controlplane` fills (.cache/controlplane/current under the module root).
func binDir() (string, error) {
	if d := os.Getenv("EHDB_CONTROLPLANE_BIN"); d != "" {
		return d, checkBins(d)
	}
	d, err := repo.Path(".cache", "controlplane", "current")
	if err != nil {
		return "", err
	}
	return d, checkBins(d)
}

func checkBins(dir string) error {
	var missing []error
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, fmt.Errorf("%s not found in %s", b, dir))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("control plane binaries missing (run `make controlplane`): %w", errors.Join(missing...))
	}
	return nil
}
