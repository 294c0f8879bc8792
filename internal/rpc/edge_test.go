package rpc

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestCallerBehindADialEndsAtItsDeadline: a lane is dialled by one
// attempt at a time; the others wait for it. The wait used to be the
// slot's mutex, held for the whole dial: an attempt whose manager stopped
// answering (every dial waits out gRPC's connect timeout) kept each caller
// behind it, past its own deadline, for as many dials as there were callers
// ahead of it. A caller now waits for another's dial only within its own
// deadline.
func TestCallerBehindADialEndsAtItsDeadline(t *testing.T) {
	var dials atomic.Int64
	// A manager that stopped answering: a connection is never made, each
	// dial waits out gRPC's connect timeout (about a second).
	silent := func(ctx context.Context, _ string) (net.Conn, error) {
		dials.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := NewClient(ClientConfig{Resolver: StaticResolver{"192.0.2.1:7000"}, Streams: 1, AttemptTimeout: time.Minute, Dial: silent})
	t.Cleanup(c.Close)

	// Callers with the gate's forward timeout keep the one lane dialling.
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancelLong(); wg.Wait() })
	const callers = 6
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Submit(long, &rpcpb.SubmitRequest{Key: "long"})
		}()
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) { return dials.Load() > 0, "a dial" })

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "short"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	// Behind the others' dials it waited about a second for each.
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("a caller with a 300ms deadline answered after %v", took)
	}
}
