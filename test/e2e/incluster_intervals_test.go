package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// logEvidence follows the logs of the writer Pods, where each writer (--intervals-file=-) prints
// its record among its log lines: the store for clusters whose nodes' files the harness cannot
// read. It finds containers by listing the Pods every 500 ms and asks for each one's log by Pod and
// container name, which the kubelet resolves to the container current at that moment; a
// container that started and was replaced between two looks, or whose Pod was gone, is missed.
// Its process then has no record here, which the checker reports as a harness error.
type logEvidence struct {
	s         *icSystem
	stopLooks context.CancelFunc
	cancel    context.CancelFunc // the streams
	done      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once

	mu        sync.Mutex
	recs      records
	followed  map[string]bool // container IDs
	streamErr []string
}

func (s *icSystem) followLogs() *logEvidence {
	ctx, cancel := context.WithCancel(context.Background())
	looks, stopLooks := context.WithCancel(ctx)
	l := &logEvidence{s: s, stopLooks: stopLooks, cancel: cancel, done: make(chan struct{}), recs: newRecords(), followed: map[string]bool{}}
	go func() {
		defer close(l.done)
		for {
			l.look(ctx)
			select {
			case <-looks.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	s.t.Cleanup(l.stop)
	return l
}

func (l *logEvidence) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("the logs of %d writer containers (stream errors: %v)", len(l.followed), l.streamErr)
}

func (l *logEvidence) writerSpec(spec *corev1.PodSpec) {
	spec.Containers[0].Args = []string{"--intervals-file=-"}
}

// look starts following every writer container not followed yet.
func (l *logEvidence) look(ctx context.Context) {
	pods, err := l.s.cs.CoreV1().Pods(l.s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, writerName+"-") {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.ContainerID == "" || (c.State.Running == nil && c.State.Terminated == nil) {
				continue
			}
			l.mu.Lock()
			seen := l.followed[c.ContainerID]
			l.followed[c.ContainerID] = true
			l.mu.Unlock()
			if !seen {
				l.wg.Add(1)
				go l.follow(ctx, p.Name, c.Name, c.ContainerID)
			}
		}
	}
}

func (l *logEvidence) follow(ctx context.Context, pod, container, id string) {
	defer l.wg.Done()
	rc, err := l.s.cs.CoreV1().Pods(l.s.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		l.mu.Lock()
		l.streamErr = append(l.streamErr, pod+" ("+id+"): "+err.Error())
		l.mu.Unlock()
		return
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		l.mu.Lock()
		_ = l.recs.add(sc.Bytes(), false)
		l.mu.Unlock()
	}
}

// stop waits a while for the followed containers to end (their streams close), then cuts the rest.
func (l *logEvidence) stop() {
	l.once.Do(func() {
		l.stopLooks()
		all := make(chan struct{})
		go func() { <-l.done; l.wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
		}
		l.cancel()
		<-all
	})
}

func (l *logEvidence) collect() (records, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := newRecords()
	for k, v := range l.recs.started {
		out.started[k] = v
	}
	for k, v := range l.recs.last {
		out.last[k] = v
	}
	return out, nil
}

// writerProcesses finds the processes of this namespace's writer Pod by their environment, when
// the node's processes are visible from here (the local node of `make e2e-node`, as root); none on
// kind, whose node is a container.
func (s *icSystem) writerProcesses(pod string) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(cmdline, []byte("/ehdb-writer\x00")) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		vars := bytes.Split(environ, []byte{0})
		if slices.ContainsFunc(vars, func(v []byte) bool { return string(v) == "POD_NAMESPACE="+s.ns }) &&
			slices.ContainsFunc(vars, func(v []byte) bool { return string(v) == "POD_NAME="+pod }) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkKilled SIGKILLs the holder's process on the node (a crash: no release), and checks that the
// kubelet's restart of the container — a new process in the same Pod — takes over only with a new
// identity and a higher epoch. It returns false, changing nothing, when the node's processes
// cannot be reached from here.
func (s *icSystem) checkKilled(prev holder) (holder, bool) {
	t := s.t
	pids := s.writerProcesses(prev.pod)
	if len(pids) != 1 {
		t.Logf("the writer's process is not reachable from here (%d candidates): no kill on this cluster", len(pids))
		return prev, false
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Logf("SIGKILL of the writer's process %d: %v: no kill on this cluster", pids[0], err)
		return prev, false
	}
	killed := time.Now()
	var next holder
	eventually(t, 3*time.Minute, "a new process of "+prev.pod+" holds the Lease", func() error {
		next = s.waitHolder(time.Minute, "")
		if next.identity == prev.identity {
			return fmt.Errorf("still the killed process's identity %s", prev.identity)
		}
		return nil
	})
	if next.epoch <= prev.epoch {
		t.Fatalf("after SIGKILL the restarted process holds epoch %d, want above %d", next.epoch, prev.epoch)
	}
	t.Logf("SIGKILL of pid %d: the restarted container's process %s acquired epoch %d, %s after the kill (no release: it waited out the lease)",
		pids[0], next.identity, next.epoch, time.Since(killed).Round(time.Millisecond))
	return next, true
}
