package main

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unread is how many bytes from conn's client wait in the kernel, received and not yet read
// (SIOCINQ): the ground truth that the client has spoken, which the server's goroutine, woken but
// not yet run on a starved machine, cannot yet say. known is false where it cannot be asked.
func unread(conn net.Conn) (n int, known bool) { return socketQueue(conn, unix.SIOCINQ) }

// socketQueue is the length of one of conn's kernel queues (an ioctl such as SIOCINQ).
func socketQueue(conn net.Conn, req uint) (n int, known bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil || ierr != nil {
		return 0, false
	}
	return n, true
}

// limitBuffers sets the listening socket's receive and send buffers, which every connection it
// accepts inherits from its first segment (SO_RCVBUF, SO_SNDBUF; the kernel doubles each for its
// own bookkeeping, and no longer grows them).
func limitBuffers(raw syscall.RawConn, bytes int) error {
	var serr error
	err := raw.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bytes); serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, bytes)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
