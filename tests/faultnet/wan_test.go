package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// A cut refuses new connections to the blocked address, closes the open
// one, and a heal lets connections through again.
func TestWANCutRefusesClosesAndHeals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	defer func() { ln.Close(); <-done }()
	addr := ln.Addr().String()
	w := NewWAN()
	ctx := context.Background()
	open, err := w.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	w.Set([]string{addr})
	if _, err := w.Dial(ctx, addr); !errors.Is(err, ErrBlocked) {
		t.Fatalf("dial while cut: %v, want ErrBlocked", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		_, err := open.Write([]byte("x"))
		return err != nil, "the open connection to be closed by the cut"
	})
	w.Set(nil)
	c, err := w.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("dial after the heal: %v", err)
	}
	c.Close()
}
