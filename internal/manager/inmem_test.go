package manager

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// newInmemCluster starts n managers on raft's in-memory transport (Deps.Transport),
// every pair connected, and bootstraps them as one group: no socket, and
// partitions are Disconnect calls.
func newInmemCluster(t *testing.T, n int) (*testCluster, []*raft.InmemTransport) {
	t.Helper()
	tc := &testCluster{t: t, mgrs: make([]*Manager, n)}
	base := t.TempDir()
	var trans []*raft.InmemTransport
	var servers []raft.Server
	for i := 0; i < n; i++ {
		addr, tr := raft.NewInmemTransport("")
		c := DefaultConfig()
		c.NodeID = fmt.Sprintf("m%d", i+1)
		c.DataDir = filepath.Join(base, c.NodeID)
		c.RaftAddr, c.RaftAdvertise = string(addr), string(addr)
		c.RPCAddr = "rpc-" + c.NodeID
		c.RPCAdvertise = c.RPCAddr
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.ElectionTimeout = 500 * time.Millisecond
		c.LeaderLeaseTimeout = 250 * time.Millisecond
		tc.cfgs = append(tc.cfgs, c)
		trans = append(trans, tr)
		servers = append(servers, raft.Server{ID: raft.ServerID(c.NodeID), Address: addr})
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	t.Cleanup(tc.closeAll)
	tc.knowEachOther()
	for i, c := range tc.cfgs {
		m, err := New(c, Deps{Logger: testutil.Logger(t).With("m", i+1), Transport: trans[i], Peers: &tc.peers})
		if err != nil {
			t.Fatalf("start %s: %v", c.NodeID, err)
		}
		tc.mgrs[i] = m
	}
	if err := tc.mgrs[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	return tc, trans
}

func TestNewRejectsTransportAtAnotherAddress(t *testing.T) {
	_, tr := raft.NewInmemTransport("")
	c := DefaultConfig()
	c.NodeID, c.DataDir = "m1", t.TempDir()
	c.RaftAdvertise = "127.0.0.1:1"
	if m, err := New(c, Deps{Transport: tr}); err == nil {
		m.Close()
		t.Fatal("New accepted a transport whose address is not RaftAdvertise")
	}
}

// TestInmemTransportPartitionedLeaderIsReplaced proves the transport seam: a
// cluster on raft.NewInmemTransport elects a leader and commits; the leader
// cut off from both followers (Disconnect, both directions) is replaced by a
// leader of the majority side, which keeps the committed job; after the heal
// the old leader follows and holds the jobs of both terms.
func TestInmemTransportPartitionedLeaderIsReplaced(t *testing.T) {
	tc, trans := newInmemCluster(t, 3)
	ctx := ctxT(t)
	l := tc.leader()
	first, err := tc.submit(ctx, l, "t", "c:1:0123456789abcdef", "fp", "demo", "1", 0)
	if err != nil || first.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("first submission: %+v %v", first, err)
	}

	for i, tr := range trans {
		if i != l {
			tr.Disconnect(trans[l].LocalAddr())
			trans[l].Disconnect(tr.LocalAddr())
		}
	}
	var nl int
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		for i, m := range tc.mgrs {
			if i != l && m.checkLeader() == nil {
				nl = i
				return true, ""
			}
		}
		return false, "a serving leader on the majority side"
	})
	replay, err := tc.submit(ctx, nl, "t", "c:1:0123456789abcdef", "fp", "demo", "1", 0)
	if err != nil || replay.JobID != first.JobID {
		t.Fatalf("the new leader must answer the committed key with job %s: %+v %v", first.JobID, replay, err)
	}
	second, err := tc.submit(ctx, nl, "t", "c:2:0123456789abcdef", "fp", "demo", "2", 0)
	if err != nil || second.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submission on the majority side: %+v %v", second, err)
	}
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		return tc.mgrs[l].Raft().State() != raft.Leader, "the isolated leader to step down"
	})

	for i, tr := range trans {
		if i != l {
			tr.Connect(trans[l].LocalAddr(), trans[l])
			trans[l].Connect(tr.LocalAddr(), tr)
		}
	}
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		e, ok := tc.mgrs[l].FSM().Entry("t", "c:2:0123456789abcdef")
		return ok && e.JobID == second.JobID, "the old leader to catch up after the heal"
	})
}
