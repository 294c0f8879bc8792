package faultnet

import (
	"errors"
	"io"
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
