package walstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// listFSM records the commands it applies, in order.
type listFSM struct {
	mu       sync.Mutex
	cmds     []string
	restores int
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return nil
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.cmds)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var cmds []string
	if err := json.NewDecoder(rc).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = cmds
	f.restores++
	return nil
}

func (f *listFSM) state() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds), f.restores
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// recordingStore is the Store as raft sees it, noting every DeleteRange that
// emptied the log.
type recordingStore struct {
	*Store
	mu      sync.Mutex
	emptied []string
}

func (s *recordingStore) DeleteRange(min, max uint64) error {
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	err := s.Store.DeleteRange(min, max)
	if err == nil && last > 0 && min <= first && max >= last {
		s.mu.Lock()
		s.emptied = append(s.emptied, fmt.Sprintf("DeleteRange(%d, %d) on [%d, %d]", min, max, first, last))
		s.mu.Unlock()
	}
	return err
}

func (s *recordingStore) emptiedCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.emptied)
}

// tWriter sends raft's log lines to t.Log until the test ends.
type tWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// raftNode lays out its files as the manager does: <data-dir>/raft/wal for
// the Store and <data-dir>/raft/snapshots for the FileSnapshotStore (which
// appends "snapshots" to the directory it is given).
type raftNode struct {
	id     raft.ServerID
	addr   raft.ServerAddress
	dir    string // <data-dir>/raft
	trans  *raft.InmemTransport
	store  *recordingStore
	stable *raft.InmemStore
	snaps  *raft.FileSnapshotStore
	fsm    *listFSM
	raft   *raft.Raft
}

type cluster struct {
	t     *testing.T
	out   *tWriter
	nodes []*raftNode
}

func (c *cluster) config(n *raftNode) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = n.id
	conf.HeartbeatTimeout = 100 * time.Millisecond
	conf.ElectionTimeout = 100 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotThreshold = 1 << 40 // snapshots only when the test asks
	conf.TrailingLogs = 4
	conf.Logger = hclog.New(&hclog.LoggerOptions{Name: string(n.id), Output: c.out, Level: hclog.Info})
	return conf
}

// start opens n's store and starts its raft.
func (c *cluster) start(n *raftNode) {
	t := c.t
	t.Helper()
	s, err := Open(filepath.Join(n.dir, "wal"), Options{Logger: testSlog(t)}) // durable, as in production
	if err != nil {
		t.Fatalf("%s: Open: %v", n.id, err)
	}
	n.store = &recordingStore{Store: s}
	n.fsm = &listFSM{}
	if n.raft, err = raft.NewRaft(c.config(n), n.fsm, n.store, n.stable, n.snaps, n.trans); err != nil {
		t.Fatalf("%s: NewRaft: %v", n.id, err)
	}
}

// stop shuts n's raft down and closes its store.
func (c *cluster) stop(n *raftNode) {
	if n.raft == nil {
		return
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		c.t.Errorf("%s: Shutdown: %v", n.id, err)
	}
	if err := n.store.Close(); err != nil {
		c.t.Errorf("%s: Close: %v", n.id, err)
	}
	n.raft = nil
}

func newCluster(t *testing.T, size int) *cluster {
	c := &cluster{t: t, out: &tWriter{t: t}}
	t.Cleanup(func() { // registered first, runs last
		c.out.mu.Lock()
		c.out.done = true
		c.out.mu.Unlock()
	})
	var servers []raft.Server
	for i := range size {
		n := &raftNode{id: raft.ServerID(fmt.Sprintf("node%d", i)), dir: filepath.Join(t.TempDir(), "raft"), stable: raft.NewInmemStore()}
		n.addr, n.trans = raft.NewInmemTransport("")
		var err error
		if n.snaps, err = raft.NewFileSnapshotStoreWithLogger(n.dir, 2, hclog.NewNullLogger()); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, raft.Server{ID: n.id, Address: n.addr})
		c.nodes = append(c.nodes, n)
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	for _, n := range c.nodes {
		c.start(n)
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatalf("%s: bootstrap: %v", n.id, err)
		}
	}
	return c
}

func testSlog(t testing.TB) *slog.Logger { return slog.New(newLogRecorder(t)) }

// leader waits for a leader among the running nodes.
func (c *cluster) leader() *raftNode {
	c.t.Helper()
	var l *raftNode
	testutil.WaitFor(c.t, 10*time.Second, func() (bool, string) {
		for _, n := range c.nodes {
			if n.raft != nil && n.raft.State() == raft.Leader {
				l = n
				return true, ""
			}
		}
		return false, "a leader"
	})
	return l
}

// apply commits cmd-from..cmd-to through the leader. A command whose Apply
// lost leadership is retried; the checks below compare nodes with each
// other, so a command applied twice does not break them.
func (c *cluster) apply(from, to int) {
	c.t.Helper()
	for i := from; i <= to; i++ {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := c.leader().raft.Apply([]byte(fmt.Sprintf("cmd-%d", i)), time.Second).Error()
			if err == nil {
				break
			}
			if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) &&
				!errors.Is(err, raft.ErrEnqueueTimeout) || time.Now().After(deadline) {
				c.t.Fatalf("apply cmd-%d: %v", i, err)
			}
		}
	}
}

// isolate cuts n off from every other node; heal reconnects it.
func (c *cluster) isolate(n *raftNode) {
	for _, o := range c.nodes {
		if o != n {
			o.trans.Disconnect(n.addr)
		}
	}
	n.trans.DisconnectAll()
}

func (c *cluster) heal(n *raftNode) {
	for _, o := range c.nodes {
		if o != n {
			o.trans.Connect(n.addr, n.trans)
			n.trans.Connect(o.addr, o.trans)
		}
	}
}

// waitConverged waits until n has applied everything the leader has and its
// FSM equals the leader's.
func (c *cluster) waitConverged(n *raftNode) []string {
	c.t.Helper()
	var cmds []string
	testutil.WaitFor(c.t, 15*time.Second, func() (bool, string) {
		l := c.leader()
		want, _ := l.fsm.state()
		got, _ := n.fsm.state()
		cmds = got
		return n.raft.AppliedIndex() >= l.raft.LastIndex() && slices.Equal(got, want), fmt.Sprintf("%s to catch up", n.id)
	})
	return cmds
}

// TestRaftSnapshotInstall runs three raft nodes on Stores. One falls behind
// while the others compact their logs past it, so the leader must send it a
// snapshot; raft then empties its (monotonic) log and appends after the
// snapshot: the re-base path, driven by real raft. The node then restarts
// from its re-based log.
func TestRaftSnapshotInstall(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.leader()
	c.apply(1, 20)
	for _, n := range c.nodes {
		c.waitConverged(n)
	}

	var lag *raftNode
	for _, n := range c.nodes {
		if n != leader {
			lag = n
			break
		}
	}
	lagFirst, _ := lag.store.FirstIndex()
	lagLast, _ := lag.store.LastIndex()
	if lagFirst == 0 || lagLast < 20 {
		t.Fatalf("%s holds [%d, %d] before falling behind; want a real log", lag.id, lagFirst, lagLast)
	}
	t.Logf("%s falls behind at [%d, %d]", lag.id, lagFirst, lagLast)
	c.isolate(lag)
	c.apply(21, 60)

	// Compact every log the lagging node could catch up from.
	for _, n := range c.nodes {
		if n == lag {
			continue
		}
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatalf("%s: snapshot: %v", n.id, err)
		}
		first, _ := n.store.FirstIndex()
		if first <= lagLast+1 {
			t.Fatalf("%s still holds index %d after compaction (first %d); no snapshot would be needed", n.id, lagLast+1, first)
		}
	}

	c.heal(lag)
	c.waitConverged(lag)
	if _, restores := lag.fsm.state(); restores == 0 {
		t.Fatalf("%s caught up without installing a snapshot", lag.id)
	}
	c.apply(61, 70) // appended after the snapshot: the re-based log
	cmds := c.waitConverged(lag)
	if !slices.Contains(cmds, "cmd-70") {
		t.Fatalf("%s FSM lacks cmd-70: %v", lag.id, cmds)
	}
	emptied := lag.store.emptiedCalls()
	if len(emptied) == 0 {
		t.Fatalf("raft never emptied %s's log", lag.id)
	}
	t.Logf("%s: %v", lag.id, emptied)
	first, _ := lag.store.FirstIndex()
	last, _ := lag.store.LastIndex()
	if first <= lagLast || last < first {
		t.Fatalf("%s holds [%d, %d] after the snapshot install; want a log re-based past %d", lag.id, first, last, lagLast)
	}
	// The re-based log holds what the leader holds at the same indexes.
	l := c.leader()
	for i := first; i <= last; i++ {
		var got, want raft.Log
		if err := lag.store.GetLog(i, &got); err != nil {
			t.Fatalf("%s: GetLog(%d): %v", lag.id, i, err)
		}
		if err := l.store.GetLog(i, &want); errors.Is(err, raft.ErrLogNotFound) {
			continue
		} else if err != nil {
			t.Fatalf("%s: GetLog(%d): %v", l.id, i, err)
		}
		if got.Term != want.Term || got.Type != want.Type || string(got.Data) != string(want.Data) {
			t.Fatalf("index %d: %s has %+v, leader %s has %+v", i, lag.id, got, l.id, want)
		}
	}

	// Restart the node from its re-based log: it boots, replays, and follows.
	c.stop(lag)
	lag.addr, lag.trans = raft.NewInmemTransport(lag.addr)
	c.heal(lag)
	c.start(lag)
	if f, _ := lag.store.FirstIndex(); f != first {
		t.Fatalf("after restart %s's log starts at %d, want %d", lag.id, f, first)
	}
	c.apply(71, 75)
	cmds = c.waitConverged(lag)
	if !slices.Contains(cmds, "cmd-75") {
		t.Fatalf("%s FSM lacks cmd-75 after restart", lag.id)
	}
}
