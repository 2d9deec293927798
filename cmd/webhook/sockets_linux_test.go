package main

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unsent is how many bytes the server has written to conn that its client has not yet
// acknowledged (SIOCOUTQ).
func unsent(conn net.Conn) (n int, known bool) {
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, false
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || ierr != nil {
		return 0, false
	}
	return n, true
}
