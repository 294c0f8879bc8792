package rpc

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// A manager the resolver no longer names (replaced, moved, gone) keeps no
// connection in the client: gRPC would dial a dead one again every second
// or so for as long as the client lives. The next call that reads the
// resolver closes it, and reaches the manager that took its place.
func TestClientDropsTheConnectionsOfManagersNoLongerResolved(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close()
	replacement := serve(t, &fakeManager{leader: true})
	var mu sync.Mutex
	managers := []string{gone}
	c := NewClient(ClientConfig{AttemptTimeout: time.Minute, MaxAttempts: 1, Resolver: ResolverFunc(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return managers
	})})
	t.Cleanup(c.Close)
	if _, err := c.GetJob(context.Background(), "t1", "j-1"); err == nil {
		t.Fatal("a call to a manager that is gone succeeded")
	}
	mu.Lock()
	managers = []string{replacement}
	mu.Unlock()
	if _, err := c.GetJob(context.Background(), "t1", "j-1"); err != nil {
		t.Fatalf("a call once the resolver names the replacement: %v", err)
	}
	c.mu.Lock()
	_, kept := c.conns[gone]
	c.mu.Unlock()
	if kept {
		t.Fatalf("the client keeps a connection to %s, which the resolver no longer names", gone)
	}
}
