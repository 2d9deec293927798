package main

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unread reports whether bytes from conn's client wait in the kernel, received and not yet read
// (SIOCINQ): the ground truth that the client has spoken, which the server's goroutine, woken but
// not yet run on a starved machine, cannot yet say. known is false where it cannot be asked.
func unread(conn net.Conn) (waiting, known bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	n, ierr := 0, error(nil)
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || ierr != nil {
		return false, false
	}
	return n > 0, true
}
