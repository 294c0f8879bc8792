package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

func submit(ctx context.Context, m *manager.Manager, key, payload string) (*rpcpb.SubmitResponse, error) {
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(payload), Datacenters: []string{"dc1"}}
	return m.Submit(ctx, req)
}

func serving(m *manager.Manager) bool {
	st, err := m.Status(context.Background())
	return err == nil && st.IsLeader
}

// TestInmemTransportPartitionedLeaderIsReplaced proves the transport seam
// (Deps.Transport): a cluster on raft.NewInmemTransport (managertest) elects
// a leader and commits; the leader cut off from both followers (Disconnect,
// both directions) is replaced by a leader of the majority side, which keeps
// the committed job; after the heal the old leader follows and holds the jobs
// of both terms.
func TestInmemTransportPartitionedLeaderIsReplaced(t *testing.T) {
	c := managertest.Start(t, managertest.Options{Managers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Leader(t)
	l := -1
	for i, m := range c.Managers {
		if m == leader {
			l = i
		}
	}
	first, err := submit(ctx, leader, "c:1:0123456789abcdef", "1")
	if err != nil || first.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("first submission: %+v %v", first, err)
	}

	trans := c.Transports
	for i, tr := range trans {
		if i != l {
			tr.Disconnect(trans[l].LocalAddr())
			trans[l].Disconnect(tr.LocalAddr())
		}
	}
	var nl int
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		for i, m := range c.Managers {
			if i != l && serving(m) {
				nl = i
				return true, ""
			}
		}
		return false, "a serving leader on the majority side"
	})
	replay, err := submit(ctx, c.Managers[nl], "c:1:0123456789abcdef", "1")
	if err != nil || replay.JobId != first.JobId {
		t.Fatalf("the new leader must answer the committed key with job %s: %+v %v", first.JobId, replay, err)
	}
	second, err := submit(ctx, c.Managers[nl], "c:2:0123456789abcdef", "2")
	if err != nil || second.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submission on the majority side: %+v %v", second, err)
	}
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		return c.Managers[l].Raft().State() != raft.Leader, "the isolated leader to step down"
	})

	for i, tr := range trans {
		if i != l {
			tr.Connect(trans[l].LocalAddr(), trans[l])
			trans[l].Connect(tr.LocalAddr(), tr)
		}
	}
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		e, ok := c.Managers[l].FSM().Entry("t", "c:2:0123456789abcdef")
		return ok && e.JobID == second.JobId, "the old leader to catch up after the heal"
	})
}
