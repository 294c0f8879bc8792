package managerd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestStopAnswersTheLongPolls: a manager told to stop while a worker's long
// poll waits at it answers the poll at once, as at the end of its wait (no
// job), exits 0 and says so in its last log line; it does not hold its
// shutdown for the poll (up to a minute) while serving no new call, then cut
// it with no answer.
func TestStopAnswersTheLongPolls(t *testing.T) {
	env, rpcAddr := soloManagerEnv(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, exit, logs := runUntilLeader(t, ctx, env)

	client := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{rpcAddr}})
	defer client.Close()
	before := m.Raft().AppliedIndex()
	type answer struct {
		resp *rpcpb.LeaseResponse
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		lctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
		defer stop()
		resp, err := client.Lease(lctx, &rpcpb.LeaseRequest{Tenant: "default", Worker: "w", WaitNanos: int64(time.Minute)})
		got <- answer{resp, err}
	}()
	// The poll's first Lease, empty, is applied before it waits.
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		i := m.Raft().AppliedIndex()
		return i > before, fmt.Sprintf("applied index %d", i)
	})
	cancel()
	a := <-got
	if a.err != nil || len(a.resp.GetLeases()) != 0 {
		t.Errorf("the long poll at the stop: %v, %v", a.resp, a.err)
	}
	if code := <-exit; code != config.ExitOK {
		t.Fatalf("exit %d; log:\n%s", code, logs.String())
	}
	// The last line says the stop was clean.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="manager stopped"`) {
		t.Errorf("last log line %q", last)
	}
}
