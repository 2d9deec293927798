// Command localnode runs a real single-node Kubernetes cluster on this machine — the local control
// plane (internal/testcluster) plus containerd, kubelet, kube-scheduler and kube-proxy — so the
// chart's webhook and the writer StatefulSet run as real Pods, and runs a command against it (the
// in-cluster e2e suite, for `make e2e-node`). kind cannot run here (no Docker engine, no registry).
//
// Everything runs inside a network namespace and a mount namespace of its own, in a cgroup of its
// own (ehdb-localnode in every hierarchy):
//   - No packet can leave the machine: the namespace has only its loopback and two bridges this
//     program creates; the addresses live on them; and policy routing, installed before the first
//     Pod, prohibits everything from the Pod bridge but the Pod range, the Service range and the
//     node's address (checked with `ip route get`, which sends nothing).
//   - Nothing is left behind: the bridges, rules, KUBE-* chains and the namespace's sysctls
//     (ip_forward, route_localnet) vanish with the namespace; mounts stay in the private mount
//     namespace; every process, container and shim is in the cgroup, which teardown empties and
//     removes. The host's rules, links, routes, iptables, mounts and sysctls are compared before
//     and after, and any difference fails the run.
//
// Usage:
//
//	localnode e2e [-image-repo R] [-image-tag T]  build, bring the node up, run the in-cluster suite, tear down
//	localnode run [flags] -- CMD ARGS...          the same with any command (E2E_KUBECONFIG etc. in its environment)
//	localnode clean                               remove what an interrupted run left (processes, cgroups, state)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/noetl/ehdb-election/internal/childproc"
	"github.com/noetl/ehdb-election/internal/repo"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "localnode: "+format+"\n", args...)
}

// layout is where the node's files live: binaries and images are kept between runs (cache),
// state is made fresh for each run and removed after it.
type layout struct {
	root   string // the repository
	bin    string // .cache/localnode/bin: webhook, ehdb-writer, pause, e2e.test
	images string // .cache/localnode/images: OCI archives
	state  string // .cache/localnode/state: containerd, kubelet, CNI, logs, control plane
	k8sBin string // .cache/controlplane/current: kubelet, kube-proxy, kube-scheduler (+ control plane)
}

func newLayout() (layout, error) {
	root, err := repo.Root()
	if err != nil {
		return layout{}, err
	}
	cache := filepath.Join(root, ".cache", "localnode")
	k8s := os.Getenv("EHDB_CONTROLPLANE_BIN")
	if k8s == "" {
		k8s = filepath.Join(root, ".cache", "controlplane", "current")
	}
	return layout{root: root, bin: filepath.Join(cache, "bin"), images: filepath.Join(cache, "images"), state: filepath.Join(cache, "state"), k8sBin: k8s}, nil
}

type options struct {
	imageRepo, imageTag string
	run                 string // e2e: -test.run
}

func (o *options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.imageRepo, "image-repo", "ghcr.io/noetl/ehdb-election", "image repository prefix: <repo>-webhook and <repo>-writer")
	fs.StringVar(&o.imageTag, "image-tag", "dev", "image tag")
	fs.StringVar(&o.run, "run", "", "e2e: run only the tests matching this regular expression (go test -run)")
}

func (o options) images(l layout) []imageSpec {
	return []imageSpec{
		{Ref: pauseImage, Binary: filepath.Join(l.bin, "pause"), Entrypoint: "/pause", User: "65535:65535"},
		{Ref: o.imageRepo + "-webhook:" + o.imageTag, Binary: filepath.Join(l.bin, "webhook"), Entrypoint: "/ehdb-webhook", User: "65532:65532"},
		{Ref: o.imageRepo + "-writer:" + o.imageTag, Binary: filepath.Join(l.bin, "ehdb-writer"), Entrypoint: "/ehdb-writer", User: "65532:65532"},
		// The same writer with the fence armed in the image's ENV, a path the admission guard
		// cannot see: the in-cluster suite rolls it out to show the writer's readiness backstop.
		{Ref: o.imageRepo + "-writer:" + o.imageTag + "-armed", Binary: filepath.Join(l.bin, "ehdb-writer"), Entrypoint: "/ehdb-writer", User: "65532:65532",
			Env: []string{"NOETL_EHDB_FENCING=enforce"}},
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: localnode e2e|run|clean [flags] [-- CMD ARGS...]")
		os.Exit(2)
	}
	l, err := newLayout()
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
	var o options
	fs := flag.NewFlagSet("localnode "+os.Args[1], flag.ExitOnError)
	o.flags(fs)
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "e2e":
		if err := build(l, o, true); err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		suite := []string{filepath.Join(l.bin, "e2e.test"), "-test.v", "-test.count=1", "-test.timeout=30m"}
		if o.run != "" {
			suite = append(suite, "-test.run="+o.run)
		}
		os.Exit(outer(l, o, suite))
	case "run":
		if fs.NArg() == 0 {
			logf("run: a command is needed after --")
			os.Exit(2)
		}
		if err := build(l, o, false); err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		os.Exit(outer(l, o, fs.Args()))
	case "clean":
		found, err := clean(l)
		if err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		logf("clean: %s", found)
	case "inner":
		os.Exit(inner(l, o, fs.Args()))
	default:
		logf("unknown command %q", os.Args[1])
		os.Exit(2)
	}
}

// build compiles the static binaries the images hold (and the suite), and packs the images.
func build(l layout, o options, suite bool) error {
	start := time.Now()
	for _, b := range []string{"kubelet", "kube-proxy", "kube-scheduler", "etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(l.k8sBin, b)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make controlplane` and `hack/controlplane/build.sh kubelet kube-scheduler kube-proxy` (make e2e-node does)", b, l.k8sBin)
		}
	}
	for _, d := range []string{l.bin, l.images} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	gobuild := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", l.bin+"/", "./cmd/webhook", "./cmd/ehdb-writer", "./hack/localnode/pause")
	gobuild.Dir, gobuild.Env = l.root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gobuild.CombinedOutput(); err != nil {
		return fmt.Errorf("building the images' binaries: %v\n%s", err, out)
	}
	if suite {
		gotest := exec.Command("go", "test", "-c", "-o", filepath.Join(l.bin, "e2e.test"), "./test/e2e")
		gotest.Dir = l.root
		if out, err := gotest.CombinedOutput(); err != nil {
			return fmt.Errorf("building the e2e suite: %v\n%s", err, out)
		}
	}
	for _, img := range o.images(l) {
		if err := writeOCIArchive(img, filepath.Join(l.images, imageFile(img.Ref))); err != nil {
			return err
		}
	}
	if suite {
		// The releases the suite pushes to the node's registry; the inner process and the suite
		// inherit where they are.
		r, err := buildReleases(context.Background(), l)
		if err != nil {
			return err
		}
		for _, kv := range r.env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	}
	logf("binaries and images built in %.1fs", time.Since(start).Seconds())
	return nil
}

// nodeFilesDir is the state folder's part that the suite shares with the node (E2E_NODE_DIR): the
// writer Pods keep their records for the safety checker there (hostPath), beyond their Pods' lives.
const nodeFilesDir = "node-files"

// keepLogs moves the components' and the Pods' logs, and the writers' records, out of the state
// folder before it is removed, to .cache/localnode/logs (the last run's only).
func keepLogs(l layout) error {
	dst := filepath.Join(filepath.Dir(l.state), "logs")
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, d := range []string{"logs", "pod-logs", nodeFilesDir} {
		if err := os.Rename(filepath.Join(l.state, d), filepath.Join(dst, d)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		logf("logs of this run kept in %s", dst)
	}
	return errors.Join(errs...)
}

func imageFile(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
}

// clean removes what a previous run left: every process in the node's cgroup (a crashed run's
// shims and containers), the cgroups, the state folder.
func clean(l layout) (string, error) {
	var found []string
	if pids, err := cgroupTasks(); err == nil && len(pids) > 0 {
		found = append(found, fmt.Sprintf("%d processes", len(pids)))
	}
	if err := killCgroupTasksExcept(nil, 30*time.Second); err != nil {
		return "", err
	}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, cgroupName)); err == nil {
			found = append(found, "cgroups")
			break
		}
	}
	if err := removeCgroups(); err != nil {
		return "", err
	}
	if _, err := os.Stat(l.state); err == nil {
		found = append(found, "state folder")
		if err := os.RemoveAll(l.state); err != nil {
			return "", fmt.Errorf("removing %s: %w", l.state, err)
		}
	}
	if len(found) == 0 {
		return "nothing was left", nil
	}
	return "removed " + strings.Join(found, ", "), nil
}

// outer runs the node in fresh namespaces, then tears down and checks the host is as it was.
func outer(l layout, o options, cmd []string) int {
	if os.Geteuid() != 0 {
		logf("needs root (namespaces, cgroups, mounts)")
		return 1
	}
	start := time.Now()
	if found, err := clean(l); err != nil {
		logf("cleaning up a previous run: %v", err)
		return 1
	} else {
		logf("previous runs: %s", found)
	}
	before := snapshotHost(l.state)
	logf("host before: %s", before.summary())
	code := 1
	func() {
		if err := makeCgroups(); err != nil {
			logf("%v", err)
			return
		}
		self, err := os.Executable()
		if err != nil {
			logf("%v", err)
			return
		}
		args := append([]string{"inner", "-image-repo", o.imageRepo, "-image-tag", o.imageTag, "--"}, cmd...)
		in := exec.Command(self, args...)
		in.Stdin, in.Stdout, in.Stderr = os.Stdin, os.Stdout, os.Stderr
		in.SysProcAttr = &syscall.SysProcAttr{
			Unshareflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
			Pdeathsig:    syscall.SIGKILL,
		}
		if err := in.Start(); err != nil {
			logf("starting the node: %v", err)
			return
		}
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			for range sigs {
				_ = in.Process.Signal(syscall.SIGTERM) // the inner side tears down
			}
		}()
		err = in.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &exit) && exit.ExitCode() > 0:
			code = exit.ExitCode()
		default:
			logf("the node ended: %v", err)
		}
	}()

	// Teardown, whatever happened above.
	var problems []string
	if err := killCgroupTasksExcept(nil, 30*time.Second); err != nil {
		problems = append(problems, err.Error())
	}
	if err := keepLogs(l); err != nil {
		logf("keeping the logs: %v", err)
	}
	if err := removeCgroups(); err != nil {
		problems = append(problems, err.Error())
	}
	if err := os.RemoveAll(l.state); err != nil {
		problems = append(problems, fmt.Sprintf("removing %s: %v", l.state, err))
	}
	after := snapshotHost(l.state)
	problems = append(problems, before.diff(after)...)
	if len(problems) > 0 {
		logf("the machine is NOT as it was found:\n  %s", strings.Join(problems, "\n  "))
		return 1
	}
	logf("teardown verified: no process or cgroup of the node, no state folder; host rules, links, routes, iptables/ip6tables, mounts and sysctls as before (%s)", after.summary())
	logf("total %.1fs, exit %d", time.Since(start).Seconds(), code)
	return code
}

// inner runs in the new namespaces: up, the command, down.
func inner(l layout, o options, cmd []string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := joinDaemonsCgroup(); err != nil {
		logf("%v", err)
		return 1
	}
	if err := os.MkdirAll(filepath.Join(l.state, "tmp"), 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	// The control plane's and the tests' temporary folders go under the state folder, so even a
	// killed run leaves nothing in the host's /tmp.
	os.Setenv("TMPDIR", filepath.Join(l.state, "tmp"))
	if err := privateMounts(l.state); err != nil {
		logf("%v", err)
		return 1
	}
	n := &node{}
	code := 1
	err := n.up(ctx, l, o.images(l))
	if err != nil {
		logf("bringing the node up: %v", err)
		n.dumpLogs()
	} else {
		logf("memory with the node idle: %s", memory())
		code = n.run(ctx, l, o, cmd)
	}
	downStart := time.Now()
	if err := n.down(); err != nil {
		logf("tearing the node down: %v", err)
		code = 1
	} else {
		logf("node down in %.1fs: processes stopped, containers and shims killed, no mount left under %s", time.Since(downStart).Seconds(), l.state)
	}
	logf("timings: %s", strings.Join(n.timings, ", "))
	return code
}

// run runs the command against the node with the suite's environment.
func (n *node) run(ctx context.Context, l layout, o options, cmd []string) int {
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	// Dies with this process; containers and shims, which outlive their parents by design, are
	// reached through the cgroup instead.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.WaitDelay = 30 * time.Second
	c.Dir = filepath.Join(l.root, "test", "e2e")
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(),
		"E2E_KUBECONFIG="+n.cluster.Kubeconfig,
		"E2E_IN_CLUSTER=1",
		"E2E_IMAGE_REPO="+o.imageRepo,
		"E2E_IMAGE_TAG="+o.imageTag,
		"EHDB_REQUIRE_CLUSTER=1",
		// The suite runs on the node: it reads the writers' records where their Pods keep them.
		"E2E_NODE_DIR="+filepath.Join(l.state, nodeFilesDir),
	)
	logf("running %s (E2E_KUBECONFIG=%s E2E_IN_CLUSTER=1)", strings.Join(cmd, " "), n.cluster.Kubeconfig)
	start := time.Now()
	err := c.Run()
	n.mark(fmt.Sprintf("command finished after %.1fs", time.Since(start).Seconds()))
	logf("memory after the command: %s", memory())
	if _, gerr := checkGuard(); gerr != nil {
		logf("the Pod bridge guard after the run: %v", gerr)
		return 1
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		n.dumpLogs()
		return max(exit.ExitCode(), 1)
	default:
		logf("running the command: %v", err)
		return 1
	}
}

// dumpLogs prints the end of every component's log, for a failure nobody can look into later.
func (n *node) dumpLogs() {
	for _, p := range []*childproc.Process{n.containerd, n.kubelet, n.proxy, n.scheduler} {
		if p != nil {
			logf("--- last lines of %s ---\n%s", p.LogPath, p.LogTail(25))
		}
	}
}
