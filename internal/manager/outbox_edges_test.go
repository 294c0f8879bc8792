package manager

import (
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxDoesNotCarryAJobBackToItsOrigin: dc2 is unreachable for longer
// than dc1 retains the job of a submission for dc1 and dc2. When dc2 comes
// back, dc1's outbox carries the owed entry there; dc2's own outbox must not
// then carry the job back to dc1, which has forgotten both its entry and its
// job by now and would admit the key a second time (a second run of the job
// in dc1).
func TestOutboxDoesNotCarryAJobBackToItsOrigin(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	dcs := newOutboxDatacenters(t, 2, clock, retainFor(ttl), func(string) bool { return true })
	m1, m2, ob1, ob2 := dcs[0].m, dcs[1].m, dcs[0].ob, dcs[1].ob
	ctx := ctxT(t)
	first := m1.Raft().AppliedIndex() + 1
	// dc2 stays unreachable past the entry's TTL and the job's retention.
	r := admitUntilOwed(t, m1, clock, ttl)

	// dc2 is back: dc1 carries the job there.
	ob1.pass(ctx)
	if _, ok := m2.FSM().Job("t", r.JobId); !ok {
		t.Fatal("dc2 does not hold the job after dc1's outbox carried it")
	}
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 confirmed, want 0", n)
	}

	// dc2's outbox runs past its grace.
	clock.Advance(outboxGrace + time.Second)
	ob2.pass(ctx)
	if admits := admissionEntries(t, m1, first, "order-1"); admits != 1 {
		t.Fatalf("dc1 admitted the key in %d Admit entries, want one (the job ran again in dc1)", admits)
	}
	if _, ok := m1.FSM().Job("t", r.JobId); ok {
		t.Fatal("dc1 holds the job again after dc2's outbox carried it back")
	}
}

// TestOutboxAnswersACarriedJobFromTheOwedEntry: a gate reached dc1 and dc2
// and both admitted the job, but their managers cannot reach each other for
// longer than the job is retained, so each owes the other the job. When the
// link comes back, each outbox carries the job to the other datacenter, which
// has forgotten its job but still owes it: neither may admit the key again.
func TestOutboxAnswersACarriedJobFromTheOwedEntry(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	dcs := newOutboxDatacenters(t, 2, clock, retainFor(ttl), func(string) bool { return true })
	m1, m2, ob1, ob2 := dcs[0].m, dcs[1].m, dcs[0].ob, dcs[1].ob
	ctx := ctxT(t)
	req := order1ForDC1AndDC2()
	first1, first2 := m1.Raft().AppliedIndex()+1, m2.Raft().AppliedIndex()+1
	var jobID string
	for _, m := range []*Manager{m1, m2} {
		r, err := m.Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", m.cfg.Datacenter, r, err)
		}
		jobID = r.JobId
	}

	clock.Advance(2*ttl + time.Second)
	for _, m := range []*Manager{m1, m2} {
		testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
			_, live := m.FSM().Entry("t", "order-1")
			_, job := m.FSM().Job("t", jobID)
			return !live && !job && m.FSM().OwedLen() == 1, m.cfg.Datacenter + " to expire the entry and the job, and keep the entry owed"
		})
	}

	ob1.pass(ctx)
	ob2.pass(ctx)
	for _, c := range []struct {
		m     *Manager
		first uint64
	}{{m1, first1}, {m2, first2}} {
		if admits := admissionEntries(t, c.m, c.first, "order-1"); admits != 1 {
			t.Fatalf("%s admitted the key in %d Admit entries, want one (the job ran again)", c.m.cfg.Datacenter, admits)
		}
		if n := c.m.FSM().OutboxLen(); n != 0 {
			t.Fatalf("%s's outbox carries %d entries, want 0", c.m.cfg.Datacenter, n)
		}
	}
}

// TestCrossCarriedJobStillReachesTheThird: a gate reached dc1 and dc2 with a
// job for dc1, dc2 and dc3, and their outboxes carried it to each other at
// the same time, while dc3 was unreachable. Each records only its carrier as
// confirmed, never dc3 on the other's behalf, so both still carry the job to
// dc3 once it is back, and dc3 admits it once.
func TestCrossCarriedJobStillReachesTheThird(t *testing.T) {
	clock := newManualClock()
	var dc3Back atomic.Bool
	dcs := newOutboxDatacenters(t, 3, clock, func(*Config) {}, func(dc string) bool { return dc != "dc3" || dc3Back.Load() })
	m := [3]*Manager{dcs[0].m, dcs[1].m, dcs[2].m}
	ob1, ob2 := dcs[0].ob, dcs[1].ob
	ctx := ctxT(t)

	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2", "dc3"}}
	var jobID string
	for _, mgr := range m[:2] {
		r, err := mgr.Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", mgr.cfg.Datacenter, r, err)
		}
		jobID = r.JobId
	}
	// Each outbox's carry lands at the other before either has read the
	// other's: dc1 receives dc2's, dc2 receives dc1's.
	for _, c := range []struct {
		to      *Manager
		carrier string
	}{{m[0], "dc2"}, {m[1], "dc1"}} {
		carried := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1", ProposedJobId: jobID,
			Carried: true, Carrier: c.carrier, Job: req.Job}
		if r, err := c.to.Submit(ctx, carried); err != nil || r.Outcome != rpc.OutcomeCommitted || r.JobId != jobID {
			t.Fatalf("carried to %s: %+v %v", c.to.cfg.Datacenter, r, err)
		}
	}
	for _, mgr := range m[:2] {
		if n := mgr.FSM().OutboxLen(); n != 1 {
			t.Fatalf("%s's outbox carries %d entries after the cross carry, want 1 (dc3 still owed)", mgr.cfg.Datacenter, n)
		}
	}

	dc3Back.Store(true)
	first := m[2].Raft().AppliedIndex() + 1
	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	ob2.pass(ctx)
	if _, ok := m[2].FSM().Job("t", jobID); !ok {
		t.Fatal("dc3 does not hold the job after dc1 and dc2's outboxes ran")
	}
	if admits := admissionEntries(t, m[2], first, "order-1"); admits != 1 {
		t.Fatalf("dc3 admitted the key in %d Admit entries, want one", admits)
	}
	for _, mgr := range m[:2] {
		if n := mgr.FSM().OutboxLen(); n != 0 {
			t.Fatalf("%s's outbox carries %d entries after dc3 confirmed, want 0", mgr.cfg.Datacenter, n)
		}
	}
}

// outboxDatacenter is one datacenter of newOutboxDatacenters: its manager and
// its outbox, which runs a pass only when the test calls it.
type outboxDatacenter struct {
	m  *Manager
	ob *outbox
}

// newOutboxDatacenters starts datacenters dc1..dcn of one manager each on
// clock, with cfg applied (the lifecycle off: a job is kept by retention), their
// RPC served. Their outboxes reach the datacenters reachable allows.
// retainFor sets both the committed TTL and the job retention to ttl: a
// datacenter that forgets the entry and the job of a submission at once.
func retainFor(ttl time.Duration) func(*Config) {
	return func(c *Config) {
		c.Idempotency.CommittedTTL = ttl
		c.JobRetention = ttl
	}
}

// order1ForDC1AndDC2 is a submission of key order-1 for dc1 and dc2.
func order1ForDC1AndDC2() *rpcpb.SubmitRequest {
	return &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1",
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}}
}

func newOutboxDatacenters(t *testing.T, n int, clock *manualClock, cfg func(*Config), reachable func(dc string) bool) []outboxDatacenter {
	t.Helper()
	dcs := make([]outboxDatacenter, n)
	addrs := map[string][]string{}
	for i := range dcs {
		tc := newTestCluster(t, 1, func(c *Config) {
			cfg(c)
			c.Datacenter = fmt.Sprintf("dc%d", i+1)
			c.QueueJobs = false
		})
		tc.setNow(clock.Now)
		dcs[i].m = tc.mgrs[tc.leader()]
		addrs[dcs[i].m.cfg.Datacenter] = []string{serveManagerRPC(t, dcs[i].m)}
	}
	peers := func() map[string][]string {
		reached := maps.Clone(addrs)
		maps.DeleteFunc(reached, func(dc string, _ []string) bool { return !reachable(dc) })
		return reached
	}
	for i := range dcs {
		dcs[i].ob = newOutbox(dcs[i].m, peers, testutil.Logger(t))
		t.Cleanup(dcs[i].ob.close)
	}
	return dcs
}

// admitUntilOwed admits order1ForDC1AndDC2 at m (dc1), then moves clock past
// the entry's TTL and the job's retention (both ttl, no pass carrying it to
// dc2) and waits for m to have forgotten both and to owe the entry.
func admitUntilOwed(t *testing.T, m *Manager, clock *manualClock, ttl time.Duration) *rpcpb.SubmitResponse {
	t.Helper()
	r, err := m.Submit(ctxT(t), order1ForDC1AndDC2())
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	clock.Advance(2*ttl + time.Second)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		_, live := m.FSM().Entry("t", "order-1")
		_, job := m.FSM().Job("t", r.JobId)
		return !live && !job && m.FSM().OwedLen() == 1, "dc1 to expire the entry and the job, and keep the entry owed"
	})
	return r
}
