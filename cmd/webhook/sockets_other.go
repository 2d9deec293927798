//go:build !linux

package main

import (
	"net"
	"syscall"
)

// unread cannot ask the kernel here: what the server's reads say is all there is.
func unread(net.Conn) (n int, known bool) { return 0, false }

// limitBuffers leaves the kernel's defaults here.
func limitBuffers(syscall.RawConn, int) error { return nil }
