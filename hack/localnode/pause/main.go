// Command pause is the sandbox ("infrastructure") container of the local node's Pods: it holds a
// Pod's namespaces open, reaps orphans (it is PID 1 in a Pod that shares its PID namespace), and
// exits on SIGTERM or SIGINT. The upstream image cannot be pulled here; this is the same job in Go,
// built static and packed by hack/localnode.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			// Reap every exited child; -1 = any, WNOHANG = do not block.
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
