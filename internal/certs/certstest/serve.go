package certstest

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// Serve accepts connections with cfg until the test ends, completes each
// handshake and answers "ok" on it; it returns the address. With Call, it
// tells whether two TLS configurations accept each other.
func Serve(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if c.(*tls.Conn).Handshake() == nil {
				_, _ = c.Write([]byte("ok"))
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// ErrNoAnswer is Call's error when the server closed the connection without
// its answer: it refused the handshake.
var ErrNoAnswer = errors.New("no answer: the server refused the handshake")

// Call dials a Serve address with cfg and reads its answer: nil when both
// sides accepted the handshake.
func Call(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(b) != "ok" {
		return ErrNoAnswer
	}
	return nil
}
