package manager

import (
	"context"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxCompletesOtherDatacenters: a job for dc1 and dc2 that reached only
// dc1 (its gate's forward to dc2 failed) is carried to dc2 by dc1's leader:
// dc2 then holds the job under the same ID, its entry expires at the same
// instant as dc1's (not dc2's TTL counted from the later carry), and the
// outbox stops asking.
func TestOutboxCompletesOtherDatacenters(t *testing.T) {
	clock := newManualClock()
	tc1 := newTestCluster(t, 1, nil)
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, func(c *Config) { c.Datacenter = "dc2" })
	tc2.setNow(clock.Now)
	l1, l2 := tc1.leader(), tc2.leader()
	addr := rpctest.Listen(t, rpc.NewServer(tc2.mgrs[l2], rpc.ServerConfig{Logger: testutil.Logger(t)}))
	ctx := ctxT(t)

	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "order-9", Fingerprint: "fp9"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`9`), Datacenters: []string{"dc1", "dc2"}}
	r, err := tc1.mgrs[l1].Submit(ctx, req)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	if _, ok := tc2.mgrs[l2].FSM().Job("t", r.JobId); ok {
		t.Fatal("dc2 has the job before the outbox carried it")
	}

	peers := func() map[string][]string {
		return map[string][]string{"dc1": nil, "dc2": {addr}}
	}
	ob := newOutbox(tc1.mgrs[l1], peers, testutil.Logger(t))
	octx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ob.run(octx) }()
	defer func() { cancel(); <-done }()

	clock.Advance(outboxGrace) // past the grace the gate's own fan-out is given
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		j, ok := tc2.mgrs[l2].FSM().Job("t", r.JobId)
		return ok && j.Key == "order-9", "dc2 to hold job " + r.JobId
	})
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		ob.mu.Lock()
		defer ob.mu.Unlock()
		st := ob.state[outboxKey{"t", "order-9", r.JobId, "dc2"}]
		return st != nil && st.done, "the outbox to record dc2's final outcome"
	})
	e1, _ := tc1.mgrs[l1].FSM().Entry("t", "order-9")
	e2, _ := tc2.mgrs[l2].FSM().Entry("t", "order-9")
	if e2.ExpiresAt != e1.ExpiresAt || e2.JobID != e1.JobID {
		t.Fatalf("dc2's entry expires at %d (job %s), dc1's at %d (job %s); a TTL from the carry would give %d",
			e2.ExpiresAt, e2.JobID, e1.ExpiresAt, e1.JobID, e2.ResolvedAt+int64(tc2.mgrs[l2].cfg.Idempotency.CommittedTTL))
	}
	if n := tc2.mgrs[l2].FSM().Stats().Jobs; n != 1 {
		t.Fatalf("dc2 holds %d jobs, want 1", n)
	}
	// The progress is in dc1's ledger: a later leader (here, an outbox that
	// knows nothing) finds nothing left to carry.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		e, _ := tc1.mgrs[l1].FSM().Entry("t", "order-9")
		return len(e.Confirmed) == 1 && e.Confirmed[0] == "dc2", "dc1's ledger to record dc2's outcome"
	})
	carried := 0
	tc1.mgrs[l1].FSM().ResolvedMultiDatacenter("dc1", func(ledger.Entry) bool { carried++; return true })
	if carried != 0 {
		t.Fatalf("%d entries still to carry after dc2 confirmed", carried)
	}
}
