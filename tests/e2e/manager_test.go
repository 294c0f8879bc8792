package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/tests/localcluster"
)

func managerClient(c *localcluster.Cluster) *rpc.Client {
	var addrs []string
	for _, m := range c.Managers {
		addrs = append(addrs, m.HTTPAddr)
	}
	return c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver(addrs), AttemptTimeout: 2 * time.Second})
}

func submitKey(ctx context.Context, cl *rpc.Client, key string) (*rpcpb.SubmitResponse, error) {
	return cl.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "default", Key: key, Fingerprint: "fp-" + key,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`{"k":"` + key + `"}`), Datacenters: []string{"dc1"}}, WaitMillis: 5000})
}

// Three manager processes elect a leader and serve; kill -9 of the leader loses
// no committed entry and the new leader answers the same keys with the same job
// ids; kill -9 of all three and a restart from their data directories loses
// nothing that was acknowledged.
func TestManagersSurviveKillNine(t *testing.T) {
	c := startCluster(t, 3, 0, nil)
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	cl := managerClient(c)
	defer cl.CloseIdleConnections()

	acked := map[string]string{}
	submitAll := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			key := fmt.Sprintf("e2e-client:%d:0123456789abcdef", i)
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			r, err := submitKey(sctx, cl, key)
			cancel()
			if err != nil {
				t.Fatalf("submit %s: %v", key, err)
			}
			if r.Outcome != rpc.OutcomeCommitted {
				t.Fatalf("submit %s: outcome %s", key, r.Outcome)
			}
			if prev, ok := acked[key]; ok && prev != r.JobId {
				t.Fatalf("key %s answered with two job ids: %s then %s", key, prev, r.JobId)
			}
			acked[key] = r.JobId
		}
	}
	verify := func(stage string) {
		t.Helper()
		for key, id := range acked {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			r, err := submitKey(sctx, cl, key)
			cancel()
			if err != nil {
				t.Fatalf("%s: resubmit %s: %v", stage, key, err)
			}
			if r.JobId != id || r.Outcome != rpc.OutcomeCommitted || !r.Replayed {
				t.Fatalf("%s: key %s: got %s (%s, replayed=%v), acknowledged %s", stage, key, r.JobId, r.Outcome, r.Replayed, id)
			}
			job, err := cl.GetJob(ctx, "default", id)
			if err != nil || job.JobId != id {
				t.Fatalf("%s: job %s lost: %v", stage, id, err)
			}
		}
	}

	submitAll(0, 50)
	// On a loaded machine an election may be under way: the leader to kill is
	// the one every manager agrees on once it is over.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing leader %s (pid %d)", leader.Name, leader.PID())
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	nl, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nl == leader {
		t.Fatal("killed manager still leads")
	}
	verify("after leader kill")
	submitAll(50, 80)

	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Managers {
		if m.Running() {
			if err := m.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Log("killed all three managers; restarting from their data directories")
	for _, m := range c.Managers {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	verify("after kill -9 of all and restart")
}
