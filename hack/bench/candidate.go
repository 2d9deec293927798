package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// candidateFlag, as the first argument, turns the bench binary into one client-go leader-election
// candidate. Each comparison candidate is a process of its own so that a crash is what it is for
// ehdb-writer: a SIGKILL, with no release and no goroutine left renewing.
const candidateFlag = "-clientgo-candidate"

// client-go's timings as kube-controller-manager and kube-scheduler default them.
const (
	clientGoLease = 15 * time.Second
	clientGoRenew = 10 * time.Second // RenewDeadline
	clientGoRetry = 2 * time.Second  // RetryPeriod: how often candidates try and the holder renews
)

// acquisitionLine is the part of an intervals-file line the failover trials read; the client-go
// candidate writes the same shape, so both contenders are measured by one parser.
type acquisitionLine struct {
	Identity string    `json:"identity"`
	From     time.Time `json:"from"`
}

// runCandidate is a client-go leader-election candidate over a LeaseLock with the default timings
// and ReleaseOnCancel: SIGTERM releases the Lease, as ehdb-writer's does. Each time it starts leading
// it appends {"identity","from"} to the acquisitions file, from = when OnStartedLeading ran.
func runCandidate(args []string) int {
	fs := flag.NewFlagSet(candidateFlag, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the candidate's ServiceAccount")
	ns := fs.String("namespace", "", "namespace of the Lease")
	lease := fs.String("lease", "", "Lease name")
	identity := fs.String("identity", "", "holder identity")
	out := fs.String("acquisitions", "", "append one JSON line per acquisition to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *lease, Namespace: *ns},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   clientGoLease,
		RenewDeadline:   clientGoRenew,
		RetryPeriod:     clientGoRetry,
		ReleaseOnCancel: true,
		Name:            *lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				line, _ := json.Marshal(acquisitionLine{Identity: *identity, From: time.Now()})
				if _, err := f.Write(append(line, '\n')); err != nil {
					fmt.Fprintln(os.Stderr, "writing the acquisitions file:", err)
				}
			},
			OnStoppedLeading: func() {},
		},
	})
	return 0
}

// proc is a child process of the bench (a client-go candidate), killed if the bench dies.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(bin string, args []string, logPath string) (*proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.done) }()
	return p, nil
}

// Signal sends sig unless the process has exited.
func (p *proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
