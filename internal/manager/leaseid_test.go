package manager

import (
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// A lease request retried with the same idempotency key after the lease it
// was given expired leases the job again (its next attempt) under a new
// lease ID: the old one, which a worker may still hold, stays refused.
func TestNewAttemptNeverReusesALeaseID(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.JobBackoffMin, c.JobBackoffMax = time.Second, time.Second
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	m := tc.mgrs[l]
	ctx := ctxT(t)
	submitJobs(t, tc, 1, "email")
	req := rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f1"}
	first, err := m.Lease(ctx, &req)
	if err != nil || len(first.Leases) != 1 || first.Leases[0].Attempt != 1 {
		t.Fatalf("first lease: %+v %v", first, err)
	}
	old := first.Leases[0]

	// The lease expires (and the leader's memory of the answer with it);
	// the leader puts the job back in the queue.
	clock.Advance(leaseReplayTTL + time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		j, ok := m.FSM().Job("acme", old.Job.JobId)
		return ok && j.Life != nil && j.Life.State == ledger.JobQueued, "the expired lease's job queued again"
	})
	clock.Advance(2 * time.Second) // past its backoff

	retry, err := m.Lease(ctx, &req)
	if err != nil || len(retry.Leases) != 1 || retry.Replayed {
		t.Fatalf("the retry: %+v %v; want the job leased again", retry, err)
	}
	again := retry.Leases[0]
	if again.Job.JobId != old.Job.JobId || again.Attempt != 2 {
		t.Fatalf("the retry leased %s attempt %d, want %s attempt 2", again.Job.JobId, again.Attempt, old.Job.JobId)
	}
	if again.LeaseId == old.LeaseId {
		t.Fatalf("attempt 2 has attempt 1's lease ID %s", old.LeaseId)
	}
	if _, err := m.HeartbeatJob(ctx, "acme", old.Job.JobId, old.LeaseId, 0); !isCode(err, rpc.CodeLeaseLost) {
		t.Fatalf("heartbeat with attempt 1's lease: %v, want lease_lost", err)
	}
	if _, err := m.HeartbeatJob(ctx, "acme", again.Job.JobId, again.LeaseId, 0); err != nil {
		t.Fatalf("heartbeat with attempt 2's lease: %v", err)
	}
	// A retry while attempt 2's lease lasts is answered with it (replayed).
	third, err := m.Lease(ctx, &req)
	if err != nil || !third.Replayed || len(third.Leases) != 1 || third.Leases[0].LeaseId != again.LeaseId {
		t.Fatalf("a retry while the lease lasts: %+v %v; want attempt 2's lease replayed", third, err)
	}
}
