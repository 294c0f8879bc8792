package managertest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func submitRequest(key string) *rpc.SubmitRequest {
	req := &rpc.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp", WaitMillis: 5000}
	req.Job.Type, req.Job.Payload = "demo", []byte(`1`)
	return req
}

// client is the gates' RPC client of the cluster's managers.
func client(t *testing.T, c *managertest.Cluster) *rpc.Client {
	cl := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.ResolverFunc(func() []string { return c.Addrs }), Logger: testutil.Logger(t)})
	t.Cleanup(cl.Close)
	return cl
}

// Three managers serve the RPC on their addresses; a submission through the
// gates' client, which follows the leader, commits on every replica.
func TestThreeManagersReplicate(t *testing.T) {
	c := managertest.Start(t, managertest.Options{Managers: 3})
	if len(c.Managers) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("%d managers, %d addresses", len(c.Managers), len(c.Addrs))
	}
	resp, err := client(t, c).Submit(context.Background(), submitRequest("k1"))
	if err != nil || resp.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit: %+v %v", resp, err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, m := range c.Managers {
			if e, ok := m.FSM().Entry("t", "k1"); !ok || e.JobID != resp.JobID {
				return false, "every replica to hold the job"
			}
		}
		return true, ""
	})
}

// Reserve leaves the key PENDING: a submission of it answers in_progress;
// once the managers' clock passes the orphan grace the leader resolves it,
// and the submission replays the job.
func TestReserveLeavesTheKeyPending(t *testing.T) {
	clock := testutil.NewClock(time.Now())
	c := managertest.Start(t, managertest.Options{Now: clock.Now})
	req := submitRequest("k1")
	if err := c.Reserve(req); err != nil {
		t.Fatal(err)
	}
	if e, ok := c.Managers[0].FSM().Entry("t", "k1"); !ok || e.State != ledger.StatePending {
		t.Fatalf("entry %+v %v, want PENDING", e, ok)
	}
	noWait := *req
	noWait.WaitMillis = 0
	if resp, err := c.Managers[0].Submit(context.Background(), &noWait); err != nil || resp.Outcome != rpc.OutcomeInProgress {
		t.Fatalf("submission of a PENDING key: %+v %v", resp, err)
	}
	clock.Advance(c.Managers[0].Config().OrphanGrace + time.Millisecond)
	resp, err := c.Managers[0].Submit(context.Background(), req)
	if err != nil || resp.Outcome != rpc.OutcomeCommitted || !resp.Replayed {
		t.Fatalf("after the orphan grace: %+v %v", resp, err)
	}
}

// unavailable is a fault layer that answers every submission unavailable.
type unavailable struct{ *manager.Manager }

func (unavailable) Submit(context.Context, *rpc.SubmitRequest) (*rpc.SubmitResponse, error) {
	return nil, rpc.Errorf(rpc.CodeUnavailable, "the test's fault layer")
}

// Serve puts a fault layer in front of the manager: the gates' client gets
// its answer and the manager never sees the submission.
func TestServeWrapsTheService(t *testing.T) {
	c := managertest.Start(t, managertest.Options{Serve: func(m *manager.Manager) rpc.Service { return unavailable{m} }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if resp, err := client(t, c).Submit(ctx, submitRequest("k1")); err == nil {
		t.Fatalf("submit through the fault layer: %+v", resp)
	}
	if _, ok := c.Managers[0].FSM().Entry("t", "k1"); ok {
		t.Fatal("the manager saw the submission")
	}
}
