package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// startKnobbed (re)starts manager i on its data directory with knobs of its
// own (the others keep tc.knobs).
func (tc *testCluster) startKnobbed(i int, knobs TestingKnobs) {
	tc.t.Helper()
	m, err := New(tc.cfgs[i], Deps{Logger: testutil.Logger(tc.t).With("m", i+1), Now: tc.now, Peers: &tc.peers, Knobs: knobs})
	if err != nil {
		tc.t.Fatalf("start %s: %v", tc.cfgs[i].NodeID, err)
	}
	tc.mgrs[i] = m
}

// follower returns the index of a running manager that does not lead.
func (tc *testCluster) follower() int {
	tc.t.Helper()
	l := tc.leader()
	for i, m := range tc.mgrs {
		if i != l && m != nil {
			return i
		}
	}
	tc.t.Fatal("no follower")
	return -1
}

// hold is a knob that blocks its first call until released, and says when
// that call began.
type hold struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newHold() *hold { return &hold{held: make(chan struct{}), release: make(chan struct{})} }

func (h *hold) knob() {
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return
	}
	close(h.held)
	<-h.release
}

func (h *hold) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never began", what)
	}
}

// stopHeld stops manager i, which a hold keeps inside a snapshot's Persist
// or Restore: Close begins while it is held (Raft is shutting down when
// the hold ends), and then the hold is released so that Close can finish.
func (tc *testCluster) stopHeld(i int, h *hold) {
	tc.t.Helper()
	m := tc.mgrs[i]
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	testutil.WaitFor(tc.t, 10*time.Second, func() (bool, string) {
		return m.raft.State() == raft.Shutdown, "Raft to begin its shutdown"
	})
	close(h.release)
	select {
	case err := <-done:
		if err != nil {
			tc.t.Logf("close %d: %v", i, err)
		}
	case <-time.After(20 * time.Second):
		tc.t.Fatal("Close did not return once the snapshot was released")
	}
	tc.mgrs[i] = nil
}

// crashImage copies manager i's data directory as it is now: what a kill -9
// at this instant leaves on disk (nothing the process buffers outside the
// kernel survives it, and the copy has none of that either).
func (tc *testCluster) crashImage(i int) string {
	tc.t.Helper()
	dst := filepath.Join(tc.t.TempDir(), "image")
	if err := os.CopyFS(dst, os.DirFS(tc.cfgs[i].DataDir)); err != nil {
		tc.t.Fatalf("copy the data directory of %s: %v", tc.cfgs[i].NodeID, err)
	}
	return dst
}

// putImage replaces manager i's (stopped) data directory with image.
func (tc *testCluster) putImage(i int, image string) {
	tc.t.Helper()
	dir := tc.cfgs[i].DataDir
	if err := os.RemoveAll(dir); err != nil {
		tc.t.Fatal(err)
	}
	if err := os.Rename(image, dir); err != nil {
		tc.t.Fatal(err)
	}
}

// checkAcknowledged checks that every key of ids (all answered Committed)
// is in manager i's ledger with its job ID and only that one, that the
// leader answers each as a replay of that job, and that the cluster still
// commits new keys, on manager i too.
func (tc *testCluster) checkAcknowledged(i int, ids map[string]string) {
	tc.t.Helper()
	tc.leader()
	for k, id := range tc.submitN("after-restart-", 5) {
		ids[k] = id
	}
	tc.waitFSMsApplied()
	f := tc.mgrs[i].FSM()
	for k, id := range ids {
		e, ok := f.Entry("t", k)
		if !ok || e.JobID != id {
			tc.t.Fatalf("%s's ledger: key %s has %+v (found %v), want job %s", tc.cfgs[i].NodeID, k, e, ok, id)
		}
		if j, ok := f.Job("t", id); !ok || j.Key != k {
			tc.t.Fatalf("%s's ledger: job %s of key %s: %+v (found %v)", tc.cfgs[i].NodeID, id, k, j, ok)
		}
	}
	if st := f.Stats(); st.Jobs != len(ids) {
		tc.t.Fatalf("%s's ledger holds %d jobs for %d keys: a key has two jobs, or a job no key", tc.cfgs[i].NodeID, st.Jobs, len(ids))
	}
	ctx := ctxT(tc.t)
	for k, id := range ids {
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.JobId != id || !r.Replayed {
			tc.t.Fatalf("after the restart, %s: %+v %v (want a replay of %s)", k, r, err, id)
		}
	}
}

// partialSnapshots lists the unfinished snapshots in manager i's snapshot
// store.
func (tc *testCluster) partialSnapshots(i int) []string {
	tc.t.Helper()
	tmp, err := filepath.Glob(filepath.Join(tc.cfgs[i].DataDir, "raft", "snapshots", "*.tmp"))
	if err != nil {
		tc.t.Fatal(err)
	}
	return tmp
}

func merge(dst, src map[string]string) {
	for k, v := range src {
		dst[k] = v
	}
}

// snapCrashCases are the stores and the ways a manager stops: gracefully
// (Close), or killed (the crash image of its data directory taken while
// it is held, put back after it stopped).
func snapCrashCases(t *testing.T, run func(t *testing.T, store string, kill bool)) {
	for _, store := range []string{"disk", "memory"} {
		for _, kill := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/kill=%v", store, kill), func(t *testing.T) { run(t, store, kill) })
		}
	}
}

// heldManager is manager i held inside a snapshot by h, with the keys
// acknowledged so far and their job IDs.
type heldManager struct {
	i   int
	h   *hold
	ids map[string]string
	// partial, when set, names what the hold keeps inside the writing of a
	// snapshot into manager i's snapshot store: the crash image must hold
	// the unfinished snapshot, and the restart must remove it.
	partial string
	stopped func() // when set, runs once manager i has stopped
}

// stopWhileHeld runs a snapshot crash test on each store and each way of
// stopping (snapCrashCases): hold brings a cluster of three to a manager
// held inside a snapshot, which is then stopped while the others admit more
// keys, restarted on its data directory (a kill's crash image, taken while
// it was held, put back first), and checked (checkAcknowledged).
func stopWhileHeld(t *testing.T, hold func(t *testing.T, tc *testCluster, store string) heldManager) {
	snapCrashCases(t, func(t *testing.T, store string, kill bool) {
		tc := newTestCluster(t, 3, func(c *Config) { c.LedgerStore = store; c.TrailingLogs = 8 })
		hm := hold(t, tc, store)
		var image string
		if kill {
			image = tc.crashImage(hm.i)
			if hm.partial != "" && len(tc.partialSnapshots(hm.i)) == 0 {
				t.Fatalf("no unfinished snapshot in the crash image's source while %s is held", hm.partial)
			}
		}
		merge(hm.ids, tc.submitN("during-", 20))
		tc.stopHeld(hm.i, hm.h)
		if hm.stopped != nil {
			hm.stopped()
		}
		merge(hm.ids, tc.submitN("stopped-", 20))
		if kill {
			tc.putImage(hm.i, image)
		}
		tc.start(hm.i)
		if hm.partial != "" {
			if tmp := tc.partialSnapshots(hm.i); len(tmp) != 0 {
				t.Fatalf("unfinished snapshots left after the restart: %v", tmp)
			}
		}
		tc.checkAcknowledged(hm.i, hm.ids)
	})
}

// snapshotLeader makes the leader take a snapshot (compacting its log) and
// returns its index.
func (tc *testCluster) snapshotLeader() int {
	tc.t.Helper()
	l := tc.leader()
	if err := tc.mgrs[l].Raft().Snapshot().Error(); err != nil {
		tc.t.Fatalf("leader's snapshot: %v", err)
	}
	return l
}

// fallBehind stops a follower while the leader admits keys and compacts its
// log past it, and returns the follower and the keys acknowledged.
func (tc *testCluster) fallBehind() (int, map[string]string) {
	tc.t.Helper()
	ids := tc.submitN("before-", 20)
	f := tc.follower()
	tc.stop(f)
	merge(ids, tc.submitN("behind-", 200))
	tc.snapshotLeader()
	return f, ids
}

// TestStopWhilePersistingASnapshot: a follower is stopped while it persists a
// snapshot of its own (the knob holds its Persist after the first bytes
// reached the snapshot store), gracefully or by a kill, while the others
// admit more keys. Restarted on its data directory it holds every key
// acknowledged before and during the stop, each with its one job ID, and
// the cluster goes on; a kill's unfinished snapshot is removed on restart.
func TestStopWhilePersistingASnapshot(t *testing.T) {
	stopWhileHeld(t, func(t *testing.T, tc *testCluster, _ string) heldManager {
		ids := tc.submitN("before-", 200)
		f := tc.follower()
		tc.stop(f)
		h := newHold()
		tc.startKnobbed(f, TestingKnobs{SnapshotWritten: h.knob})
		tc.waitFSMsApplied()
		snapped := make(chan error, 1)
		m := tc.mgrs[f]
		go func() { snapped <- m.Raft().Snapshot().Error() }()
		h.wait(t, "the follower's Persist")
		return heldManager{i: f, h: h, ids: ids, partial: "Persist", stopped: func() { <-snapped }}
	})
}

// TestStopWhileRestoringASnapshot: a follower far behind (stopped while the
// leader admitted keys and compacted its log past it) is sent the leader's
// snapshot, and is stopped, gracefully or by a kill, while its ledger
// restores it (the knob holds the Restore once it has read the whole
// snapshot: a disk ledger's new generation filled, not yet current), while
// the others admit more keys. Restarted on its data directory it holds
// every acknowledged key with its one job ID, and the cluster goes on.
func TestStopWhileRestoringASnapshot(t *testing.T) {
	stopWhileHeld(t, func(t *testing.T, tc *testCluster, store string) heldManager {
		f, ids := tc.fallBehind()
		merge(ids, tc.submitN("after-snapshot-", 20))
		h := newHold()
		tc.startKnobbed(f, TestingKnobs{SnapshotRead: h.knob})
		h.wait(t, "the follower's Restore")
		if gens, _ := filepath.Glob(filepath.Join(tc.cfgs[f].DataDir, "ledger", "gen-*")); store == "disk" && len(gens) < 2 {
			t.Fatalf("ledger generations while the Restore is held: %v, want the new one beside the current", gens)
		}
		return heldManager{i: f, h: h, ids: ids}
	})
}

// TestStopWhileReceivingASnapshot: a follower far behind is stopped,
// gracefully or by a kill, while the leader's snapshot is copied into its
// snapshot store (the knob holds the copy after its first bytes), before
// its ledger restores it. Restarted on its data directory it holds every
// acknowledged key with its one job ID, the cluster goes on, and a kill's
// unfinished copy is removed on restart.
func TestStopWhileReceivingASnapshot(t *testing.T) {
	stopWhileHeld(t, func(t *testing.T, tc *testCluster, _ string) heldManager {
		f, ids := tc.fallBehind()
		h := newHold()
		tc.startKnobbed(f, TestingKnobs{SnapshotWritten: h.knob})
		h.wait(t, "the copy of the leader's snapshot")
		return heldManager{i: f, h: h, ids: ids, partial: "the copy"}
	})
}

// addMember configures one more manager (a fresh data directory, tweaked as
// the others) and returns its index; it is not started.
func (tc *testCluster) addMember() int {
	tc.t.Helper()
	c := tc.cfgs[0]
	c.NodeID = fmt.Sprintf("m%d", len(tc.cfgs)+1)
	c.DataDir = filepath.Join(filepath.Dir(tc.cfgs[0].DataDir), c.NodeID)
	c.RaftAddr = "127.0.0.1:" + strconv.Itoa(testutil.FreePort(tc.t))
	c.RaftAdvertise = c.RaftAddr
	c.RPCAddr = "rpc-" + c.NodeID
	c.RPCAdvertise = c.RPCAddr
	tc.cfgs = append(tc.cfgs, c)
	tc.mgrs = append(tc.mgrs, nil)
	tc.knowEachOther()
	return len(tc.cfgs) - 1
}

// TestStopWhileANewMemberRestores: a manager added to the group on an empty
// data directory is sent the leader's snapshot and is stopped, gracefully
// or by a kill, while its ledger restores it, while the others admit more
// keys. Restarted on its data directory it holds every acknowledged key
// with its one job ID, and the cluster, now of four, goes on.
func TestStopWhileANewMemberRestores(t *testing.T) {
	stopWhileHeld(t, func(t *testing.T, tc *testCluster, _ string) heldManager {
		ids := tc.submitN("before-", 200)
		l := tc.snapshotLeader()
		merge(ids, tc.submitN("after-snapshot-", 20))
		n := tc.addMember()
		h := newHold()
		tc.startKnobbed(n, TestingKnobs{SnapshotRead: h.knob})
		added := make(chan error, 1)
		go func() {
			c := tc.cfgs[n]
			added <- tc.mgrs[l].Raft().AddVoter(raft.ServerID(c.NodeID), raft.ServerAddress(c.RaftAdvertise), 0, 10*time.Second).Error()
		}()
		h.wait(t, "the new member's Restore")
		if err := <-added; err != nil {
			t.Fatalf("add %s: %v", tc.cfgs[n].NodeID, err)
		}
		return heldManager{i: n, h: h, ids: ids}
	})
}
