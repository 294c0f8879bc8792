package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// inmemGroup is a Raft group of managers on raft's in-memory transport, so a
// test can cut any link and restart a manager on a new transport at the same
// address.
type inmemGroup struct {
	t     *testing.T
	cfgs  []Config
	mgrs  []*Manager
	trans []*raft.InmemTransport
	peers PeerTable
}

func newInmemGroup(t *testing.T, n int) *inmemGroup {
	t.Helper()
	g := &inmemGroup{t: t, mgrs: make([]*Manager, n), trans: make([]*raft.InmemTransport, n)}
	base := t.TempDir()
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		g.trans[i] = tr
		c := DefaultConfig()
		c.NodeID = fmt.Sprintf("m%d", i+1)
		c.DataDir = filepath.Join(base, c.NodeID)
		c.RaftAddr, c.RaftAdvertise = string(addr), string(addr)
		c.RPCAddr, c.RPCAdvertise = "rpc-"+c.NodeID, "rpc-"+c.NodeID
		c.HeartbeatTimeout = 200 * time.Millisecond
		c.ElectionTimeout = 200 * time.Millisecond
		c.LeaderLeaseTimeout = 100 * time.Millisecond
		g.cfgs = append(g.cfgs, c)
		g.peers.Set(c.NodeID, Peer{RPCAddr: c.RPCAdvertise})
		servers = append(servers, raft.Server{ID: raft.ServerID(c.NodeID), Address: addr})
	}
	for i := range n {
		for j := range n {
			if i != j {
				g.link(i, j)
			}
		}
	}
	// The transports are cut first: raft's in-memory transport waits out
	// its timeout on a peer that no longer reads.
	t.Cleanup(func() {
		for _, tr := range g.trans {
			tr.DisconnectAll()
		}
		var wg sync.WaitGroup
		for i := range g.mgrs {
			wg.Go(func() { g.stop(i) })
		}
		wg.Wait()
	})
	for i := range n {
		g.start(i)
	}
	if err := g.mgrs[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *inmemGroup) start(i int) {
	g.t.Helper()
	m, err := New(g.cfgs[i], Deps{Logger: testutil.Logger(g.t).With("m", i+1), Transport: g.trans[i], Peers: &g.peers})
	if err != nil {
		g.t.Fatalf("start %s: %v", g.cfgs[i].NodeID, err)
	}
	g.mgrs[i] = m
}

func (g *inmemGroup) stop(i int) {
	if m := g.mgrs[i]; m != nil {
		if err := m.Close(); err != nil {
			g.t.Logf("close %s: %v", g.cfgs[i].NodeID, err)
		}
		g.mgrs[i] = nil
	}
}

// link lets i reach j; cut stops it.
func (g *inmemGroup) link(i, j int) { g.trans[i].Connect(g.trans[j].LocalAddr(), g.trans[j]) }
func (g *inmemGroup) cut(i, j int)  { g.trans[i].Disconnect(g.trans[j].LocalAddr()) }

// leaderAmong returns the first of idx that serves as leader, or -1.
func (g *inmemGroup) leaderAmong(idx ...int) int {
	for _, i := range idx {
		if m := g.mgrs[i]; m != nil && m.CheckLeader() == nil {
			return i
		}
	}
	return -1
}

// TestWipedVoterDoesNotElectACandidateWithoutACommittedEntry is the hazard of
// docs/operations.md's "A manager whose data directory was wiped": of five
// voters, A (the leader), B and C commit X while D and E are cut off; C
// restarts on a wiped data directory with its ID and address and A stops
// before C catches up. D, E and C reach each other, B none of them. Without
// the vote guard C's empty log grants D's (or E's) candidacy and a leader
// without X is elected: an acknowledged job is lost. With it C refuses, no
// leader is elected among them, and once B is back B leads with X and C
// catches up and is proven.
func TestWipedVoterDoesNotElectACandidateWithoutACommittedEntry(t *testing.T) {
	g := newInmemGroup(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var a int
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		a = g.leaderAmong(0, 1, 2, 3, 4)
		return a >= 0, "a serving leader"
	})
	// b, c, d, e are the others, in order.
	var others []int
	for i := range 5 {
		if i != a {
			others = append(others, i)
		}
	}
	b, c, d, e := others[0], others[1], others[2], others[3]
	// Everyone has the entries so far (the bootstrap and the first leader's):
	// every follower has caught up with a leader and is proven.
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		want := g.mgrs[a].Raft().CommitIndex()
		for _, i := range others {
			if g.mgrs[i].Raft().LastIndex() < want {
				return false, fmt.Sprintf("%s to reach index %d", g.cfgs[i].NodeID, want)
			}
			if v := g.mgrs[i].votes; v != nil && !v.proven.Load() {
				return false, fmt.Sprintf("%s to be proven", g.cfgs[i].NodeID)
			}
		}
		return true, ""
	})

	// D and E are cut off from A, B and C (both ways).
	for _, x := range []int{d, e} {
		for _, y := range []int{a, b, c} {
			g.cut(x, y)
			g.cut(y, x)
		}
	}
	const key = "c:1:0123456789abcdef"
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`"x"`), Datacenters: []string{"dc1"}}
	x, err := g.mgrs[a].Submit(ctx, req)
	if err != nil || x.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submission X on %s: %+v %v", g.cfgs[a].NodeID, x, err)
	}
	xIndex := g.mgrs[a].Raft().CommitIndex()
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		_, ok := g.mgrs[c].FSM().Entry("t", key)
		return ok, "C to apply X"
	})

	// C restarts on a wiped data directory, reachable from D and E only.
	g.stop(c)
	if err := os.RemoveAll(g.cfgs[c].DataDir); err != nil {
		t.Fatal(err)
	}
	for _, y := range []int{a, b, d, e} {
		g.cut(y, c)
	}
	_, g.trans[c] = raft.NewInmemTransport(g.trans[c].LocalAddr())
	g.start(c)
	for _, y := range []int{d, e} {
		g.link(c, y)
		g.link(y, c)
	}
	// A stops before C has caught up; D and E reach each other (they always
	// did) and C.
	g.stop(a)
	if last := g.mgrs[c].Raft().LastIndex(); last >= xIndex {
		t.Fatalf("C caught up to %d before A stopped (X at %d): the partition leaks", last, xIndex)
	}

	// D and E campaign again and again: either C refuses each time (the
	// guard) or one of them is elected. No leader among D, E and C may lack X.
	noLeaderWithoutX := func() {
		t.Helper()
		if l := g.leaderAmong(d, e, c); l >= 0 {
			if _, ok := g.mgrs[l].FSM().Entry("t", key); !ok {
				t.Fatalf("%s was elected without the committed entry X (index %d): wiped %s voted for it",
					g.cfgs[l].NodeID, xIndex, g.cfgs[c].NodeID)
			}
		}
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		noLeaderWithoutX()
		if v := g.mgrs[c].votes; v != nil && v.refused.Load() >= 5 {
			return true, ""
		}
		return false, "D and E to ask C for its vote five times"
	})
	noLeaderWithoutX()
	if g.mgrs[c].votes == nil || g.mgrs[c].votes.proven.Load() {
		t.Fatal("wiped C is proven before any leader contacted it")
	}

	// B comes back: it has X, so D and E elect it (C still refuses); C
	// catches up with B and is proven.
	for _, y := range []int{d, e, c} {
		g.link(b, y)
		g.link(y, b)
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		noLeaderWithoutX()
		if g.leaderAmong(b, d, e, c) < 0 {
			return false, "a leader once B is back"
		}
		if _, ok := g.mgrs[c].FSM().Entry("t", key); !ok {
			return false, "C to apply X"
		}
		// C is proven on the first RPC after it caught up.
		return g.mgrs[c].votes.proven.Load(), "C to be proven"
	})
}

// TestVoteGuardRefusesAndHoldsUntilProven drives a voteGuard over raft's
// in-memory transport: unproven, it refuses a vote past the bootstrap entry
// (answering with the candidate's term), passes one at it, asks for no vote
// past it itself, and once its log reaches the first leader's commit index
// it passes everything.
func TestVoteGuardRefusesAndHoldsUntilProven(t *testing.T) {
	addr1, t1 := raft.NewInmemTransport("")
	addr2, t2 := raft.NewInmemTransport("")
	t1.Connect(addr2, t2)
	t2.Connect(addr1, t1)
	tr, g := newVoteGuard(t1, "m1", "started without raft state", nil, testutil.Logger(t))
	defer tr.(raft.WithClose).Close()
	defer t2.Close()
	var last atomic.Uint64
	g.setLastIndex(last.Load)

	// t2's side answers every RPC it gets with a granted vote; raft reads
	// the guard's side.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	serve := func(ch <-chan raft.RPC, delivered chan<- any) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case r := <-ch:
					switch req := r.Command.(type) {
					case *raft.RequestVoteRequest:
						r.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
					case *raft.RequestPreVoteRequest:
						r.Respond(&raft.RequestPreVoteResponse{Term: req.Term, Granted: true}, nil)
					default:
						r.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
					}
					if delivered != nil {
						delivered <- r.Command
					}
				}
			}
		})
	}
	delivered := make(chan any, 16)
	serve(tr.Consumer(), delivered)
	serve(t2.Consumer(), nil)

	vote := func(lastIndex uint64) *raft.RequestVoteResponse {
		t.Helper()
		var resp raft.RequestVoteResponse
		if err := t2.RequestVote("m1", addr1, &raft.RequestVoteRequest{Term: 7, LastLogIndex: lastIndex, LastLogTerm: 3}, &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}
	preVote := func(lastIndex uint64) *raft.RequestPreVoteResponse {
		t.Helper()
		var resp raft.RequestPreVoteResponse
		if err := t2.RequestPreVote("m1", addr1, &raft.RequestPreVoteRequest{Term: 7, LastLogIndex: lastIndex, LastLogTerm: 3}, &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}
	if r := vote(5); r.Granted || r.Term != 7 {
		t.Fatalf("an unproven manager must refuse a vote past the bootstrap entry with the candidate's term: %+v", r)
	}
	if r := preVote(5); r.Granted || r.Term != 7 {
		t.Fatalf("an unproven manager must refuse a pre-vote past the bootstrap entry with the candidate's term: %+v", r)
	}
	if r := vote(1); !r.Granted {
		t.Fatalf("a vote at the bootstrap entry must reach raft: %+v", r)
	}
	<-delivered
	var resp raft.RequestVoteResponse
	if err := tr.RequestVote("m2", addr2, &raft.RequestVoteRequest{Term: 7, LastLogIndex: 5}, &resp); !errors.Is(err, errVoteGuarded) {
		t.Fatalf("an unproven manager past the bootstrap entry must not ask for votes: %v", err)
	}
	if err := tr.(raft.WithPreVote).RequestPreVote("m2", addr2, &raft.RequestPreVoteRequest{Term: 7, LastLogIndex: 5}, &raft.RequestPreVoteResponse{}); !errors.Is(err, errVoteGuarded) {
		t.Fatalf("an unproven manager past the bootstrap entry must not ask for pre-votes: %v", err)
	}

	// A leader announces commit index 9; the log reaches it.
	var aer raft.AppendEntriesResponse
	if err := t2.AppendEntries("m1", addr1, &raft.AppendEntriesRequest{Term: 7, PrevLogEntry: 4, PrevLogTerm: 3, LeaderCommitIndex: 9}, &aer); err != nil {
		t.Fatal(err)
	}
	<-delivered
	last.Store(8)
	if r := vote(5); r.Granted {
		t.Fatalf("below the leader's commit index the manager is still unproven: %+v", r)
	}
	last.Store(9)
	if r := vote(5); !r.Granted {
		t.Fatalf("a proven manager's votes reach raft: %+v", r)
	}
	<-delivered
	if !g.proven.Load() {
		t.Fatal("the guard must be proven")
	}
	if err := tr.RequestVote("m2", addr2, &raft.RequestVoteRequest{Term: 8, LastLogIndex: 9}, &resp); err != nil || !resp.Granted {
		t.Fatalf("a proven manager asks for votes: %+v %v", resp, err)
	}
}

// TestVoteGuardOutlivesARestartBeforeProven: a manager that started without
// Raft state and stops before it is proven holds Raft state at its next
// start (here a term, as after any vote request raft saw), and is guarded
// again: its stable store still holds the mark. Once proven it is not.
func TestVoteGuardOutlivesARestartBeforeProven(t *testing.T) {
	c := DefaultConfig()
	c.NodeID = "m1"
	c.DataDir = t.TempDir()
	var peers PeerTable
	candAddr, cand := raft.NewInmemTransport("")
	defer cand.Close()
	start := func() *Manager {
		t.Helper()
		addr, tr := raft.NewInmemTransport("")
		c.RaftAddr, c.RaftAdvertise = string(addr), string(addr)
		cand.Connect(addr, tr)
		tr.Connect(candAddr, cand)
		m, err := New(c, Deps{Logger: testutil.Logger(t), Transport: tr, Peers: &peers})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	closeM := func(m *Manager) {
		t.Helper()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A vote request from a candidate past the bootstrap entry.
	votes := func(m *Manager) bool {
		t.Helper()
		var resp raft.RequestVoteResponse
		req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("m2"), Addr: []byte(candAddr)},
			Term: 9, LastLogIndex: 50, LastLogTerm: 8}
		if err := cand.RequestVote("m1", raft.ServerAddress(c.RaftAdvertise), req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Granted
	}

	m := start()
	if m.votes == nil {
		t.Fatal("a manager without raft state must be guarded")
	}
	closeM(m)
	// What it received before it stopped: raft state.
	st, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(c.DataDir, "raft", "stable.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	m = start()
	if has, err := m.HasState(); err != nil || !has {
		t.Fatalf("the restarted manager must hold raft state: %v %v", has, err)
	}
	if m.votes == nil {
		closeM(m)
		t.Fatal("a manager restarted before it was proven must be guarded again")
	}
	if votes(m) {
		t.Fatal("the restarted, unproven manager granted a vote past the bootstrap entry")
	}
	m.votes.markProven("test")
	closeM(m)

	m = start()
	defer closeM(m)
	if m.votes != nil {
		t.Fatal("a manager proven in an earlier run must not be guarded")
	}
	if !votes(m) {
		t.Fatal("a proven manager's raft must grant the vote of a candidate with a later term and a longer log")
	}
}

// TestVoteGuardTargetIsTheLeadersLogWhenItsCommitIndexLags: a leader elected
// after a restart of its own announces commit index 0 (raft's starts there
// in a new process and rises only once an entry of the leader's term
// commits), though its log holds every entry committed before: the entries
// it sends first end at its last index. A guarded manager taking that 0 for
// its target would be proven at once with an empty log, and its vote could
// then elect a candidate without an entry the wiped manager had
// acknowledged. It stays guarded until its log reaches the leader's.
func TestVoteGuardTargetIsTheLeadersLogWhenItsCommitIndexLags(t *testing.T) {
	_, tr := raft.NewInmemTransport("")
	wrapped, g := newVoteGuard(tr, "m1", "started without raft state", nil, testutil.Logger(t))
	defer wrapped.(raft.WithClose).Close()
	var last atomic.Uint64
	g.setLastIndex(last.Load)

	// The new leader's first replication: its last index (95) as the
	// previous entry, its no-op, commit index 0.
	first := raft.RPC{Command: &raft.AppendEntriesRequest{Term: 6, PrevLogEntry: 95, PrevLogTerm: 5,
		Entries: []*raft.Log{{Index: 96, Term: 6, Type: raft.LogNoop}}, LeaderCommitIndex: 0}}
	if !g.pass(first) {
		t.Fatal("an AppendEntries must reach raft")
	}
	if g.proven.Load() {
		t.Fatal("proven with an empty log by a leader whose commit index lags its log")
	}
	// Its retries, further back, and its commit index once the no-op
	// committed elsewhere, do not move the target of the term.
	last.Store(60)
	if g.pass(raft.RPC{Command: &raft.AppendEntriesRequest{Term: 6, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 96}}); g.proven.Load() {
		t.Fatal("proven below the leader's log")
	}
	last.Store(96)
	g.pass(raft.RPC{Command: &raft.AppendEntriesRequest{Term: 6, PrevLogEntry: 96, PrevLogTerm: 6, LeaderCommitIndex: 96}})
	if !g.proven.Load() {
		t.Fatal("not proven once the log reached the leader's")
	}
}
