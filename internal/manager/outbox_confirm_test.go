package manager

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxConfirmLostToALeaderChangeIsRetried: dc1's leader carries a job
// to dc2, which admits it, but dc1's leadership moves away while dc2 admits,
// so the Confirm of dc2's answer is never recorded. The same manager leads
// again before its outbox noticed (between two passes). Its outbox must ask
// dc2 again (a replay there) and record the Confirm: an entry whose pair is
// kept as done in memory without its Confirm in the ledger stays in the
// outbox for the whole term, counted against MANAGER_OUTBOX_MAX_ENTRIES
// (503 outbox_full) and, once expired, owed forever.
func TestOutboxConfirmLostToALeaderChangeIsRetried(t *testing.T) {
	clock := newManualClock()
	tc1 := newTestCluster(t, 3, nil)
	tc1.setNow(clock.Now)
	l1 := tc1.leader()
	m1 := tc1.mgrs[l1]

	// dc2 is admitting the carried job: dc1's leadership moves away.
	tc2 := newKnobbedCluster(t, 1, func(c *Config) { c.Datacenter = "dc2" }, transferOnFirstAdmit(t, m1))
	tc2.setNow(clock.Now)
	m2 := tc2.mgrs[tc2.leader()]
	dc2Addr := serveManagerRPC(t, m2)
	ob := newOutbox(m1, func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {dc2Addr}} }, testutil.Logger(t))
	t.Cleanup(ob.close)
	ctx := ctxT(t)

	r := submitForBoth(t, ctx, m1, "order-1")
	clock.Advance(outboxGrace + time.Second)
	ob.pass(ctx)
	if _, ok := m2.FSM().Job("t", r.JobId); !ok {
		t.Fatal("dc2 does not hold the job after dc1's outbox carried it")
	}
	if n := m1.FSM().OutboxLen(); n != 1 {
		t.Fatalf("dc1's outbox carries %d entries after a Confirm its leader could not record, want 1", n)
	}

	// The same manager leads again.
	nl := tc1.leader()
	if err := tc1.mgrs[nl].raft.LeadershipTransferToServer(raft.ServerID(tc1.cfgs[l1].NodeID),
		raft.ServerAddress(tc1.cfgs[l1].RaftAdvertise)).Error(); err != nil {
		t.Fatalf("leadership transfer back: %v", err)
	}
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		return m1.CheckLeader() == nil, "dc1's first leader to lead again"
	})
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		ob.pass(ctx)
		return m1.FSM().OutboxLen() == 0, "dc1's outbox to record dc2's confirmation"
	})
	if n := m2.FSM().Stats().Jobs; n != 1 {
		t.Fatalf("dc2 holds %d jobs, want 1", n)
	}
}
