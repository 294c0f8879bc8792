package manager

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/rpc"
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
