package manager

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxAfterASnapshotInstallOnTheNextLeader: dc1 admits jobs for dc1
// and dc2 while dc2 is unreachable, up to MANAGER_OUTBOX_MAX_ENTRIES. A
// follower loses its data directory and is restored from the leader's
// snapshot (InstallSnapshot: the log it needs was compacted), then becomes
// the leader and the old leader stops. The new leader's bound counts the
// entries pending (503 outbox_full for a new key), and once dc2 is
// reachable its outbox carries every one of them there, once, and admits new
// keys again. (Coverage: passes on main.)
func TestOutboxAfterASnapshotInstallOnTheNextLeader(t *testing.T) {
	const pending = 5
	tc1 := newTestCluster(t, 3, func(c *Config) {
		c.OutboxMaxEntries = pending
		c.SnapshotThreshold = 16
		c.TrailingLogs = 4
	})
	tc2 := newTestCluster(t, 1, func(c *Config) { c.Datacenter = "dc2" })
	m2 := tc2.mgrs[tc2.leader()]
	dc2Addr := serveManagerRPC(t, m2)
	peers, reachable := dc2Peers(t, dc2Addr)
	ctx := ctxT(t)
	submit := func(m *Manager, key string, dcs ...string) (*rpcpb.SubmitResponse, error) {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: dcs}
		return m.Submit(ctx, req)
	}

	l := tc1.leader()
	f := (l + 1) % 3
	tc1.stop(f)
	if err := os.RemoveAll(tc1.cfgs[f].DataDir); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for i := range pending {
		key := fmt.Sprintf("multi-%d", i)
		r, err := submit(tc1.mgrs[l], key, "dc1", "dc2")
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
		ids[key] = r.JobId
	}
	for i := range 40 { // past the snapshot threshold and the trailing logs
		if r, err := submit(tc1.mgrs[l], fmt.Sprintf("single-%d", i), "dc1"); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("single-%d: %+v %v", i, r, err)
		}
	}
	if err := tc1.mgrs[l].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	// The follower comes back empty and is restored from the snapshot.
	tc1.start(f)
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		return tc1.mgrs[f].FSM().OutboxLen() == pending, "the restored follower's ledger to count the entries pending"
	})
	if err := tc1.mgrs[l].raft.LeadershipTransferToServer(raft.ServerID(tc1.cfgs[f].NodeID),
		raft.ServerAddress(tc1.cfgs[f].RaftAdvertise)).Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		return tc1.mgrs[f].CheckLeader() == nil, "the restored follower to lead"
	})
	tc1.stop(l)
	nl := tc1.mgrs[f]

	if _, err := submit(nl, "multi-new", "dc1", "dc2"); !errors.Is(err, rpc.ErrOutboxFull) {
		t.Fatalf("a new multi-datacenter key at the new leader: %v, want outbox_full", err)
	}
	runOutboxes(t, &testCluster{t: t, mgrs: []*Manager{nl}}, peers)
	reachable.Store(true)
	testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
		return nl.FSM().OutboxLen() == 0, "the new leader's outbox to carry every pending entry"
	})
	for key, id := range ids {
		if j, ok := m2.FSM().Job("t", id); !ok || j.Key != key {
			t.Fatalf("dc2 lacks job %s of %s", id, key)
		}
	}
	if n := m2.FSM().Stats().Jobs; n != pending {
		t.Fatalf("dc2 holds %d jobs, want %d", n, pending)
	}
	if r, err := submit(nl, "multi-new", "dc1", "dc2"); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a new multi-datacenter key once the outbox drained: %+v %v", r, err)
	}
}
