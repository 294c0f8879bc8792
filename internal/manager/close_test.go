package manager

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// TestCloseWhileLeaderLoopWaitsOnRaft: Close right as a one-manager group
// elects itself, while the leader loop's first Barrier is in flight, returns
// every time. hashicorp/raft never answers a future still queued in its
// buffered apply channel (BatchApplyCh) when Shutdown comes, and may queue one
// asked for during the shutdown, so a Close that shut Raft down before the
// leader loop ended hung in bgWG.Wait with lead() blocked in Barrier().Error().
func TestCloseWhileLeaderLoopWaitsOnRaft(t *testing.T) {
	base := t.TempDir()
	for i := range 20 {
		// The Barrier is asked for as Close begins.
		m := newLeaderToClose(t, base, i, func(m *Manager) { <-m.shutdown })
		closeWithin(t, m, i)
	}
}

// TestCloseWhileReadsWaitOnRaft: reads asking Raft to verify leadership
// (VerifyLeader, a future queued in a buffered channel) while the manager
// closes all return, and Close too.
func TestCloseWhileReadsWaitOnRaft(t *testing.T) {
	base := t.TempDir()
	for i := range 10 {
		m := newLeaderToClose(t, base, i, nil)
		readersDone := make(chan struct{})
		var readers sync.WaitGroup
		for range 4 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				for {
					select {
					case <-m.shutdown:
						return
					default:
					}
					_ = m.checkRead()
				}
			}()
		}
		go func() { readers.Wait(); close(readersDone) }()
		closeWithin(t, m, i)
		testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
			select {
			case <-readersDone:
				return true, ""
			default:
				return false, fmt.Sprintf("iteration %d: the reads to return after Close (a VerifyLeader future was never answered)", i)
			}
		})
	}
}

// newLeaderToClose starts a one-manager group on raft's in-memory transport
// and waits until Raft has elected it; beforeBarrier, if set, runs as its
// leader loop begins the term.
func newLeaderToClose(t *testing.T, base string, i int, beforeBarrier func(*Manager)) *Manager {
	t.Helper()
	addr, tr := raft.NewInmemTransport("")
	c := DefaultConfig()
	c.NodeID = fmt.Sprintf("m%d", i)
	c.DataDir = filepath.Join(base, c.NodeID)
	c.RaftAddr, c.RaftAdvertise = string(addr), string(addr)
	c.RPCAddr, c.RPCAdvertise = "rpc-"+c.NodeID, "rpc-"+c.NodeID
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	var m *Manager
	var knobs TestingKnobs
	if beforeBarrier != nil {
		knobs.BeforeBarrier = func() { beforeBarrier(m) } // a term begins after Bootstrap, below
	}
	m, err := New(c, Deps{Logger: testutil.Logger(t), Transport: tr, Knobs: knobs})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bootstrap([]raft.Server{{ID: raft.ServerID(c.NodeID), Address: raft.ServerAddress(c.RaftAdvertise)}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.raft.State() == raft.Leader, "the manager to lead"
	})
	return m
}

// closeWithin closes m and fails if Close does not return.
func closeWithin(t *testing.T, m *Manager, i int) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	var cerr error
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		select {
		case cerr = <-closed:
			return true, ""
		default:
			return false, fmt.Sprintf("iteration %d: Close to return (a Raft future it waits on was never answered)", i)
		}
	})
	if cerr != nil {
		t.Fatalf("iteration %d: Close: %v", i, cerr)
	}
	if st := m.raft.State(); st != raft.Shutdown {
		t.Fatalf("iteration %d: raft state %v after Close; want Shutdown", i, st)
	}
}
