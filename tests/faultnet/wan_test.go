package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
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

// A process with FAULTNET_WAN_FILE starts with the file's rule in force,
// follows every later rule and acknowledges each one by its generation.
func TestWANFileIsFollowedAndAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.wan.json")
	if err := WriteWANRule(path, WANRule{Generation: 1, Block: []string{"127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, stop, err := WANFromEnv(ctx, []string{"OTHER=1", WANFileEnv + "=" + path})
	if err != nil || w == nil {
		t.Fatalf("WANFromEnv: %v, %v", w, err)
	}
	defer stop()
	if !w.isBlocked("127.0.0.1:1") {
		t.Fatal("the rule in the file at start is not in force")
	}
	if ack, err := ReadWANRule(Ack(path)); err != nil || ack.Generation != 1 {
		t.Fatalf("ack %+v %v, want generation 1", ack, err)
	}
	if err := WriteWANRule(path, WANRule{Generation: 2}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		ack, err := ReadWANRule(Ack(path))
		return err == nil && ack.Generation == 2, "generation 2 to be acknowledged"
	})
	if w.isBlocked("127.0.0.1:1") {
		t.Fatal("the heal is acknowledged but the address is still blocked")
	}
	if w, _, err := WANFromEnv(ctx, []string{"OTHER=1"}); w != nil || err != nil {
		t.Fatalf("without the variable: %v, %v; want nothing", w, err)
	}
}
