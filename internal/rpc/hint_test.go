package rpc

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// A not_leader hint is a follower's word, not an answer: the client asks
// the address it names, but takes it for the leader only once it answers
// as one. A hint that names a listener where no manager serves (another
// gRPC service on that port: Unimplemented) is not the call's answer, so
// the call goes on to the resolver's managers and reaches the leader; a
// hint that names a listener that never answers, which the caller gives up
// on, leaves no leader behind, so the next calls are not sent there first.
func TestClientDoesNotTakeAWrongHintForTheLeader(t *testing.T) {
	// pick's round robin starts with the resolver's second address: the
	// follower is asked first.
	t.Run("no manager serves there", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		other := grpc.NewServer() // serves no service of ours
		served := make(chan struct{})
		go func() { defer close(served); _ = other.Serve(ln) }()
		t.Cleanup(func() { other.Stop(); <-served })
		leader := &fakeManager{leader: true}
		laddr := serve(t, leader)
		follower := &fakeManager{leaderRPC: ln.Addr().String()}
		faddr := serve(t, follower)
		c := newClient(t, laddr, faddr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.GetJob(ctx, "t1", "j-1"); err != nil {
			t.Fatalf("GetJob after a hint to a listener of another service: %v", err)
		}
		if got := c.Leader(); got != laddr {
			t.Fatalf("Leader() = %q, want the leader %s", got, laddr)
		}
	})
	t.Run("nothing answers there", func(t *testing.T) {
		silent, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var conns []net.Conn
		wg.Go(func() { // accepts and says nothing
			for {
				conn, err := silent.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}
		})
		t.Cleanup(func() {
			_ = silent.Close()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			for _, conn := range conns {
				_ = conn.Close()
			}
		})
		leader := &fakeManager{leader: true}
		laddr := serve(t, leader)
		follower := &fakeManager{leaderRPC: silent.Addr().String()}
		faddr := serve(t, follower)
		c := newClient(t, laddr, faddr) // AttemptTimeout a minute: the caller gives up first
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := c.GetJob(ctx, "t1", "j-1"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("GetJob given up on at the silent hint: %v, want unavailable", err)
		}
		if got := c.Leader(); got == silent.Addr().String() {
			t.Fatalf("Leader() = %s, the hint nothing answered at", got)
		}
	})
}
