package election

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// reason is the errors_total label of a store error.
type reason int

const (
	reasonForbidden reason = iota
	reasonUnauthorized
	reasonUnreachable
	reasonOther
	numReasons
)

var reasonNames = [numReasons]string{"forbidden", "unauthorized", "unreachable", "other"}

func (r reason) String() string { return reasonNames[r] }

// classify maps a store error to its reason. Forbidden is what a premature flip without the Role
// binding produces on every tick, so it gets a series of its own; unreachable covers everything
// that says "the API server did not answer usefully" (no connection, a timeout, a 5xx).
func classify(err error) reason {
	switch {
	case apierrors.IsForbidden(err):
		return reasonForbidden
	case apierrors.IsUnauthorized(err):
		return reasonUnauthorized
	case unreachable(err):
		return reasonUnreachable
	}
	return reasonOther
}

func unreachable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= 500 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// client-go wraps every transport failure (dial, TLS, reset, timeout) in a *url.Error.
	var uerr *url.Error
	var nerr net.Error
	return errors.As(err, &uerr) || errors.As(err, &nerr)
}
