package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// unsent is how many bytes the server has written to conn that its client has not yet
// acknowledged (SIOCOUTQ).
func unsent(conn net.Conn) (n int, known bool) { return socketQueue(conn, unix.SIOCOUTQ) }
