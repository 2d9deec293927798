package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupName is the cgroup (in every v1 hierarchy) that holds everything the node runs: its
// daemons in cgroupName/daemons (containerd's shims inherit it), its Pods under cgroupName/kubepods
// (the kubelet's cgroupRoot). Killing every task under it and removing it is the teardown that
// cannot miss a process, whatever state a crashed run left.
const cgroupName = "ehdb-localnode"

// cgroupMounts lists the mount points of the cgroup v1 hierarchies (and of a v2 one, if mounted).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fs := fields[sep+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// makeCgroups creates cgroupName and cgroupName/daemons in every hierarchy. A new cpuset cgroup
// starts with no CPUs and no memory nodes; it gets its parent's, or no task could join it.
func makeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return errors.New("no cgroup hierarchy is mounted")
	}
	for _, m := range mounts {
		for _, dir := range []string{filepath.Join(m, cgroupName), filepath.Join(m, cgroupName, "daemons")} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
					return fmt.Errorf("initialising %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// joinDaemonsCgroup moves this process into cgroupName/daemons in every hierarchy; its children
// (and containerd's shims) inherit it.
func joinDaemonsCgroup() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, m := range mounts {
		if err := os.WriteFile(filepath.Join(m, cgroupName, "daemons", "cgroup.procs"), pid, 0o644); err != nil {
			return fmt.Errorf("joining the node's cgroup in %s: %w", m, err)
		}
	}
	return nil
}

// cgroupTasks lists every process under cgroupName, in any hierarchy.
func cgroupTasks() ([]int, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, m := range mounts {
		root := filepath.Join(m, cgroupName)
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil // removed while walking
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var pids []int
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids, nil
}

// killCgroupTasksExcept SIGKILLs every process under cgroupName but those in keep, until none
// is left.
func killCgroupTasksExcept(keep map[int]bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		all, err := cgroupTasks()
		if err != nil {
			return err
		}
		pids := slices.DeleteFunc(all, func(p int) bool { return keep[p] })
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still in the node's cgroup after SIGKILL: %v", describePids(pids))
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describePids(pids []int) string {
	var parts []string
	for _, p := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		parts = append(parts, fmt.Sprintf("%d %q", p, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
	}
	return strings.Join(parts, "; ")
}

// removeCgroups removes cgroupName and everything below it, deepest first, in every hierarchy.
func removeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, cgroupName), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: a cgroup with children cannot be removed.
		slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, d := range dirs {
			var err error
			for range 50 { // a cgroup is busy for a moment after its last task exits
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// hostSnapshot is what "the machine as we found it" means here: the host network namespace's
// rules, links, routes, firewall and sysctls, the host's mounts, and the global folders a kubelet
// or containerd would use by default.
type hostSnapshot map[string]string

// The sysctls the node's components would touch: the network ones (in the host namespace they
// must stay as found; the node's own live in its namespace) and the kernel-wide ones the kubelet
// sets at start-up (vm.overcommit_memory, kernel.panic, ...), which no namespace isolates.
var watchedSysctls = []string{
	"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/ipv6/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables", "net/netfilter/nf_conntrack_max",
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// globalPaths are the default locations of kubelet, containerd and CNI state: the node uses its
// own folders instead, and none of these may appear.
var globalPaths = []string{
	"/var/lib/kubelet", "/var/lib/containerd", "/run/containerd", "/var/lib/cni", "/etc/cni",
	"/var/log/pods", "/var/log/containers", "/run/netns", "/opt/cni",
}

var iptablesCounters = regexp.MustCompile(`\[\d+:\d+\]`)

func snapshotHost(stateDir string) hostSnapshot {
	s := hostSnapshot{}
	run := func(key string, name string, args ...string) {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			s[key] = fmt.Sprintf("(%s: %v) %s", name, err, out)
			return
		}
		s[key] = string(out)
	}
	run("ip rule", "ip", "rule")
	run("ip -6 rule", "ip", "-6", "rule")
	run("ip route", "ip", "route", "show", "table", "all")
	run("ip addr", "ip", "-o", "addr")
	run("ip link", "ip", "-o", "link")
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).CombinedOutput()
		var lines []string
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue // generated-on timestamps
			}
			lines = append(lines, iptablesCounters.ReplaceAllString(l, "[]"))
		}
		s[save] = strings.Join(lines, "\n")
		if err != nil {
			s[save] += fmt.Sprintf("\n(%v)", err)
		}
	}
	// Link state changes by itself (counters, carrier); names and flags are what the node could leave.
	s["ip link"] = regexp.MustCompile(`(?m)\s+link/\S+ \S+ brd \S+.*$`).ReplaceAllString(s["ip link"], "")
	var sysctls []string
	for _, k := range watchedSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			continue
		}
		sysctls = append(sysctls, k+" = "+strings.TrimSpace(string(v)))
	}
	s["sysctls"] = strings.Join(sysctls, "\n")
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for l := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(l)
			if len(f) > 4 {
				mounts = append(mounts, f[4])
			}
		}
		slices.Sort(mounts)
		s["mounts"] = strings.Join(mounts, "\n")
	}
	var paths []string
	for _, p := range append(slices.Clone(globalPaths), stateDir) {
		if _, err := os.Lstat(p); err == nil {
			paths = append(paths, p)
		}
	}
	s["paths"] = strings.Join(paths, "\n")
	mounts, _ := cgroupMounts()
	var cgs []string
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, cgroupName)); err == nil {
			cgs = append(cgs, filepath.Join(m, cgroupName))
		}
	}
	s["cgroups"] = strings.Join(cgs, "\n")
	return s
}

// diff lists what changed between two snapshots, line by line.
func (before hostSnapshot) diff(after hostSnapshot) []string {
	var out []string
	keys := make([]string, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if before[k] == after[k] {
			continue
		}
		b, a := lineSet(before[k]), lineSet(after[k])
		for l := range a {
			if !b[l] {
				out = append(out, fmt.Sprintf("%s: + %s", k, l))
			}
		}
		for l := range b {
			if !a[l] {
				out = append(out, fmt.Sprintf("%s: - %s", k, l))
			}
		}
	}
	slices.Sort(out)
	return out
}

func lineSet(s string) map[string]bool {
	m := map[string]bool{}
	for l := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(l) != "" {
			m[l] = true
		}
	}
	return m
}

func (s hostSnapshot) summary() string {
	return fmt.Sprintf("%d ip rules, %d links, %d iptables lines, %d mounts, sysctls {%s}",
		len(lineSet(s["ip rule"])), len(lineSet(s["ip link"])), len(lineSet(s["iptables-save"]))+len(lineSet(s["ip6tables-save"])),
		len(lineSet(s["mounts"])), strings.ReplaceAll(s["sysctls"], "\n", ", "))
}
