// Package rpctest serves a manager's RPC (rpc.Server) for the length of a
// test: the tests of the packages around internal/rpc (the manager, oncectl)
// and managertest's clusters.
package rpctest

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/once-dev/once/internal/rpc"
)

// Serve serves srv on ln until the test ends. Its Cleanup runs after the
// Cleanups registered later (a manager's Close, say), closes srv, and fails
// the test if Serve returned anything but http.ErrServerClosed.
func Serve(tb testing.TB, srv *rpc.Server, ln net.Listener) {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	tb.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("rpc.Server.Serve returned %v, want http.ErrServerClosed", err)
		}
	})
}

// Listen serves srv on a new listener of 127.0.0.1 until the test ends (as
// Serve) and returns its address.
func Listen(tb testing.TB, srv *rpc.Server) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	Serve(tb, srv, ln)
	return ln.Addr().String()
}
