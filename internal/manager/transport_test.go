package manager

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestTCPLayerUnroutableAdvertise(t *testing.T) {
	if l, err := listenTCP("0.0.0.0:0", ""); err == nil {
		l.Close()
		t.Fatal("0.0.0.0 must not be advertised")
	}
}

// TestTCPLayerCloseClosesEveryConnection: raft's NetworkTransport closes only
// the listener; the layer must close what it accepted and dialed, or a peer's
// handler goroutine reads forever.
func TestTCPLayerCloseClosesEveryConnection(t *testing.T) {
	a, err := listenTCP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := listenTCP("127.0.0.1:0", "")
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
	dialed, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("accepted connection still open after Close")
	}
	if _, err := dialed.Write([]byte("x")); err == nil {
		t.Fatal("dialed connection still open after Close")
	}
	_ = out.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := out.Read(make([]byte, 1)); err == nil {
		t.Fatal("peer did not see the connection close")
	}
}
