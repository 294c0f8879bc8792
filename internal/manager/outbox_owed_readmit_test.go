package manager

import (
	"slices"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxDoesNotCarryAReadmittedJobToWhereItWasConfirmed: a job for dc1,
// dc2 and dc3 reaches dc2 through dc1's outbox (dc2 confirms it) while dc3
// is unreachable for longer than dc1 retains the entry and the job, so dc1
// owes it to dc3 only. The client then sends the key again and dc1 admits it
// again under the same job ID. The new live entry must start confirmed by
// dc2: the outbox carries the job to dc3 alone, never to dc2 again, which
// has forgotten it by then or is about to.
func TestOutboxDoesNotCarryAReadmittedJobToWhereItWasConfirmed(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	// dc3 is never reachable: the outbox knows no address of it.
	m1, _, svc2, ob1 := dc1CarryingToCountedDC2(t, clock, ttl)
	ctx := ctxT(t)

	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1",
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2", "dc3"}}}
	r, err := m1.Submit(ctx, req)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	if n := svc2.carried.Load(); n != 1 {
		t.Fatalf("the first pass carried the job to dc2 %d times, want once", n)
	}
	if e, ok := m1.FSM().Entry("t", "order-1"); !ok || !slices.Equal(e.Confirmed, []string{"dc2"}) {
		t.Fatalf("dc1's entry after the first pass: %+v %v; want confirmed by dc2", e, ok)
	}

	// dc3 stays unreachable past the entry's TTL and the job's retention.
	clock.Advance(2*ttl + time.Second)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		_, live := m1.FSM().Entry("t", "order-1")
		_, job := m1.FSM().Job("t", r.JobId)
		return !live && !job && m1.FSM().OwedLen() == 1, "dc1 to expire the entry and the job, and keep the entry owed"
	})
	// The passes meanwhile find the job owed to dc3 only: the outbox
	// forgets the pair of dc2, done, as after any Confirm.
	ob1.pass(ctx)
	again, err := m1.Submit(ctx, req)
	if err != nil || again.Outcome != rpc.OutcomeCommitted || again.JobId != r.JobId {
		t.Fatalf("dc1, the key sent again: %+v %v", again, err)
	}

	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	if n := svc2.carried.Load(); n != 1 {
		t.Fatalf("after the key was sent again, dc1's outbox carried the job to dc2 %d times in all, want once (dc2 confirmed it)", n)
	}
	if e, ok := m1.FSM().Entry("t", "order-1"); !ok || !slices.Equal(e.Confirmed, []string{"dc2"}) {
		t.Fatalf("dc1's re-admitted entry: %+v %v; want confirmed by dc2 (the owed copy's)", e, ok)
	}
	if n, o := m1.FSM().OwedLen(), m1.FSM().OutboxLen(); n != 1 || o == 0 {
		t.Fatalf("dc1 owes %d entries, its outbox carries %d; want the job still owed to dc3", n, o)
	}
}
