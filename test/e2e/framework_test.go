package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/noetl/ehdb-election/internal/harness"
)

var builtBinaries struct {
	once sync.Once
	dir  string
	err  error
}

// binaries builds ehdb-writer and the webhook once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	builtBinaries.once.Do(func() { builtBinaries.dir, builtBinaries.err = harness.Build() })
	if builtBinaries.err != nil {
		t.Fatal(builtBinaries.err)
	}
	return builtBinaries.dir
}

// writer is a harness writer bound to a test: failures fail the test, and it is killed (and its
// log shown, if the test failed) when the test ends.
type writer struct {
	*harness.Writer
	t *testing.T
}

func startWriter(t *testing.T, s harness.WriterSpec) *writer {
	t.Helper()
	s.Bin = binaries(t) + "/ehdb-writer"
	hw, err := harness.StartWriter(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hw.Signal(syscall.SIGCONT)
		hw.Kill()
		if t.Failed() {
			data, _ := os.ReadFile(hw.LogPath)
			t.Logf("--- log of writer %s (pid %d) ---\n%s", hw.Name, hw.Pid(), tail(string(data), 40))
		}
	})
	return &writer{Writer: hw, t: t}
}

func (w *writer) stop() {
	w.t.Helper()
	if err := w.Stop(20 * time.Second); err != nil {
		w.t.Error(err)
	}
}

// waitValid waits until exactly one of ws reports a valid token, and returns it with its epoch.
func waitValid(t *testing.T, timeout time.Duration, ws ...*writer) (*writer, uint64) {
	t.Helper()
	var holder *writer
	var epoch uint64
	eventually(t, timeout, "one writer holds a valid token", func() error {
		holder = nil
		for _, w := range ws {
			if w.Exited() {
				continue
			}
			tok, err := w.Token()
			if err != nil {
				return err
			}
			if tok.Valid {
				// Two scrapes are two instants: a handover between them can make both look
				// valid. The intervals safety checker judges overlap exactly; here, look again.
				if holder != nil {
					return fmt.Errorf("%s and %s both report token_valid=1 across two scrapes", holder.Name, w.Name)
				}
				holder, epoch = w, tok.Epoch
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
