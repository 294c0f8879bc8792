package rpc

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestDialSurvivesConnectionLostAsItBecomesReady: a connection that completes
// the HTTP/2 handshake and is lost at once leaves the gRPC channel IDLE
// (often without a READY in between), and gRPC leaves IDLE only when asked.
// The dial used to wait for a state change that never came, until the
// attempt's deadline (AttemptTimeout plus the submission's wait, a minute in
// the gate's tests): a lost answer for the gate's forward. The dial now asks
// for a new connection, and the submission is answered long before.
func TestDialSurvivesConnectionLostAsItBecomesReady(t *testing.T) {
	svc := newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key}, nil
	})
	backend := serve(t, svc)
	const bad = 5 // the first connections are lost right after the server's preface
	addr := flakyProxy(t, backend, bad)
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, Streams: 1,
		AttemptTimeout: time.Minute, RetryBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	t.Cleanup(c.Close)
	// The caller's deadline is shorter than one attempt's: a dial stuck on an
	// IDLE channel ends only with the caller, unanswered.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "k"})
	if err != nil {
		t.Fatalf("submit through a flaky first connection: %v", err)
	}
	if r.JobId != "j-k" {
		t.Fatalf("answer for job %q, want j-k", r.JobId)
	}
}

// flakyProxy listens on 127.0.0.1 and forwards connections to backend,
// except the first bad ones: those get an HTTP/2 server preface (an empty
// SETTINGS frame) and are closed at once.
func flakyProxy(t *testing.T, backend string, bad int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) { mu.Lock(); conns = append(conns, c); mu.Unlock() }
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			if n < bad {
				_, _ = in.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // SETTINGS, empty, stream 0
				_ = in.Close()
				continue
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				_ = in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return ln.Addr().String()
}
