package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// serveRPC serves every manager of tc with rpc.NewServer on its RPC address,
// as Main does, until the test ends.
func serveRPC(t *testing.T, tc *testCluster) {
	t.Helper()
	for i, m := range tc.mgrs {
		ln, err := net.Listen("tcp", tc.cfgs[i].RPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		rpctest.Serve(t, rpc.NewServer(m, rpc.ServerConfig{}), ln)
	}
}

// TestSubmitOverTheStream drives real managers through the gate's client: a
// follower's not_leader hint leads to the leader, the ledger's outcomes and
// codes cross the stream, and reads share the port.
func TestSubmitOverTheStream(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		c.RPCAdvertise = c.RPCAddr
	})
	serveRPC(t, tc)
	l := tc.leader()
	f := (l + 1) % len(tc.mgrs)
	c := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{tc.cfgs[f].RPCAdvertise}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "k1", Fingerprint: "fp1", WaitMillis: 1000,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: json.RawMessage(`{"a":1}`), Datacenters: []string{"dc1"}}}
	r1, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Outcome != rpc.OutcomeCommitted || r1.Replayed || r1.Job == nil || string(r1.Job.Payload) != `{"a":1}` || respExpiresAt(r1).IsZero() {
		t.Fatalf("first submission: %+v", r1)
	}
	if got := c.Leader(); got != tc.cfgs[l].RPCAdvertise {
		t.Fatalf("client leader %q, want %q", got, tc.cfgs[l].RPCAdvertise)
	}
	r2, err := c.Submit(ctx, req)
	if err != nil || r2.Outcome != rpc.OutcomeCommitted || !r2.Replayed || r2.JobId != r1.JobId {
		t.Fatalf("retry: %v %+v", err, r2)
	}
	other := proto.Clone(req).(*rpcpb.SubmitRequest)
	other.Fingerprint = "fp2"
	if r3, err := c.Submit(ctx, other); err != nil || r3.Outcome != rpc.OutcomeKeyReused || r3.JobId != r1.JobId {
		t.Fatalf("reused key: %v %+v", err, r3)
	}
	bad := proto.Clone(req).(*rpcpb.SubmitRequest)
	bad.Key = `"quoted"`
	if _, err := c.Submit(ctx, bad); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("invalid submission: want ErrInvalid, got %v", err)
	}
	job, err := c.GetJob(ctx, "t", r1.JobId)
	if err != nil || job.JobId != r1.JobId || job.IdempotencyKey != "k1" {
		t.Fatalf("read over HTTP on the same port: %v %+v", err, job)
	}
}
