package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// TestALateLeadershipLossLeavesTheServingTermAlone: a Raft future failed
// for leadership (ErrLeadershipLost) can reach its caller after this node
// has won a newer term and serves it. Handling that late failure answers
// not_leader to its caller and nothing else: the serving leader goes on
// serving. (It used to reset the serving term, and the leader answered
// "new leader is catching up" to every call until the next election.)
func TestALateLeadershipLossLeavesTheServingTermAlone(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	m := tc.mgrs[tc.leader()]
	if err := m.ApplyError(raft.ErrLeadershipLost); !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("ApplyError(ErrLeadershipLost) = %v, want not_leader", err)
	}
	if err := m.CheckLeader(); err != nil {
		t.Fatalf("the serving leader after a late leadership failure: %v", err)
	}
	resp, err := tc.submit(ctxT(t), 0, "t", "k", "fp", "email", "{}", 0)
	if err != nil || resp.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a submission after a late leadership failure: %v, %v", resp, err)
	}
}

// TestALeadStartedDuringItsElectionServesTheTermItWins: the leader loop reads
// the node's state and its term apart, so a node deposed and campaigning
// again between the two reads starts a lead for the term of its new
// election while it is still a candidate in it. That lead must wait for the
// term (retrying its barrier) until the node wins it, or the term moves on,
// or the loop ends it: one that returned at once left the loop believing the
// term led, and the node, winning that very term, answered "new leader is
// catching up" to every call until the next election. Here the node
// campaigns alone (its peers stopped), the lead is started for its term,
// and it must not return while the node is in that term: the test ends
// when the lead has returned in a later term (the peers back), or the node
// has won the term and serves it.
func TestALeadStartedDuringItsElectionServesTheTermItWins(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	x := (l + 1) % 3
	for i := range tc.mgrs {
		if i != x {
			tc.stop(i)
		}
	}
	m := tc.mgrs[x]
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		return m.raft.State() == raft.Candidate, "node " + m.raft.State().String() + ", want a candidate"
	})
	term := m.raft.CurrentTerm()
	ctx, cancel := context.WithCancel(context.Background())
	var endTerm uint64 // the node's term when the lead returned; read after done
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.lead(ctx, term)
		endTerm = m.raft.CurrentTerm()
	}()
	defer func() { cancel(); <-done }() // the lead ends with its test
	// The lead runs while the node campaigns; its peers come back, and
	// the term moves on (to the node's own win or another's), or the node
	// wins this very term and serves it.
	for i := range tc.mgrs {
		if i != x {
			tc.start(i)
		}
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		select {
		case <-done:
			if endTerm == term {
				t.Fatalf("the lead for term %d returned while the node still was in it (%s): had it won the term, it would never serve",
					term, m.raft.State())
			}
			return true, ""
		default:
		}
		if m.raft.State() == raft.Leader && m.raft.CurrentTerm() == term && m.readyTerm.Load() == term {
			return true, "" // it won the term, and serves it
		}
		return false, fmt.Sprintf("the lead for term %d still runs; the node is %s in term %d", term, m.raft.State(), m.raft.CurrentTerm())
	})
}
