package faultnet

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBlockRefusesAndClosesAndHeals(t *testing.T) {
	a, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	accepted := make(chan error, 4)
	go func() {
		for {
			c, err := b.Accept()
			if err != nil {
				accepted <- err
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	target := b.Addr().String()
	c, err := a.Dial(raft.ServerAddress(target), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.Block([]string{target})
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write on a connection to a blocked peer must fail: it was closed")
	}
	if _, err := a.Dial(raft.ServerAddress(target), time.Second); !errors.Is(err, ErrBlocked) {
		t.Fatalf("want ErrBlocked, got %v", err)
	}
	if got := a.Blocked(); len(got) != 1 || got[0] != target {
		t.Fatalf("Blocked() = %v", got)
	}
	a.Block(nil)
	c2, err := a.Dial(raft.ServerAddress(target), time.Second)
	if err != nil {
		t.Fatalf("healed dial: %v", err)
	}
	c2.Close()
	b.Close()
	<-accepted
}

func TestUnroutableAdvertise(t *testing.T) {
	if _, err := Listen("0.0.0.0:0", ""); err == nil {
		t.Fatal("0.0.0.0 must not be advertised")
	}
}

func TestCloseClosesEveryConnection(t *testing.T) {
	a, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := a.Accept()
		if err == nil {
			acc <- c
		}
		close(acc)
	}()
	out, err := b.Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in := <-acc
	if in == nil {
		t.Fatal("no accepted connection")
	}
	a.Close()
	// The accepted side was closed by a.Close: reading it fails at once, and
	// the dialer sees EOF.
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("accepted connection still open after Close")
	}
	_ = out.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := out.Read(make([]byte, 1)); err == nil {
		t.Fatal("peer did not see the connection close")
	}
}
