package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// guardChildEnv marks the copy of this test binary that runs inside a fresh network namespace.
const guardChildEnv = "EHDB_LOCALNODE_GUARD_CHILD"

// TestGuardProhibitsEverythingOffTheNode builds the node's network in a network namespace of its
// own and asks the kernel where Pod traffic would go — with `ip route get`, which sends nothing.
// So that the check cannot pass by accident (a namespace without any route refuses everything
// anyway), the child gives the namespace a default route, as an uplink would: the guard alone must
// still prohibit every outside address, and with the guard's last rule removed the same check must
// fail.
func TestGuardProhibitsEverythingOffTheNode(t *testing.T) {
	if os.Getenv(guardChildEnv) == "1" {
		guardChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 (ip) not installed")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardProhibitsEverythingOffTheNode$", "-test.v")
	cmd.Env = append(os.Environ(), guardChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("in a fresh network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the guard check failed: %v", err)
	}
}

func guardChild(t *testing.T) {
	if err := setupNetwork(); err != nil {
		t.Fatal(err)
	}
	// An uplink's default route, on the node bridge: only the rules stand between a Pod and it.
	if err := ip("route", "add", "default", "dev", nodeBridge); err != nil {
		t.Fatal(err)
	}
	report, err := checkGuard()
	if err != nil {
		t.Fatalf("with the guard in place: %v", err)
	}
	t.Logf("guarded: %s", report)
	if !strings.Contains(report, "10.96.0.1: 10.96.0.1 from") {
		t.Fatalf("the Service range must stay routable: %s", report)
	}

	// Positive control: without the prohibit rule the default route wins and the check says so.
	if err := ip("rule", "del", "pref", strconv.Itoa(guardPref+3)); err != nil {
		t.Fatal(err)
	}
	if _, err := checkGuard(); err == nil || !strings.Contains(err.Error(), "a Pod could route to") {
		t.Fatalf("without the prohibit rule the check must fail, got %v", err)
	} else {
		t.Logf("unguarded, as it must: %v", err)
	}
}
