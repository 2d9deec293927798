package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// The node's addresses. They live on two bridges this program creates in the node's own network
// namespace, which has no other interface than its loopback: no route leads off the machine.
const (
	nodeBridge  = "ehdbnode0"     // carries only the node's address; the Service range routes here
	podBridge   = "ehdbpod0"      // the CNI bridge: Pods' veths attach here
	nodeAddr    = "10.88.0.1"     // API server bind/advertise address, kubelet node IP
	podCIDR     = "10.244.0.0/24" // host-local IPAM range of the Pods
	podGateway  = "10.244.0.1"
	serviceCIDR = "10.96.0.0/16" // testcluster.ServiceCIDR
	clusterDNS  = "10.96.0.10"   // named in Pods' resolv.conf; no DNS server runs (nothing resolves names)
	// guardPref is the first of the policy-routing rules that confine the Pod bridge.
	guardPref = 1000
)

// outsideProbes are addresses off this machine (documentation ranges and well-known public
// resolvers) plus this host's own resolver and uplink addresses, as routing questions only:
// `ip route get` answers from the routing tables and sends nothing.
func outsideProbes() []string {
	probes := []string{"192.0.2.1", "198.51.100.7", "203.0.113.9", "8.8.8.8", "1.1.1.1"}
	if data, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for l := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(l)
			if len(f) == 2 && f[0] == "nameserver" && net.ParseIP(f[1]).To4() != nil {
				probes = append(probes, f[1])
			}
		}
	}
	return probes
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetwork builds the node's network in the (new, empty) namespace this process runs in:
// loopback, the node bridge with the node address as a /32 and the Service range routed to it,
// the Pod bridge with its gateway, and the policy routing that makes every destination but the
// Pod range, the Service range and the node address prohibited for anything arriving from the Pod
// bridge. All of it before any Pod exists.
func setupNetwork() error {
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", nodeBridge, "type", "bridge"},
		{"addr", "add", nodeAddr + "/32", "dev", nodeBridge},
		{"link", "set", nodeBridge, "up"},
		{"route", "add", serviceCIDR, "dev", nodeBridge, "src", nodeAddr},
		{"link", "add", podBridge, "type", "bridge"},
		{"addr", "add", podGateway + "/24", "dev", podBridge},
		{"link", "set", podBridge, "up"},
		{"rule", "add", "pref", fmt.Sprint(guardPref), "iif", podBridge, "to", podCIDR, "lookup", "main"},
		{"rule", "add", "pref", fmt.Sprint(guardPref + 1), "iif", podBridge, "to", serviceCIDR, "lookup", "main"},
		{"rule", "add", "pref", fmt.Sprint(guardPref + 2), "iif", podBridge, "to", nodeAddr + "/32", "lookup", "main"},
		{"rule", "add", "pref", fmt.Sprint(guardPref + 3), "iif", podBridge, "prohibit"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	// Forwarding is on in this namespace only (the CNI bridge plugin would turn it on anyway); the
	// host's ip_forward is never touched.
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// checkGuard asks the kernel, for a Pod address arriving on the Pod bridge, where each outside
// address would go: every answer must be the guard's prohibit rule (EACCES), and the Pod range,
// the Service range and the node address must still route. Nothing is sent.
func checkGuard() (string, error) {
	probePod := "10.244.0.250"
	var report []string
	for _, dst := range outsideProbes() {
		out, err := exec.Command("ip", "route", "get", dst, "from", probePod, "iif", podBridge).CombinedOutput()
		text := strings.TrimSpace(string(out))
		if err == nil || !strings.Contains(text, "Permission denied") {
			return "", fmt.Errorf("a Pod could route to %s: `ip route get %s from %s iif %s` answered %q (want the guard's prohibit: Permission denied)", dst, dst, probePod, podBridge, text)
		}
		report = append(report, dst+": prohibited")
	}
	for _, dst := range []string{"10.244.0.7", "10.96.0.1", nodeAddr} {
		out, err := exec.Command("ip", "route", "get", dst, "from", probePod, "iif", podBridge).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("a Pod cannot route to %s: %s", dst, strings.TrimSpace(string(out)))
		}
		report = append(report, dst+": "+strings.Join(strings.Fields(string(out))[:3], " "))
	}
	return strings.Join(report, ", "), nil
}
