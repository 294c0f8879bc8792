package manager

import (
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxCarriesAgainAfterACapacityRejection: dc2 holds its maximum of
// queued jobs (MANAGER_MAX_QUEUED_JOBS) when dc1's outbox carries it a job
// for dc1 and dc2, and answers 429 capacity. That rejection is no final
// outcome (the client's own retry after its Retry-After would be admitted):
// the outbox keeps the pair owed and carries it again, and once dc2 has
// room and its rejection has expired, dc2 holds the job under the same ID.
// Taken as final, the job never ran in dc2 and nothing said so.
func TestOutboxCarriesAgainAfterACapacityRejection(t *testing.T) {
	clock := newManualClock()
	const ttl = 10 * time.Second
	tc1 := newTestCluster(t, 1, func(c *Config) { c.Idempotency.CommittedTTL = ttl })
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, func(c *Config) { c.Datacenter = "dc2"; c.MaxQueuedJobs = 1 })
	tc2.setNow(clock.Now)
	m1, m2 := tc1.mgrs[tc1.leader()], tc2.mgrs[tc2.leader()]
	addr := serveManagerRPC(t, m2)
	ctx := ctxT(t)

	// dc2 is full: one queued job of its own.
	fill := &rpcpb.SubmitRequest{Tenant: "t", Key: "filler", Fingerprint: "fpf"}
	fill.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`0`), Datacenters: []string{"dc2"}}
	if r, err := m2.Submit(ctx, fill); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc2's own job: %+v %v", r, err)
	}
	r := submitForBoth(t, ctx, m1, "order-c")
	runOutboxes(t, tc1, func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {addr}} })
	clock.Advance(outboxGrace)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		e, ok := m2.FSM().Entry("t", "order-c")
		return ok && e.State == ledger.StateRejected && e.Reason == ledger.ReasonCapacity, "dc2 to refuse the carried job for capacity"
	})

	// dc2's worker finishes its job: room for one more.
	l, err := m2.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "t", Worker: "w", MaxJobs: 1})
	if err != nil || len(l.Leases) != 1 {
		t.Fatalf("lease at dc2: %+v %v", l, err)
	}
	if _, err := m2.CompleteJob(ctx, "t", l.Leases[0].Job.JobId, l.Leases[0].LeaseId, nil); err != nil {
		t.Fatalf("complete at dc2: %v", err)
	}
	// The rejection expires there with dc1's entry (the carried TTL).
	clock.Advance(ttl)
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		j, ok := m2.FSM().Job("t", r.JobId)
		return ok && j.Key == "order-c", "dc2 to hold job " + r.JobId
	})
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		return m1.FSM().OutboxLen() == 0, "dc1's outbox to record dc2's confirmation"
	})
}

// TestOutboxTakesACapacityRejectionOfAJobRejectedHereAsFinal: both
// datacenters hold their maximum of queued jobs, so both refuse a job for
// dc1 and dc2 for capacity, as its client was told (429). dc1's outbox
// carries its rejection to dc2 as any resolved entry, and dc2's capacity
// rejection, agreeing with dc1's, is final: the pair is confirmed, and the
// job is not carried again to run in dc2 once it has room.
func TestOutboxTakesACapacityRejectionOfAJobRejectedHereAsFinal(t *testing.T) {
	full := func(c *Config) { c.MaxQueuedJobs = 1 }
	tc1 := newTestCluster(t, 1, full)
	tc2 := newTestCluster(t, 1, func(c *Config) { full(c); c.Datacenter = "dc2" })
	m1, m2 := tc1.mgrs[tc1.leader()], tc2.mgrs[tc2.leader()]
	addr := serveManagerRPC(t, m2)
	ctx := ctxT(t)
	for dc, m := range map[string]*Manager{"dc1": m1, "dc2": m2} {
		fill := &rpcpb.SubmitRequest{Tenant: "t", Key: "filler", Fingerprint: "fpf"}
		fill.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`0`), Datacenters: []string{dc}}
		if r, err := m.Submit(ctx, fill); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s's own job: %+v %v", dc, r, err)
		}
	}
	for dc, m := range map[string]*Manager{"dc1": m1, "dc2": m2} {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-r", Fingerprint: "fp1"}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}
		if r, err := m.Submit(ctx, req); err != nil || r.Outcome != rpc.OutcomeRejected || r.Rejection.Reason != ledger.ReasonCapacity {
			t.Fatalf("%s: %+v %v, want a capacity rejection", dc, r, err)
		}
	}
	if n := m1.FSM().OutboxLen(); n != 1 {
		t.Fatalf("dc1's outbox carries %d entries, want its rejection", n)
	}
	runOutboxes(t, tc1, func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {addr}} })
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		return m1.FSM().OutboxLen() == 0, "dc1's outbox to take dc2's capacity rejection as final"
	})
}
