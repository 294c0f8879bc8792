package manager

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxRedeliveryAfterTheHomeLeaderStopsIsADuplicate: dc1's leader
// carries a job to dc2, dc2 admits it, and dc1's leadership moves away
// before the Confirm is recorded; that manager then stops (its outbox's
// memory gone). By the time dc1's new leader carries the job again, dc2's
// entry of it has expired. The redelivery must be answered as a duplicate
// (the retained job for an opaque key, idempotency_key_expired for a
// structured one), never admitted as a second job in dc2, and dc1 records
// the confirmation. (Coverage: passes on main.)
func TestOutboxRedeliveryAfterTheHomeLeaderStopsIsADuplicate(t *testing.T) {
	for _, key := range []string{"order-1", "host1.dc1:12345:1:0123456789abcdef"} {
		t.Run(key, func(t *testing.T) {
			clock := newManualClock()
			const ttl = 5 * time.Second
			short := func(c *Config) { c.Idempotency.CommittedTTL = ttl; c.QueueJobs = false }
			tc1 := newTestCluster(t, 3, short)
			tc1.setNow(clock.Now)
			l1 := tc1.leader()
			m1 := tc1.mgrs[l1]
			tc2 := newKnobbedCluster(t, 1, func(c *Config) { short(c); c.Datacenter = "dc2" }, transferOnFirstAdmit(t, m1))
			tc2.setNow(clock.Now)
			m2 := tc2.mgrs[tc2.leader()]
			dc2Addr := serveManagerRPC(t, m2)
			peers := func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {dc2Addr}} }
			ctx := ctxT(t)

			r := submitForBoth(t, ctx, m1, key)
			clock.Advance(outboxGrace + time.Second)
			ob := newOutbox(m1, peers, testutil.Logger(t))
			ob.pass(ctx)
			ob.close()
			first := m2.Raft().AppliedIndex()
			if _, ok := m2.FSM().Job("t", r.JobId); !ok || first == 0 {
				t.Fatal("dc2 does not hold the job after dc1's outbox carried it")
			}
			tc1.stop(l1)
			if n := tc1.mgrs[tc1.leader()].FSM().OutboxLen(); n != 1 {
				t.Fatalf("dc1's outbox carries %d entries, want 1 (the Confirm was not recorded)", n)
			}

			// dc2's entry expires before the new leader carries the job again.
			clock.Advance(ttl)
			testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
				_, ok := m2.FSM().Entry("t", key)
				return !ok, "dc2's entry to expire"
			})
			var running []*Manager
			for _, m := range tc1.mgrs {
				if m != nil {
					running = append(running, m)
				}
			}
			runOutboxes(t, &testCluster{t: t, mgrs: running}, peers)
			testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
				return tc1.mgrs[tc1.leader()].FSM().OutboxLen() == 0, "dc1 to record dc2's answer to the redelivery"
			})
			if n := m2.FSM().Stats().Jobs; n != 1 {
				t.Fatalf("dc2 holds %d jobs, want 1", n)
			}
			if _, ok := m2.FSM().Entry("t", key); ok {
				t.Fatal("the redelivery left an entry of the key in dc2 (admitted again)")
			}
		})
	}
}

// TestOutboxCarriesThroughTheOtherLeaderChanging: dc2's leadership moves
// away while its leader is admitting a job dc1's outbox carries there. The
// carry follows dc2's new leader, the job lands once on every dc2 replica,
// and dc1 records the confirmation. (Coverage: passes on main.)
func TestOutboxCarriesThroughTheOtherLeaderChanging(t *testing.T) {
	clock := newManualClock()
	tc1 := newTestCluster(t, 1, nil)
	tc1.setNow(clock.Now)
	m1 := tc1.mgrs[tc1.leader()]
	var (
		once  sync.Once
		moved atomic.Bool
		tc2   *testCluster
	)
	tc2 = newKnobbedCluster(t, 3, func(c *Config) { c.Datacenter = "dc2" }, TestingKnobs{
		BeforeAdmit: func(_ context.Context, _, key string) {
			if key != "order-1" {
				return
			}
			once.Do(func() {
				if err := tc2.mgrs[tc2.leaderNow()].raft.LeadershipTransfer().Error(); err != nil {
					t.Errorf("leadership transfer in dc2: %v", err)
				}
				moved.Store(true)
			})
		},
	})
	tc2.setNow(clock.Now)
	var dc2Addrs []string
	for _, m := range tc2.mgrs {
		dc2Addrs = append(dc2Addrs, serveManagerRPC(t, m))
	}
	peers := func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": dc2Addrs} }
	ctx := ctxT(t)

	r := submitForBoth(t, ctx, m1, "order-1")
	clock.Advance(outboxGrace + time.Second)
	ob := newOutbox(m1, peers, testutil.Logger(t))
	t.Cleanup(ob.close)
	testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
		ob.pass(ctx) // a failed attempt's backoff is on the wall clock: a few passes
		return m1.FSM().OutboxLen() == 0, "dc1 to record dc2's confirmation"
	})
	if !moved.Load() {
		t.Fatal("dc2's leadership did not move while it admitted the carried job")
	}
	tc2.waitFSMsApplied()
	for i, m := range tc2.mgrs {
		if j, ok := m.FSM().Job("t", r.JobId); !ok || m.FSM().Stats().Jobs != 1 {
			t.Fatalf("dc2 manager %d: job %+v %v, %d jobs; want the job alone", i, j, ok, m.FSM().Stats().Jobs)
		}
	}
}
