package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/childproc"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

const (
	nodeName   = "ehdb-node"
	pauseImage = "localhost/ehdb-localnode/pause:1"
)

// node is the running node: the control plane (testcluster with its Node option) and the node's
// own components, all inside this process's network and mount namespaces.
type node struct {
	l           layout
	cluster     *testcluster.Cluster
	containerd  *childproc.Process
	kubelet     *childproc.Process
	proxy       *childproc.Process
	scheduler   *childproc.Process
	proxyHealth string
	timings     []string
	started     time.Time
}

func (n *node) mark(what string) {
	n.timings = append(n.timings, fmt.Sprintf("%s %.1fs", what, time.Since(n.started).Seconds()))
	logf("%s (%.1fs)", what, time.Since(n.started).Seconds())
}

// privateMounts makes this mount namespace private, so nothing the node mounts is seen outside,
// puts fresh tmpfs over the default state folders, and pins the kernel-wide sysctls the kubelet would otherwise
// rewrite for the whole machine (vm.overcommit_memory, kernel.panic, ...): the kubelet reads them
// through files that already hold its wanted values, so it writes nothing.
func privateMounts(state string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	// Some paths are the kubelet's whatever its flags say (/var/lib/kubelet/device-plugins,
	// /var/log/containers), and containerd 1.6 keeps shim sockets under /run/containerd whatever
	// its state folder: fresh tmpfs over their parents keeps all of it inside this namespace.
	for _, dir := range []string{"/run", "/var/lib", "/var/log"} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755,size=64m"); err != nil {
			return fmt.Errorf("mounting tmpfs on %s: %w", dir, err)
		}
	}
	pinned := map[string]string{
		"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
		"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
	}
	dir := filepath.Join(state, "pinned-sysctls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k, v := range pinned {
		f := filepath.Join(dir, strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(f, "/proc/sys/"+k, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("pinning %s: %w", k, err)
		}
	}
	return nil
}

func (n *node) up(ctx context.Context, l layout, imgs []imageSpec) error {
	n.l, n.started = l, time.Now()
	state := l.state
	for _, d := range []string{"containerd", "kubelet", "pod-logs", "cni/net.d", "cni/ipam", "logs", nodeFilesDir} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			return err
		}
	}
	if err := setupNetwork(); err != nil {
		return err
	}
	report, err := checkGuard()
	if err != nil {
		return fmt.Errorf("the Pod bridge guard: %w", err)
	}
	logf("guard: %s", report)
	n.mark("network and guard in place, before any Pod")

	c, err := testcluster.Start(ctx, testcluster.Options{Node: &testcluster.NodeOptions{Address: net.ParseIP(nodeAddr)}})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	n.cluster = c
	n.mark("control plane ready at " + c.Config.Host)

	if err := n.startContainerd(ctx, imgs); err != nil {
		return err
	}
	n.mark(fmt.Sprintf("containerd up, %d images imported", len(imgs)))

	ports, err := childproc.FreePorts(5)
	if err != nil {
		return err
	}
	kubeletPort, kubeletHealth, proxyHealth, proxyMetrics, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	kc := func(name, user string, groups ...string) (string, error) {
		p := filepath.Join(state, name+".kubeconfig")
		return p, c.ClientKubeconfig(p, user, groups...)
	}
	kubeletKC, err := kc("kubelet", "system:node:"+nodeName, "system:nodes")
	if err != nil {
		return err
	}
	proxyKC, err := kc("kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	schedKC, err := kc("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}

	n.proxyHealth = fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealth)
	n.proxy = &childproc.Process{Name: "kube-proxy", Bin: filepath.Join(l.k8sBin, "kube-proxy"), LogPath: filepath.Join(state, "logs", "kube-proxy.log"), Args: []string{
		"--kubeconfig=" + proxyKC,
		"--hostname-override=" + nodeName,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + podCIDR,
		// No CAP_SYS_RESOURCE here: a negative oom_score_adj cannot be set.
		"--oom-score-adj=0",
		// Leave conntrack's global table size and timeouts as they are.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--nodeport-addresses=primary",
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(proxyHealth),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(proxyMetrics),
		"--v=1",
	}}
	n.scheduler = &childproc.Process{Name: "kube-scheduler", Bin: filepath.Join(l.k8sBin, "kube-scheduler"), LogPath: filepath.Join(state, "logs", "kube-scheduler.log"), Args: []string{
		"--kubeconfig=" + schedKC,
		"--authentication-kubeconfig=" + schedKC,
		"--authorization-kubeconfig=" + schedKC,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--v=1",
	}}
	kubeletConfig := filepath.Join(state, "kubelet-config.yaml")
	resolv := filepath.Join(state, "resolv.conf")
	// Pods get clusterDNS as their nameserver; this file only feeds the kubelet's search/options
	// and any Pod with dnsPolicy Default. It names nothing off the machine.
	if err := os.WriteFile(resolv, []byte("nameserver "+clusterDNS+"\noptions ndots:1\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(kubeletConfig, []byte(kubeletConfigYAML(c.CAFile(), n.socket(), resolv, filepath.Join(state, "pod-logs"), kubeletPort, kubeletHealth)), 0o644); err != nil {
		return err
	}
	n.kubelet = &childproc.Process{Name: "kubelet", Bin: filepath.Join(l.k8sBin, "kubelet"), LogPath: filepath.Join(state, "logs", "kubelet.log"), Args: []string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + kubeletKC,
		"--root-dir=" + filepath.Join(state, "kubelet"),
		"--cert-dir=" + filepath.Join(state, "kubelet", "pki"),
		"--hostname-override=" + nodeName,
		"--node-ip=" + nodeAddr,
		"--v=1",
	}}
	for _, p := range []*childproc.Process{n.proxy, n.scheduler, n.kubelet} {
		if err := p.Start(); err != nil {
			return err
		}
	}
	cs := c.Clientset()
	if err := n.waitFor(ctx, 2*time.Minute, "the node is Ready", n.kubelet, func(ctx context.Context) error {
		nd, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	}); err != nil {
		return err
	}
	n.mark("node Ready")
	if err := n.waitFor(ctx, time.Minute, "kube-proxy has synced its rules", n.proxy, func(ctx context.Context) error {
		resp, err := http.Get(n.proxyHealth)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	report, err = checkGuard()
	if err != nil {
		return fmt.Errorf("the Pod bridge guard, with kube-proxy's rules in place: %w", err)
	}
	logf("guard with kube-proxy's rules: %s", report)
	n.mark("kube-proxy synced, guard holds")
	return nil
}

func (n *node) socket() string { return filepath.Join(n.l.state, "containerd", "containerd.sock") }

func (n *node) startContainerd(ctx context.Context, imgs []imageSpec) error {
	state := n.l.state
	cfg := filepath.Join(state, "containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(state, n.socket())), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(state, "cni", "net.d", "10-ehdb-localnode.conflist"), []byte(cniConfig(state)), 0o644); err != nil {
		return err
	}
	if err := writeRegistryHosts(filepath.Join(state, "containerd", "certs.d")); err != nil {
		return err
	}
	n.containerd = &childproc.Process{Name: "containerd", Bin: "containerd", LogPath: filepath.Join(state, "logs", "containerd.log"), Args: []string{"--config=" + cfg}}
	if err := n.containerd.Start(); err != nil {
		return err
	}
	if err := n.waitFor(ctx, 30*time.Second, "containerd serves its socket", n.containerd, func(ctx context.Context) error {
		return exec.CommandContext(ctx, "ctr", "--address", n.socket(), "version").Run()
	}); err != nil {
		return err
	}
	for _, img := range imgs {
		tarPath := filepath.Join(n.l.images, imageFile(img.Ref))
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.socket(), "-n", "k8s.io", "images", "import", tarPath).CombinedOutput()
		if err != nil {
			return fmt.Errorf("importing %s: %v: %s", tarPath, err, out)
		}
	}
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.socket(), "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		return fmt.Errorf("listing images: %v: %s", err, out)
	}
	for _, img := range imgs {
		if !slices.Contains(strings.Fields(string(out)), img.Ref) {
			return fmt.Errorf("image %s missing after import; containerd has: %s", img.Ref, out)
		}
	}
	return nil
}

// waitFor polls cond until it holds, failing early with the component's log if it exits.
func (n *node) waitFor(ctx context.Context, timeout time.Duration, what string, p *childproc.Process, cond func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("waiting until %s: %s exited: %v\n--- last lines of %s ---\n%s", what, p.Name, p.Err(), p.LogPath, p.LogTail(30))
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = cond(cctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting until %s: %v\n--- last lines of %s ---\n%s", what, last, p.LogPath, p.LogTail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// memory reports the resident memory of everything in the node's cgroup, grouped by command.
func memory() string {
	pids, err := cgroupTasks()
	if err != nil {
		return err.Error()
	}
	by := map[string]int{}
	total := 0
	for _, p := range pids {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		name := strings.TrimSpace(string(comm))
		if strings.HasPrefix(name, "containerd-shim") {
			name = "shims"
		}
		r := rssOf(p)
		by[name] += r
		total += r
	}
	type kv struct {
		k string
		v int
	}
	var list []kv
	for k, v := range by {
		list = append(list, kv{k, v})
	}
	slices.SortFunc(list, func(a, b kv) int { return b.v - a.v })
	var parts []string
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
	}
	return fmt.Sprintf("%d MiB in %d processes (%s)", total, len(pids), strings.Join(parts, ", "))
}

// down stops the node: the kubelet first (it stops starting Pods), then every container and
// shim (they live on without their manager), then the daemons and the control plane; then it
// unmounts whatever the kubelet and containerd mounted under the state folder. The namespaces
// themselves, with the bridges, rules and KUBE-* chains, end with this process.
func (n *node) down() error {
	var errs []error
	for _, p := range []*childproc.Process{n.kubelet, n.proxy, n.scheduler} {
		if p != nil {
			errs = append(errs, p.Stop(10*time.Second))
		}
	}
	if n.containerd != nil {
		errs = append(errs, n.containerd.Stop(10*time.Second))
	}
	// Containers and shims: whatever is still in the node's cgroup besides the control plane and
	// this process (those stop below, by their own handles).
	keep := map[int]bool{os.Getpid(): true}
	if n.cluster != nil {
		errs = append(errs, n.cluster.Stop())
	}
	errs = append(errs, killCgroupTasksExcept(keep, 20*time.Second))
	errs = append(errs, unmountUnder(n.l.state))
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below dir in this mount namespace, deepest first, and checks
// that none is left.
func unmountUnder(dir string) error {
	for range 3 {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
		for _, m := range mps {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %v", dir, left)
	}
	return nil
}

func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for l := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

func containerdConfig(state, socket string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # No CAP_SYS_RESOURCE on this machine: runc must not try to lower a container's oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
  # Registry hosts (hosts.toml per registry): only the node's own registry on its loopback, plain
  # HTTP (writeRegistryHosts). Any other registry gets the default (HTTPS), which no route reaches.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[7]q
`, filepath.Join(state, "containerd", "root"), filepath.Join(state, "containerd", "state"), socket,
		filepath.Join(state, "containerd", "opt"), pauseImage, filepath.Join(state, "cni", "net.d"), filepath.Join(state, "containerd", "certs.d"))
}

// cniConfig is the Pod network: one bridge (the one setupNetwork made and guarded) as the Pods'
// default gateway (the guard decides what lies beyond it), host-local
// addresses, no masquerading (nothing leaves, so nothing needs translating).
func cniConfig(state string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "ehdb-localnode",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "isDefaultGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "dataDir": %q
    }
  }]
}
`, podBridge, podCIDR, podGateway, filepath.Join(state, "cni", "ipam"))
}

func kubeletConfigYAML(caFile, socket, resolv, podLogs string, port, healthPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]q}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://%[5]s
# cgroup v1 on this machine: allowed explicitly, with the cgroupfs driver (no systemd).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[6]s
failSwapOn: false
# No CAP_SYS_RESOURCE: the kubelet cannot lower its own oom_score_adj.
oomScoreAdj: 0
resolvConf: %[7]q
clusterDNS: [%[8]s]
clusterDomain: cluster.local
podLogsDir: %[9]q
# Images exist only as imported: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
# Secret volumes (the webhook's rotated certificate) refresh on the Pod's sync.
syncFrequency: 10s
rotateCertificates: false
serverTLSBootstrap: false
maxPods: 30
`, nodeAddr, port, healthPort, caFile, socket, cgroupName, resolv, clusterDNS, podLogs)
}
