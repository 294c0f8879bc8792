package rpc

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// stallingManager opens submit streams and never reads them: with its
// flow-control window fixed at the minimum, a client's Send blocks once a
// stream holds more than the window.
type stallingManager struct {
	rpcpb.UnimplementedManagerServer
	mu     sync.Mutex
	opened int
}

func (s *stallingManager) Submit(st grpc.BidiStreamingServer[rpcpb.SubmitBatch, rpcpb.SubmitResults]) error {
	s.mu.Lock()
	s.opened++
	s.mu.Unlock()
	<-st.Context().Done()
	return nil
}

func (s *stallingManager) streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

func serveStalling(t *testing.T) (string, *stallingManager) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A fixed window turns off gRPC's dynamic (BDP) window, which could grow
	// past what the test sends.
	srv := grpc.NewServer(grpc.InitialWindowSize(1<<16), grpc.InitialConnWindowSize(1<<16),
		grpc.MaxRecvMsgSize(maxMessageBytes))
	m := &stallingManager{}
	rpcpb.RegisterManagerServer(srv, m)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String(), m
}

// sentOn reports whether addr's lane (the client has one per manager) has
// sent a call of what ("submit", "heartbeat") that waits for its answer.
func sentOn(c *Client, addr, what string) (bool, string) {
	c.mu.Lock()
	p := c.peers[addr]
	c.mu.Unlock()
	if p == nil {
		return false, "no lane to " + addr
	}
	s := &p.slots[0]
	s.mu.Lock()
	l := s.l
	s.mu.Unlock()
	if l == nil {
		return false, "no lane to " + addr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, call := range l.pending {
		if call.sent && (what == "submit") == (call.item.GetRequest() != nil) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%d calls wait on the lane to %s, no %s sent", len(l.pending), addr, what)
}

// A worker call whose attempt timed out while its lane's Send still held
// it (blocked on flow control) is sent again on another lane. Each attempt
// must send an item of its own: the lane writes the item's id and timeout
// as it sends it, and the first lane's Send may still be reading it (run
// with -race). Sharing it could also send the first lane's message with the
// second lane's id, the answer of one call then going to another call.
func TestWorkerCallAttemptsDoNotShareTheirItem(t *testing.T) {
	a, _ := serveStalling(t)
	b, bm := serveStalling(t)
	c := NewClient(ClientConfig{Resolver: StaticResolver{a, b}, Streams: 1, AttemptTimeout: 100 * time.Millisecond})
	defer c.Close()
	c.setLeader(a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls sync.WaitGroup
	defer calls.Wait()
	defer cancel()

	// A large submission fills a's stream window, and stays unanswered
	// (its wait lengthens its attempt past the test).
	calls.Add(1)
	go func() {
		defer calls.Done()
		_, _ = c.Submit(ctx, &rpcpb.SubmitRequest{Key: "big", WaitMillis: time.Hour.Milliseconds(),
			Job: &rpcpb.JobRequest{Type: "t", Payload: []byte(strings.Repeat("p", 1<<20))}})
	}()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) { return sentOn(c, a, "submit") })

	// The heartbeat is encoded, then its Send waits for a's window; its
	// attempt times out, and a later one is sent on b's lane.
	calls.Add(1)
	go func() {
		defer calls.Done()
		_, _ = c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{JobId: "hb", LeaseId: "l"})
	}()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		if bm.streams() == 0 {
			return false, "no stream to b yet"
		}
		return sentOn(c, b, "heartbeat")
	})
}
