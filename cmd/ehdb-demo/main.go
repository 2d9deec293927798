// Command ehdb-demo is `make demo`: on a fresh machine it starts the local control plane, installs
// the chart with the Helm SDK, runs the webhook and three writers (two for shard 0, one for
// shard 1) as host processes, and narrates the safe order an operator must follow: the guard
// refusing enforce, the election live, a crash of the shard-0 holder and its failover with a new
// epoch, and enforce admitted. It ends after DEMO_SECONDS (default 30) of the live view, or on
// Ctrl-C, and leaves nothing running.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/util/retry"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/harness"
	"github.com/noetl/ehdb-election/internal/repo"
	"github.com/noetl/ehdb-election/internal/testcluster"
	"github.com/noetl/ehdb-election/webhook/webhooktest"
)

const (
	namespace = webhooktest.Namespace
	release   = "ehdb-election"
	writerSA  = webhooktest.WriterSA
	stsName   = webhooktest.WriterName
	leaseSecs = 6
	renewSecs = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "demo failed: %v\n", err)
		os.Exit(1)
	}
}

// demo holds what the demo started, so teardown can undo all of it.
type demo struct {
	out     io.Writer
	dir     string
	bins    string
	cluster *testcluster.Cluster
	cs      kubernetes.Interface
	webhook *harness.Webhook
	writers []*harness.Writer
}

func (d *demo) say(format string, a ...any) { fmt.Fprintf(d.out, format+"\n", a...) }

func (d *demo) step(n int, format string, a ...any) {
	fmt.Fprintf(d.out, "\n== %d. %s\n", n, fmt.Sprintf(format, a...))
}

func run(ctx context.Context, out io.Writer) (err error) {
	linger := 30 * time.Second
	if v := os.Getenv("DEMO_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("DEMO_SECONDS=%q: want a whole number of seconds (0 = until Ctrl-C)", v)
		}
		linger = time.Duration(n) * time.Second
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	d := &demo{out: out, dir: filepath.Join(root, ".cache", "demo")}
	if err := os.RemoveAll(d.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.teardown()) }()

	d.step(1, "Building the writer, the webhook and the ehdb-election CLI")
	if d.bins, err = harness.Build(); err != nil {
		return err
	}
	d.step(2, "Starting the local control plane (etcd, kube-apiserver, kube-controller-manager on loopback)")
	start := time.Now()
	if d.cluster, err = testcluster.Start(ctx, testcluster.Options{}); err != nil {
		return err
	}
	d.cs = d.cluster.Clientset()
	kubeconfig := filepath.Join(d.dir, "admin.kubeconfig")
	if err := copyFile(d.cluster.Kubeconfig, kubeconfig); err != nil {
		return err
	}
	d.say("API server %s ready in %s; kubeconfig for kubectl: %s", d.cluster.Config.Host, time.Since(start).Round(100*time.Millisecond), kubeconfig)

	d.step(3, "helm install %s charts/ehdb-election -n %s (Helm SDK)", release, namespace)
	chartDir, err := chartinstall.ChartDir()
	if err != nil {
		return err
	}
	helm, err := chartinstall.New(d.cluster.Kubeconfig, namespace, chartDir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	rel, err := helm.Install(ctx, release, nil)
	if err != nil {
		return err
	}
	d.say("release %s, revision %d: %s", rel.Name, rel.Version, strings.TrimSpace(rel.Info.Description))
	d.say("the writer's ServiceAccount %s, the Role ehdb-shard-election (leases: get, list, watch, create, update) bound to it alone,", writerSA)
	d.say("the webhook's RBAC and configuration, and the lease guard policy are in place.")

	d.step(4, "Running the webhook as the chart's webhook ServiceAccount")
	if d.webhook, err = harness.StartWebhook(ctx, d.cluster, filepath.Join(d.bins, "webhook"), namespace, release, d.dir); err != nil {
		return err
	}
	d.say("serving %s; the chart's ValidatingWebhookConfiguration %s points at it", d.webhook.URL, d.webhook.Config)

	d.step(5, "An operator arms the fence first, on the writer as it runs today (default ServiceAccount)")
	sts := d.cs.AppsV1().StatefulSets(namespace)
	_, err = sts.Create(ctx, writerStatefulSet("", map[string]string{"NOETL_EHDB_FENCING": "enforce"}), metav1.CreateOptions{})
	if err == nil {
		return errors.New("the guard ADMITTED enforce on a writer with no election and the default ServiceAccount")
	}
	d.say("REFUSED by the API server:\n%s", indent(err.Error()))

	d.step(6, "The right order: the chart's ServiceAccount and the election on, the fence off")
	if _, err := sts.Create(ctx, writerStatefulSet(writerSA, map[string]string{"NOETL_EHDB_FENCING": "off", "NOETL_EHDB_ELECTION": "true"}), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("the unarmed writer with election on was refused: %w", err)
	}
	d.say("ADMITTED: StatefulSet %s (serviceAccountName %s, NOETL_EHDB_ELECTION=true, NOETL_EHDB_FENCING=off)", stsName, writerSA)
	_, err = setFencing(ctx, sts, "enforce")
	if err == nil {
		return errors.New("the guard ADMITTED enforce before any Lease was live")
	}
	d.say("Arming enforce now, before the election has minted anything, is REFUSED:\n%s", indent(err.Error()))

	d.step(7, "Three writers start as %s: two for shard 0 (a standby), one for shard 1", writerSA)
	writerKube := filepath.Join(d.dir, "writer.kubeconfig")
	if err := d.cluster.ServiceAccountKubeconfig(ctx, namespace, writerSA, writerKube); err != nil {
		return err
	}
	for _, host := range []string{stsName + "-0", stsName + "-0", stsName + "-1"} {
		w, err := harness.StartWriter(harness.WriterSpec{
			Bin: filepath.Join(d.bins, "ehdb-writer"), Hostname: host, Namespace: namespace, Kubeconfig: writerKube,
			LeaseSecs: leaseSecs, RenewSecs: renewSecs, Dir: d.dir,
		})
		if err != nil {
			return err
		}
		d.writers = append(d.writers, w)
		d.say("writer pid %d, HOSTNAME=%s, metrics %s", w.Pid(), host, w.MetricsURL)
	}
	holder0, epoch0, err := d.waitHolder(ctx, d.writers[:2], 30*time.Second)
	if err != nil {
		return err
	}
	if _, _, err := d.waitHolder(ctx, d.writers[2:], 30*time.Second); err != nil {
		return err
	}
	d.say("shard 0: pid %d holds epoch %d (token_valid=1 on its scrape); shard 1 is held too.", holder0.Pid(), epoch0)
	if err := d.status(ctx, kubeconfig); err != nil {
		return err
	}

	d.step(8, "Minting is live and verified on the scrape: now arm the fence")
	if _, err := setFencing(ctx, sts, "enforce"); err != nil {
		return fmt.Errorf("enforce was refused although every shard is live and minting: %w", err)
	}
	d.say("ADMITTED: NOETL_EHDB_FENCING=enforce on %s.", stsName)

	d.step(9, "kill -9 the shard-0 holder (pid %d): its standby takes over once the lease may be taken", holder0.Pid())
	killed := time.Now()
	holder0.Kill()
	standby := d.writers[0]
	if standby == holder0 {
		standby = d.writers[1]
	}
	_, epoch1, err := d.waitHolder(ctx, []*harness.Writer{standby}, time.Duration(leaseSecs+renewSecs+10)*time.Second)
	if err != nil {
		return err
	}
	d.say("pid %d acquired shard 0 with epoch %d (was %d) %s after the crash (lease %ds: the earliest the rules allow).",
		standby.Pid(), epoch1, epoch0, time.Since(killed).Round(10*time.Millisecond), leaseSecs)
	d.say("A fence would now reject any write still carrying epoch %d.", epoch0)
	if err := d.status(ctx, kubeconfig); err != nil {
		return err
	}

	if linger > 0 {
		d.step(10, "Live for %s (DEMO_SECONDS); try: KUBECONFIG=%s kubectl get leases -n %s", linger, kubeconfig, namespace)
	} else {
		d.step(10, "Live until Ctrl-C; try: KUBECONFIG=%s kubectl get leases -n %s", kubeconfig, namespace)
	}
	var deadline <-chan time.Time
	if linger > 0 {
		deadline = time.After(linger)
	}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.say("\nCtrl-C: stopping.")
			return nil
		case <-deadline:
			return nil
		case <-tick.C:
			if err := d.status(ctx, kubeconfig); err != nil {
				return err
			}
		}
	}
}

// waitHolder waits until one of ws reports token_valid=1 on its scrape.
func (d *demo) waitHolder(ctx context.Context, ws []*harness.Writer, timeout time.Duration) (*harness.Writer, uint64, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, w := range ws {
			if w.Exited() {
				continue
			}
			if tok, err := w.Token(); err == nil && tok.Valid {
				return w, tok.Epoch, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("no writer of %s acquired within %s (logs in %s)", ws[0].Name, timeout, d.dir)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// status prints what an operator sees with the CLI: `ehdb-election status -n noetl`.
func (d *demo) status(ctx context.Context, kubeconfig string) error {
	d.say("\n$ ehdb-election status -n %s", namespace)
	cmd := exec.CommandContext(ctx, filepath.Join(d.bins, "ehdb-election"), "status", "-n", namespace, "--kubeconfig", kubeconfig)
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("ehdb-election status: %w", err)
	}
	return nil
}

// teardown stops the writers (SIGTERM: they release), the webhook and the control plane.
func (d *demo) teardown() error {
	fmt.Fprintln(d.out, "\n== Teardown")
	var errs []error
	for _, w := range d.writers {
		if !w.Exited() {
			errs = append(errs, w.Stop(15*time.Second))
		}
	}
	if d.webhook != nil {
		d.webhook.Stop()
	}
	if d.cluster != nil {
		errs = append(errs, d.cluster.Stop())
	}
	err := errors.Join(errs...)
	if err == nil {
		fmt.Fprintf(d.out, "writers released and stopped, webhook and control plane stopped: nothing left running (logs in %s)\n", d.dir)
	}
	return err
}

// writerStatefulSet is the production writer (SPEC.md, "Reference deployment") with two shards.
func writerStatefulSet(sa string, env map[string]string) *appsv1.StatefulSet {
	opts := []func(*appsv1.StatefulSet){webhooktest.ServiceAccount(sa), webhooktest.Replicas(2)}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		opts = append(opts, webhooktest.SetEnv(k, env[k]))
	}
	return webhooktest.ReferenceWriter(namespace, opts...)
}

// setFencing sets NOETL_EHDB_FENCING on the writer, retrying only on a write conflict (the
// StatefulSet controller updates the object's status meanwhile).
func setFencing(ctx context.Context, sts appsv1client.StatefulSetInterface, value string) (*appsv1.StatefulSet, error) {
	var out *appsv1.StatefulSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := sts.Get(ctx, stsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		webhooktest.SetEnv("NOETL_EHDB_FENCING", value)(cur)
		out, err = sts.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}
