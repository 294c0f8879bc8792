package manager

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// countingService counts the carried Submits its manager is sent, and the
// payload bytes of the jobs it answers them with.
type countingService struct {
	*Manager
	carried         atomic.Int64
	carriedPayloads atomic.Int64
}

func (s *countingService) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	resp, err := s.Manager.Submit(ctx, req)
	if req.Carried {
		s.carried.Add(1)
		s.carriedPayloads.Add(int64(len(resp.GetJob().GetPayload())))
	}
	return resp, err
}

// TestOutboxCarriesALiveAndOwedJobOnce: dc2 was unreachable for longer than
// a job for dc1 and dc2 was retained in dc1, so dc1 owes it; the client then
// sends the key again and dc1 admits it again under the same job ID (a live
// entry besides the owed one). One pass carries the job to dc2 once, with the
// live entry's expiry: a second Submit carrying the owed copy's (an expired
// entry, carried with the shortest lifetime) could land first and make dc2's
// entry expire seconds after it is written instead of with dc1's. Nor is the
// owed copy carried alone while the live entry waits out its grace.
func TestOutboxCarriesALiveAndOwedJobOnce(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	m1, m2, svc2, ob1 := dc1CarryingToCountedDC2(t, clock, ttl)
	ctx := ctxT(t)

	req := order1ForDC1AndDC2()
	// dc2 is not reached (no pass) while the entry and the job expire in
	// dc1; the entry stays owed.
	r := admitUntilOwed(t, m1, clock, ttl)
	again, err := m1.Submit(ctx, req)
	if err != nil || again.Outcome != rpc.OutcomeCommitted || again.JobId != r.JobId {
		t.Fatalf("dc1, the key sent again: %+v %v", again, err)
	}
	live, ok := m1.FSM().Entry("t", "order-1")
	if !ok || m1.FSM().OwedLen() != 1 {
		t.Fatalf("dc1 holds the entry live %v and %d owed, want both", ok, m1.FSM().OwedLen())
	}

	// Within the live entry's grace, neither copy is carried.
	ob1.pass(ctx)
	if n := svc2.carried.Load(); n != 0 {
		t.Fatalf("a pass within the live entry's grace carried the job to dc2 %d times, want none", n)
	}
	clock.Advance(outboxGrace + time.Second) // the live entry is due, not expired
	ob1.pass(ctx)
	if n := svc2.carried.Load(); n != 1 {
		t.Fatalf("one pass carried the job to dc2 %d times, want once", n)
	}
	e2, ok := m2.FSM().Entry("t", "order-1")
	if !ok || e2.JobID != r.JobId {
		t.Fatalf("dc2's entry: %+v %v", e2, ok)
	}
	if e2.ExpiresAt != live.ExpiresAt {
		t.Fatalf("dc2's entry expires at %v, dc1's at %v: want the same instant",
			time.Unix(0, e2.ExpiresAt), time.Unix(0, live.ExpiresAt))
	}
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 confirmed the job, want 0", n)
	}
}

// dc1CarryingToCountedDC2 starts dc1 and dc2, one manager each on clock,
// with retainFor(ttl) and jobs not queued, and dc1's outbox, which reaches
// dc2 only (through svc2, which counts the carried submissions; any other
// datacenter is known and unreachable).
func dc1CarryingToCountedDC2(t *testing.T, clock *manualClock, ttl time.Duration) (m1, m2 *Manager, svc2 *countingService, ob1 *outbox) {
	t.Helper()
	cfg := func(dc string) func(*Config) {
		return func(c *Config) { retainFor(ttl)(c); c.Datacenter = dc; c.QueueJobs = false }
	}
	tc1 := newTestCluster(t, 1, cfg("dc1"))
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, cfg("dc2"))
	tc2.setNow(clock.Now)
	m1, m2 = tc1.mgrs[tc1.leader()], tc2.mgrs[tc2.leader()]
	svc2 = &countingService{Manager: m2}
	addr2 := rpctest.Listen(t, rpc.NewServer(svc2, rpc.ServerConfig{Logger: testutil.Logger(t)}))
	ob1 = newOutbox(m1, func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {addr2}} }, testutil.Logger(t))
	t.Cleanup(ob1.close)
	return m1, m2, svc2, ob1
}
