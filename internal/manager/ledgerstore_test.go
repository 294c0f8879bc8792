package manager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// submitN submits keys prefix0..prefix(n-1) and returns their job IDs.
func (tc *testCluster) submitN(prefix string, n int) map[string]string {
	tc.t.Helper()
	ctx := ctxT(tc.t)
	ids := map[string]string{}
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			tc.t.Fatalf("%s: %+v %v", k, r, err)
		}
		ids[k] = r.JobId
	}
	return ids
}

// A manager restarted on a disk ledger goes on from the ledger's applied
// index: it never reads its snapshot (here made unreadable after the stop),
// and every job is there with its ID.
func TestRestartGoesOnFromTheLedgerOnDisk(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.SnapshotThreshold = 16; c.TrailingLogs = 4 })
	ids := tc.submitN("before", 40)
	if err := tc.mgrs[0].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for k, id := range tc.submitN("after", 10) {
		ids[k] = id
	}
	tc.closeAll()

	snaps, err := filepath.Glob(filepath.Join(tc.cfgs[0].DataDir, "raft", "snapshots", "*", "state.bin"))
	if err != nil || len(snaps) == 0 {
		t.Fatalf("no snapshot on disk (%v)", err)
	}
	for _, p := range snaps {
		if err := os.WriteFile(p, []byte("not a snapshot"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tc.start(0)
	tc.leader()
	ctx := ctxT(t)
	for k, id := range ids {
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.JobId != id || !r.Replayed {
			t.Fatalf("after restart %s: %+v %v (want %s)", k, r, err, id)
		}
	}
	if st := tc.mgrs[0].FSM().Stats(); st.Jobs != len(ids) {
		t.Fatalf("jobs after restart: %+v, want %d", st, len(ids))
	}
}

// A disk ledger behind the newest snapshot (here: removed, as if its disk was
// replaced) is restored from the snapshot and the log after it.
func TestLedgerBehindTheSnapshotIsRestored(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.SnapshotThreshold = 16; c.TrailingLogs = 4 })
	ids := tc.submitN("k", 30)
	if err := tc.mgrs[0].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for k, id := range tc.submitN("later", 5) {
		ids[k] = id
	}
	tc.closeAll()
	if err := os.RemoveAll(filepath.Join(tc.cfgs[0].DataDir, "ledger")); err != nil {
		t.Fatal(err)
	}
	tc.start(0)
	tc.leader()
	ctx := ctxT(t)
	for k, id := range ids {
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.JobId != id || !r.Replayed {
			t.Fatalf("after restore %s: %+v %v (want %s)", k, r, err, id)
		}
	}
}

// A disk ledger past everything the Raft directory holds belongs to another
// history: the manager refuses to start rather than skip entries it never
// applied.
func TestLedgerAheadOfTheLogIsRefused(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.submitN("k", 5)
	tc.closeAll()
	if err := os.RemoveAll(filepath.Join(tc.cfgs[0].DataDir, "raft")); err != nil {
		t.Fatal(err)
	}
	m, err := New(tc.cfgs[0], Deps{Logger: testutil.Logger(t)})
	if !errors.Is(err, ErrLedgerAhead) {
		if m != nil {
			_ = m.Close()
		}
		t.Fatalf("New: %v, want ErrLedgerAhead", err)
	}
}

// MANAGER_LEDGER_STORE=memory keeps the ledger in RAM: nothing is written
// under DataDir/ledger, and a restart rebuilds it from the snapshot and log.
func TestLedgerInMemory(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.LedgerStore = "memory"; c.SnapshotThreshold = 16; c.TrailingLogs = 4 })
	ids := tc.submitN("k", 20)
	if err := tc.mgrs[0].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tc.closeAll()
	if _, err := os.Stat(filepath.Join(tc.cfgs[0].DataDir, "ledger")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ledger directory with MANAGER_LEDGER_STORE=memory: %v", err)
	}
	tc.start(0)
	tc.leader()
	ctx := ctxT(t)
	for k, id := range ids {
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.JobId != id || !r.Replayed {
			t.Fatalf("after restart %s: %+v %v (want %s)", k, r, err, id)
		}
	}
}
