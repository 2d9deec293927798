//go:build !linux

package main

import (
	"net"
	"syscall"
)

// unread cannot ask the kernel here: what the server's reads say is all there is.
func unread(net.Conn) (n int, known bool) { return 0, false }

// limitReceiveBuffer leaves the kernel's default here.
func limitReceiveBuffer(syscall.RawConn, int) error { return nil }
