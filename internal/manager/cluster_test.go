package manager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// testCluster is an in-process Raft group of managers on loopback, in the style
// of hashicorp/raft's testing.go: real TCP transports, real stores in
// t.TempDir, short timeouts, and waits on conditions instead of sleeps.
type testCluster struct {
	t    testing.TB
	cfgs []Config
	mgrs []*Manager
	// peers is every manager's Deps.Peers: all of them.
	peers PeerTable
	// clock is the managers' clock (Deps.Now; time.Now when unset): a
	// test may change it while they run (setNow).
	clock atomic.Pointer[func() time.Time]
	// skew is each manager's clock offset in a skewed cluster
	// (newSkewedCluster), changeable while it runs.
	skew []*atomic.Int64
	// knobs are every manager's Deps.Knobs (newKnobbedCluster).
	knobs TestingKnobs
}

func (tc *testCluster) now() time.Time {
	if f := tc.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

func (tc *testCluster) setNow(f func() time.Time) { tc.clock.Store(&f) }

// newTestCluster starts n managers and bootstraps them as one group. tweak, if
// not nil, adjusts every manager's configuration.
func newTestCluster(t *testing.T, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	return newKnobbedCluster(t, n, tweak, TestingKnobs{})
}

// newKnobbedCluster is newTestCluster with knobs in every manager's Deps.
func newKnobbedCluster(t testing.TB, n int, tweak func(*Config), knobs TestingKnobs) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, knobs: knobs}
	base := t.TempDir()
	for i := 0; i < n; i++ {
		c := DefaultConfig()
		c.NodeID = fmt.Sprintf("m%d", i+1)
		c.DataDir = filepath.Join(base, c.NodeID)
		c.RaftAddr = "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
		c.RaftAdvertise = c.RaftAddr
		c.RPCAddr = "rpc-" + c.NodeID // not served: tests call the Service directly
		c.RPCAdvertise = c.RPCAddr
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.ElectionTimeout = 500 * time.Millisecond
		c.LeaderLeaseTimeout = 250 * time.Millisecond
		c.Idempotency.CleanupInterval = time.Second
		if tweak != nil {
			tweak(&c)
		}
		tc.cfgs = append(tc.cfgs, c)
	}
	tc.mgrs = make([]*Manager, n)
	tc.knowEachOther()
	for i := range tc.cfgs {
		tc.start(i)
	}
	var servers []raft.Server
	for _, c := range tc.cfgs {
		servers = append(servers, raft.Server{ID: raft.ServerID(c.NodeID), Address: raft.ServerAddress(c.RaftAdvertise)})
	}
	if err := tc.mgrs[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.closeAll)
	tc.leader()
	return tc
}

// start (re)starts manager i on its data directory.
func (tc *testCluster) start(i int) {
	tc.t.Helper()
	m, err := New(tc.cfgs[i], Deps{Logger: testutil.Logger(tc.t).With("m", i+1), Now: tc.now, Peers: &tc.peers, Knobs: tc.knobs})
	if err != nil {
		tc.t.Fatalf("start %s: %v", tc.cfgs[i].NodeID, err)
	}
	tc.mgrs[i] = m
}

// knowEachOther records every manager of the cluster in tc.peers, on this
// build's protocol.
func (tc *testCluster) knowEachOther() {
	for _, c := range tc.cfgs {
		tc.peers.Set(c.NodeID, Peer{RPCAddr: c.RPCAdvertise})
	}
}

func (tc *testCluster) stop(i int) {
	if m := tc.mgrs[i]; m != nil {
		if err := m.Close(); err != nil {
			tc.t.Logf("close %d: %v", i, err)
		}
		tc.mgrs[i] = nil
	}
}

func (tc *testCluster) closeAll() {
	var wg sync.WaitGroup
	for i := range tc.mgrs {
		wg.Add(1)
		go func() { defer wg.Done(); tc.stop(i) }()
	}
	wg.Wait()
}

// leader waits for a serving leader and returns its index.
func (tc *testCluster) leader() int {
	tc.t.Helper()
	idx := -1
	testutil.WaitFor(tc.t, 15*time.Second, func() (bool, string) {
		for i, m := range tc.mgrs {
			if m != nil && m.CheckLeader() == nil {
				idx = i
				return true, ""
			}
		}
		return false, "a serving leader"
	})
	return idx
}

func (tc *testCluster) submit(ctx context.Context, i int, tenant, key, fp, typ, payload string, waitMillis int64) (*rpcpb.SubmitResponse, error) {
	req := &rpcpb.SubmitRequest{Tenant: tenant, Key: key, Fingerprint: fp, WaitMillis: waitMillis}
	req.Job = &rpcpb.JobRequest{Type: typ, Payload: []byte(payload), Datacenters: []string{"dc1"}}
	return tc.mgrs[i].Submit(ctx, req)
}

// submitToLeader submits at whichever manager leads, following leadership
// changes as a gate does (retrying NotLeader and Unavailable), so tests that
// are not about leadership do not fail when a loaded machine causes an
// election.
func (tc *testCluster) submitToLeader(ctx context.Context, tenant, key, fp, typ, payload string, waitMillis int64) (*rpcpb.SubmitResponse, error) {
	for {
		i := tc.leaderNow()
		if i >= 0 {
			r, err := tc.submit(ctx, i, tenant, key, fp, typ, payload, waitMillis)
			if !errors.Is(err, rpc.ErrNotLeader) && !errors.Is(err, rpc.ErrUnavailable) {
				return r, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// leaderNow returns the index of a serving leader, or -1.
func (tc *testCluster) leaderNow() int {
	for i, m := range tc.mgrs {
		if m != nil && m.CheckLeader() == nil {
			return i
		}
	}
	return -1
}

// waitFSMsApplied waits until every running manager's ledger has applied
// everything any of them has applied: the last answer a leader gave is then
// in every replica's state. It reads the ledgers' own applied index, not
// raft.AppliedIndex, which counts what raft has handed to the FSM, ahead of
// what the FSM has applied (hashicorp/raft's documentation of AppliedIndex):
// a replica's state read right after that index matched could still lack the
// last Commit.
func (tc *testCluster) waitFSMsApplied() {
	tc.t.Helper()
	var want uint64
	for _, m := range tc.mgrs {
		if m != nil {
			want = max(want, m.FSM().Stats().AppliedIndex)
		}
	}
	testutil.WaitFor(tc.t, 10*time.Second, func() (bool, string) {
		for _, m := range tc.mgrs {
			if m != nil && m.FSM().Stats().AppliedIndex < want {
				return false, fmt.Sprintf("%s's ledger to apply index %d (at %d)", m.cfg.NodeID, want, m.FSM().Stats().AppliedIndex)
			}
		}
		return true, ""
	})
}

// manualClock is a manager clock for tests that moves only when told to.
type manualClock = testutil.Clock

func newManualClock() *manualClock { return testutil.NewClock(time.Now()) }
