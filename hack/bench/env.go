package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

// The deployment the measurements run against: the chart installed as an operator would, the
// writers in its namespace as its writer ServiceAccount, with the production default timings.
const (
	namespace = "noetl"
	release   = "ehdb-election"
	writerSA  = "noetl-cmdbus-writer" // the chart's default writer ServiceAccount
	stsName   = "noetl-cmdbus-writer" // SPEC.md "Reference deployment"
	leaseSecs = 15                    // election's defaults: lease 15 s, renew lease/3
	renewSecs = 5
)

// bench is the run's shared state, and everything it started, so that cleanup undoes all of it
// whichever way the run ends.
type bench struct {
	opts     options
	dir      string // this run's logs and scratch files
	progress *slog.Logger

	bins             string // where build puts the binaries
	cluster          *testcluster.Cluster
	cs               kubernetes.Interface
	writerKubeconfig string // authenticates as the chart's writer ServiceAccount

	cleanups []func()
}

// onCleanup registers f to run at the end of the run, in reverse order of registration.
func (b *bench) onCleanup(f func()) { b.cleanups = append(b.cleanups, f) }

func (b *bench) cleanup() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.cleanups = nil
}

func (b *bench) step(format string, a ...any) { b.progress.Info(fmt.Sprintf(format, a...)) }

// startCluster builds the binaries, starts the local control plane and installs the chart.
func (b *bench) startCluster(ctx context.Context, m *machine) error {
	if _, err := b.build("ehdb-writer"); err != nil {
		return err
	}
	b.step("starting the local control plane")
	c, err := testcluster.Start(ctx, testcluster.Options{})
	if err != nil {
		return err
	}
	b.onCleanup(func() {
		if err := c.Stop(); err != nil {
			b.progress.Error("stopping the control plane", "error", err)
		}
	})
	b.cluster, b.cs = c, c.Clientset()
	if v, err := b.cs.Discovery().ServerVersion(); err == nil {
		m.Kubernetes = v.GitVersion
	}
	b.step("helm install %s charts/ehdb-election -n %s", release, namespace)
	chartDir, err := chartinstall.ChartDir()
	if err != nil {
		return err
	}
	helm, err := chartinstall.New(c.Kubeconfig, namespace, chartDir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	if _, err := helm.Install(ctx, release, nil); err != nil {
		return err
	}
	b.writerKubeconfig = filepath.Join(b.dir, "writer.kubeconfig")
	return c.ServiceAccountKubeconfig(ctx, namespace, writerSA, b.writerKubeconfig)
}

// build compiles ./cmd/<name> into .cache/bin and returns the binary's path. One command at a
// time, so that a command that does not build costs only the measurements that need it.
func (b *bench) build(name string) (string, error) {
	b.step("building %s", name)
	dir, err := harness.Build(name)
	if err != nil {
		return "", err
	}
	b.bins = dir
	return filepath.Join(dir, name), nil
}

// startWriter runs one ehdb-writer as the chart's writer ServiceAccount; the cleanup kills it.
func (b *bench) startWriter(hostname string) (*harness.Writer, error) {
	w, err := harness.StartWriter(harness.WriterSpec{
		Bin: filepath.Join(b.bins, "ehdb-writer"), Hostname: hostname, Namespace: namespace,
		Kubeconfig: b.writerKubeconfig, LeaseSecs: leaseSecs, RenewSecs: renewSecs, Dir: b.dir,
	})
	if err != nil {
		return nil, err
	}
	b.onCleanup(w.Kill)
	return w, nil
}

// waitHolder waits until the Lease exists with a holder and returns the holder's identity.
func (b *bench) waitHolder(ctx context.Context, lease string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l, err := b.cs.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return *l.Spec.HolderIdentity, nil
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(fmt.Errorf("lease %s has no holder after %s (logs in %s)", lease, timeout, b.dir), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
