package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/once-dev/once/internal/logging"
)

// A manager that starts with no Raft state may be a voter whose data
// directory was wiped: it has forgotten the entries it acknowledged and the
// vote it cast, and raft grants a vote to any candidate while its own log is
// empty. Its vote could then elect a candidate that lacks an entry committed
// with its acknowledgement, and the entry would be lost (docs/operations.md,
// "A manager whose data directory was wiped").
//
// voteGuard closes that: until the manager is proven it refuses every
// RequestVote and RequestPreVote whose candidate's last log index is above
// bootstrapLastIndex, and it asks for no vote itself while its own last index
// is above it: a wiped manager that has received part of the log before the
// leader died would otherwise campaign with its own vote, which it cannot
// trust either. It is proven once a leader has contacted it and its log has
// reached the commit index that leader announced first, or the end of the
// entries it sent first if that is further (every entry committed before
// the restart is among them), once it bootstraps the group itself (it
// had nothing to forget), or once it is elected leader (its election, under
// these rules, had a quorum of voters that remember their logs).
//
// The guard outlives the process: a guarded manager's stable store holds
// unprovenKey until it is proven, so one that restarts before it caught up
// (with the part of the log it received, which is Raft state) is guarded
// again (guardOnStart). A manager that starts with Raft state and without
// the mark has its log and its vote: it is not guarded at all.
//
// In a fresh group the only entry before the first election is the bootstrap
// configuration, index 1 (raft's BootstrapCluster), so the first election is
// not affected.
const bootstrapLastIndex = 1

// unprovenKey is the stable-store key that marks a guarded manager not yet
// proven (value 1; 0 once proven). raft's own keys there are CurrentTerm,
// LastVoteTerm and LastVoteCand.
var unprovenKey = []byte("OnceVotesUnproven")

// guardOnStart reports whether a manager starting on stable must be
// guarded, and why: one without Raft state is (and the mark is written,
// synced, before Raft starts), one with state only if the mark from an
// earlier run is still there.
func guardOnStart(stable raft.StableStore, hasState bool) (string, error) {
	if !hasState {
		if err := stable.SetUint64(unprovenKey, 1); err != nil {
			return "", fmt.Errorf("mark the raft votes unproven: %w", err)
		}
		return "started without raft state", nil
	}
	v, err := stable.GetUint64(unprovenKey)
	switch {
	case errors.Is(err, raftboltdb.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read the raft votes mark: %w", err)
	case v == 0:
		return "", nil
	}
	return "restarted before catching up after it started without raft state", nil
}

// voteGuard wraps a raft.Transport, filtering the RPCs it delivers to raft
// (Consumer).
type voteGuard struct {
	raft.Transport
	localID raft.ServerID
	log     *slog.Logger
	why     string           // guardOnStart's reason, for the log
	stable  raft.StableStore // where the mark is cleared once proven

	// lastIndex is raft's last index (log or snapshot), set once raft runs.
	lastIndex atomic.Pointer[func() uint64]
	proven    atomic.Bool

	// mu guards the target: the filter goroutine sets it, raft's
	// candidate reads it.
	mu         sync.Mutex
	target     uint64 // the commit index the first leader of targetTerm announced
	targetTerm uint64
	hasTarget  bool

	refused   atomic.Uint64 // votes refused, for the log
	held      atomic.Uint64 // vote requests not sent, for the log
	out       chan raft.RPC
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// voteGuardPreVote is a voteGuard over a transport that supports pre-vote:
// raft enables pre-vote only when its transport implements it.
type voteGuardPreVote struct {
	*voteGuard
}

func (g voteGuardPreVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := g.mayCampaign(args.LastLogIndex); err != nil {
		return err
	}
	return g.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

// errVoteGuarded fails a vote request of an unproven manager past the
// bootstrap entry: raft counts it as a vote not granted.
var errVoteGuarded = errors.New("manager: not asking for votes: this manager started without raft state and has not caught up with a leader")

// RequestVote implements raft.Transport.
func (g *voteGuard) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := g.mayCampaign(args.LastLogIndex); err != nil {
		return err
	}
	return g.Transport.RequestVote(id, target, args, resp)
}

// mayCampaign reports errVoteGuarded if this manager, candidate with its
// last log index last, may not ask for votes.
func (g *voteGuard) mayCampaign(last uint64) error {
	if g.proven.Load() || last <= bootstrapLastIndex {
		return nil
	}
	if g.reached() {
		g.markProven("log reached the first leader's commit index")
		return nil
	}
	if g.held.Add(1) == 1 {
		g.log.Info("raft campaign held: this manager started without raft state and has not caught up with a leader",
			logging.KeyIndex, last, logging.KeyReason, g.why)
	}
	return errVoteGuarded
}

// newVoteGuard starts guarding t's votes, for why (guardOnStart); once
// proven it clears the mark in stable (nil: no mark). Close stops it (and
// closes t).
func newVoteGuard(t raft.Transport, localID raft.ServerID, why string, stable raft.StableStore, log *slog.Logger) (raft.Transport, *voteGuard) {
	g := &voteGuard{Transport: t, localID: localID, why: why, stable: stable, log: log,
		out: make(chan raft.RPC), stop: make(chan struct{}), done: make(chan struct{})}
	log.Info("raft votes guarded until this manager catches up with a leader", logging.KeyReason, why)
	go g.run()
	if _, ok := t.(raft.WithPreVote); ok {
		return voteGuardPreVote{g}, g
	}
	return g, g
}

// setLastIndex gives the guard raft's last index, once raft runs.
func (g *voteGuard) setLastIndex(f func() uint64) { g.lastIndex.Store(&f) }

// markProven ends the guard for good: in this process, and in the next
// ones once the mark is cleared. Failing to clear it only guards the next
// start again, which proves itself on its first catch-up.
func (g *voteGuard) markProven(reason string) {
	if !g.proven.CompareAndSwap(false, true) {
		return
	}
	g.log.Info("raft votes no longer guarded", logging.KeyReason, reason, logging.KeyCount, g.refused.Load())
	if g.stable == nil {
		return
	}
	if err := g.stable.SetUint64(unprovenKey, 0); err != nil {
		g.log.Warn("raft votes mark not cleared: the next start is guarded again", logging.KeyError, err)
	}
}

// Consumer implements raft.Transport: the RPCs the guard lets through.
func (g *voteGuard) Consumer() <-chan raft.RPC { return g.out }

// Close stops the filter and closes the wrapped transport if it can be
// closed. It is idempotent, as closeTransport expects.
func (g *voteGuard) Close() error {
	g.closeOnce.Do(func() { close(g.stop) })
	<-g.done
	return closeTransport(g.Transport)
}

func (g *voteGuard) run() {
	defer close(g.done)
	in := g.Transport.Consumer()
	for {
		select {
		case <-g.stop:
			return
		case rpc := <-in:
			if !g.pass(rpc) {
				continue
			}
			select {
			case g.out <- rpc:
			case <-g.stop:
				return
			}
		}
	}
}

// pass notes what rpc tells of the leader and reports whether raft should
// see it; a refused vote is answered here.
func (g *voteGuard) pass(rpc raft.RPC) bool {
	if g.proven.Load() {
		return true
	}
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		// A heartbeat (raft's own test: no entries, no previous entry, no
		// commit index) says nothing of the leader's commit index.
		heartbeat := len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
		if !heartbeat {
			// The leader's commit index alone can lag what is committed:
			// raft's starts at 0 in a restarted process and is raised only
			// once an entry of the leader's own term commits, so a leader
			// elected after a restart announces 0 (or an old index) first.
			// Its log holds every committed entry (Raft's leader
			// completeness), and the first entries it sends this manager
			// end at its last index.
			g.setTarget(req.Term, max(req.LeaderCommitIndex, req.PrevLogEntry+uint64(len(req.Entries))))
		}
	case *raft.InstallSnapshotRequest:
		g.setTarget(req.Term, req.LastLogIndex)
	}
	if g.reached() {
		g.markProven("log reached the first leader's commit index")
		return true
	}
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if req.LastLogIndex > bootstrapLastIndex {
			return g.refuse(rpc, req.LastLogIndex, &raft.RequestVoteResponse{RPCHeader: g.header(), Term: req.Term, Granted: false})
		}
	case *raft.RequestPreVoteRequest:
		if req.LastLogIndex > bootstrapLastIndex {
			return g.refuse(rpc, req.LastLogIndex, &raft.RequestPreVoteResponse{RPCHeader: g.header(), Term: req.Term, Granted: false})
		}
	}
	return true
}

// setTarget records the index the first leader of a term announces to this
// manager (its commit index, or the end of the entries it sends if that is
// further: see pass); later ones of the same term are ignored (the first
// already covers every entry committed before the restart, and a target
// that moved with every append could never be reached under load). A
// leader of a later term replaces it: the first contact may have come from
// a leader already deposed (until its lease timeout), whose commit index
// lags the group's.
func (g *voteGuard) setTarget(term, index uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.hasTarget || term > g.targetTerm {
		g.target, g.targetTerm, g.hasTarget = index, term, true
		g.log.Info("raft votes guarded until the log reaches the leader's commit index", logging.KeyIndex, index, logging.KeyTerm, term)
	}
}

func (g *voteGuard) reached() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.lastIndex.Load()
	return g.hasTarget && f != nil && (*f)() >= g.target
}

// refuse answers a vote request with resp, a refusal, and returns false.
func (g *voteGuard) refuse(rpc raft.RPC, candidateLast uint64, resp any) bool {
	if g.refused.Add(1) == 1 {
		g.log.Info("raft vote refused: this manager started without raft state and has not caught up with a leader",
			logging.KeyIndex, candidateLast, logging.KeyReason, g.why)
	}
	rpc.Respond(resp, nil)
	return false
}

// header is the RPC header raft itself would answer with.
func (g *voteGuard) header() raft.RPCHeader {
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(g.localID),
		Addr:            g.EncodePeer(g.localID, g.LocalAddr()),
	}
}
