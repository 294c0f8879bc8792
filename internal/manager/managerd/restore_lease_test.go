package managerd

import (
	"bytes"
	"testing"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestLeaseRetryAfterARestoreGetsALeaseTheLedgerHolds: a worker's lease
// whose answer was lost, retried with its idempotency key after a restore
// on the same leader, is not answered from the leader's memory of the
// first attempt: the restored ledger holds the job queued and not that
// lease, and a worker given it would run the job while another leases it
// and runs it again. The retry leases the job afresh.
func TestLeaseRetryAfterARestoreGetsALeaseTheLedgerHolds(t *testing.T) {
	_, m, op, archive := saved(t, managertest.Options{}, "before")
	req := &rpcpb.LeaseRequest{Tenant: "t", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f1"}
	first, err := m.Lease(t.Context(), req)
	if err != nil || len(first.Leases) != 1 {
		t.Fatalf("first lease: %+v %v", first, err)
	}
	if err := op.Restore(t.Context(), bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatalf("restore: %v", err)
	}
	id := first.Leases[0].Job.JobId
	if j, ok := m.FSM().Job("t", id); !ok || j.Life == nil || j.Life.State != ledger.JobQueued {
		t.Fatalf("after the restore the job is %+v (found %v); want it queued, as the archive holds it", j, ok)
	}
	retry, err := m.Lease(t.Context(), req)
	if err != nil || len(retry.Leases) != 1 {
		t.Fatalf("the retry: %+v %v; want the job leased", retry, err)
	}
	l := retry.Leases[0]
	if _, err := m.HeartbeatJob(t.Context(), "t", l.Job.JobId, l.LeaseId, 0); err != nil {
		t.Fatalf("heartbeat with the retry's lease %s (replayed %v, the first attempt's %s): %v; want a lease the ledger holds",
			l.LeaseId, retry.Replayed, first.Leases[0].LeaseId, err)
	}
}
