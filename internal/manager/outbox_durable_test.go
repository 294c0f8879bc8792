package manager

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// serveManagerRPC serves m's RPC on a local listener until the test ends and
// returns its address.
func serveManagerRPC(t *testing.T, m *Manager) string {
	t.Helper()
	return rpctest.Listen(t, rpc.NewServer(m, rpc.ServerConfig{Logger: testutil.Logger(t)}))
}

// runOutboxes runs an outbox on every manager of tc, as Main does, until the
// test ends.
func runOutboxes(t *testing.T, tc *testCluster, peers func() map[string][]string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range tc.mgrs {
		ob := newOutbox(m, peers, testutil.Logger(t))
		wg.Add(1)
		go func() { defer wg.Done(); ob.run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestOutboxOutlivesTheTTL: dc2 is unreachable for longer than the TTL of a
// job for dc1 and dc2 that reached only dc1. The entry expires in dc1 but
// stays owed in its ledger; dc1's leader changes during the outage; once dc2
// is reachable, the new leader carries the job there under the same job ID
// and the owed entry is cleared. The submission is admitted in one Admit
// entry.
func TestOutboxOutlivesTheTTL(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	short := func(c *Config) { c.Idempotency.CommittedTTL = ttl }
	tc1 := newTestCluster(t, 3, short)
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, func(c *Config) { short(c); c.Datacenter = "dc2" })
	tc2.setNow(clock.Now)
	m2 := tc2.mgrs[tc2.leader()]
	dc2Addr := serveManagerRPC(t, m2)
	peers, reachable := dc2Peers(t, dc2Addr)
	runOutboxes(t, tc1, peers)
	ctx := ctxT(t)

	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}
	l1 := tc1.leader()
	first := tc1.mgrs[l1].Raft().AppliedIndex() + 1
	r, err := tc1.mgrs[l1].Submit(ctx, req)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	if admits := admissionEntries(t, tc1.mgrs[l1], first, "order-1"); admits != 1 {
		t.Fatalf("dc1 admitted the job in %d Admit entries, want one", admits)
	}
	if n := tc1.mgrs[l1].FSM().OutboxLen(); n != 1 {
		t.Fatalf("the outbox carries %d entries, want 1", n)
	}

	// The outage outlasts the TTL: the entry expires in dc1, on every
	// replica, and stays owed.
	clock.Advance(ttl + time.Second)
	for i, m := range tc1.mgrs {
		testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
			_, live := m.FSM().Entry("t", "order-1")
			return !live && m.FSM().OwedLen() == 1 && m.FSM().OutboxLen() == 1,
				"manager " + strconv.Itoa(i) + " to expire the entry and keep it owed"
		})
	}

	// dc1's leader changes during the outage.
	tc1.stop(l1)
	nl := tc1.leader()
	clock.Advance(time.Minute)
	if n := tc1.mgrs[nl].FSM().OwedLen(); n != 1 {
		t.Fatalf("the new leader's ledger owes %d entries, want 1", n)
	}
	if _, ok := m2.FSM().Job("t", r.JobId); ok {
		t.Fatal("dc2 has the job while unreachable")
	}

	reachable.Store(true)
	testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
		j, ok := m2.FSM().Job("t", r.JobId)
		return ok && j.Key == "order-1", "dc2 to hold job " + r.JobId
	})
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		f := tc1.mgrs[nl].FSM()
		return f.OwedLen() == 0 && f.OutboxLen() == 0, "dc1's ledger to record dc2's confirmation"
	})
	if n := m2.FSM().Stats().Jobs; n != 1 {
		t.Fatalf("dc2 holds %d jobs, want 1", n)
	}
}

// TestOutboxFullRefusesNewMultiDatacenterSubmissions: at
// MANAGER_OUTBOX_MAX_ENTRIES, a new multi-datacenter submission is refused
// (outbox_full, nothing recorded); a retry of a key already admitted, a
// single-datacenter submission and one another datacenter's outbox carries
// are not.
func TestOutboxFullRefusesNewMultiDatacenterSubmissions(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.OutboxMaxEntries = 1 })
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	submit := func(key string, carried bool, dcs ...string) (*rpcpb.SubmitResponse, error) {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key, Carried: carried}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: dcs}
		return m.Submit(ctx, req)
	}
	first, err := submit("a", false, "dc1", "dc2")
	if err != nil || first.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("first: %+v %v", first, err)
	}
	if _, err := submit("b", false, "dc1", "dc2"); !errors.Is(err, rpc.ErrOutboxFull) {
		t.Fatalf("a second multi-datacenter key with the outbox full: %v, want outbox_full", err)
	}
	if _, ok := m.FSM().Entry("t", "b"); ok {
		t.Fatal("the refused key was recorded")
	}
	if again, err := submit("a", false, "dc1", "dc2"); err != nil || again.JobId != first.JobId {
		t.Fatalf("a retry of the admitted key: %+v %v", again, err)
	}
	if r, err := submit("c", false, "dc1"); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a single-datacenter key: %+v %v", r, err)
	}
	if r, err := submit("d", true, "dc1", "dc2"); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a carried submission: %+v %v", r, err)
	}
	if got := promtest.ToFloat64(m.metrics.outboxRefused); got != 1 {
		t.Fatalf("once_manager_outbox_refused_total %v, want 1", got)
	}
}

// admissionEntries counts the Admits of key in m's log from index first on,
// alone or in admit batches.
func admissionEntries(t *testing.T, m *Manager, first uint64, key string) (admits int) {
	t.Helper()
	count := func(c ledger.Command) {
		if c, ok := c.(ledger.Admit); ok && c.Reserve.Key == key {
			admits++
		}
	}
	for idx := first; idx <= m.Raft().LastIndex(); idx++ {
		var lg raft.Log
		if err := m.logStore.GetLog(idx, &lg); err != nil {
			t.Fatalf("log %d: %v", idx, err)
		}
		if lg.Type != raft.LogCommand {
			continue
		}
		cmd, err := ledger.DecodeCommand(lg.Data)
		if err != nil {
			t.Fatalf("log %d: %v", idx, err)
		}
		if b, ok := cmd.(ledger.AdmitBatch); ok {
			for _, it := range b.Items {
				count(it)
			}
			continue
		}
		count(cmd)
	}
	return admits
}

// dc2Peers is a federation view of dc1 and dc2 whose dc2 is unreachable (an
// address nothing listens on) until reachable is set, then at dc2Addr.
func dc2Peers(t *testing.T, dc2Addr string) (peers func() map[string][]string, reachable *atomic.Bool) {
	dead := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) // nothing listens there
	reachable = new(atomic.Bool)
	return func() map[string][]string {
		if reachable.Load() {
			return map[string][]string{"dc1": nil, "dc2": {dc2Addr}}
		}
		return map[string][]string{"dc1": nil, "dc2": {dead}}
	}, reachable
}

// transferOnFirstAdmit are knobs that move m's leadership away as the
// manager they are given to first admits a submission.
func transferOnFirstAdmit(t *testing.T, m *Manager) TestingKnobs {
	var once sync.Once
	return TestingKnobs{BeforeAdmit: func(context.Context, string, string) {
		once.Do(func() {
			if err := m.raft.LeadershipTransfer().Error(); err != nil {
				t.Errorf("leadership transfer away from %s: %v", m.cfg.NodeID, err)
			}
		})
	}}
}

// submitForBoth submits a job for dc1 and dc2 under key at m (dc1's
// leader), which must commit it.
func submitForBoth(t *testing.T, ctx context.Context, m *Manager, key string) *rpcpb.SubmitResponse {
	t.Helper()
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp1"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}
	r, err := m.Submit(ctx, req)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	return r
}

// Coverage (passes on main): every manager of dc1 restarts, from its data
// directory (a snapshot and the log after it), while its outbox owes dc2 an
// expired (owed) entry and 41 live ones, dc2 unreachable. After the restart
// the ledger still counts them, and the new leader's outbox carries every
// one to dc2 once it is reachable.
func TestOutboxCarriesAfterEveryManagerRestarts(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	short := func(c *Config) { c.Idempotency.CommittedTTL = ttl; c.SnapshotThreshold = 16; c.TrailingLogs = 4 }
	tc1 := newTestCluster(t, 3, short)
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, func(c *Config) { short(c); c.Datacenter = "dc2" })
	tc2.setNow(clock.Now)
	m2 := tc2.mgrs[tc2.leader()]
	peers, reachable := dc2Peers(t, serveManagerRPC(t, m2))
	runOutboxes(t, tc1, peers)
	ctx := ctxT(t)
	sub := func(key string) string {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp1"}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}
		r, err := tc1.mgrs[tc1.leader()].Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("dc1: %+v %v", r, err)
		}
		return r.JobId
	}
	owed := sub("owed-1")
	clock.Advance(ttl + time.Second)
	for i, m := range tc1.mgrs {
		testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
			return m.FSM().OwedLen() == 1, "manager " + strconv.Itoa(i) + " to keep the entry owed"
		})
	}
	live := sub("live-1")
	for i := 0; i < 40; i++ {
		sub("more-" + strconv.Itoa(i)) // enough entries for a snapshot and a log after it
	}
	if err := tc1.mgrs[tc1.leader()].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tc1.closeAll()
	for i := range tc1.cfgs {
		tc1.start(i)
	}
	l := tc1.leader()
	if n := tc1.mgrs[l].FSM().OutboxLen(); n != 42 {
		t.Fatalf("after the restart the outbox carries %d entries, want 42", n)
	}
	clock.Advance(3 * time.Second) // past the outbox's grace, within the TTL
	runOutboxes(t, tc1, peers)
	reachable.Store(true)
	for _, id := range []string{owed, live} {
		testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
			_, ok := m2.FSM().Job("t", id)
			return ok, "dc2 to hold job " + id
		})
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		f := tc1.mgrs[tc1.leader()].FSM()
		return f.OwedLen() == 0 && f.OutboxLen() == 0, "dc1's outbox to empty"
	})
}
