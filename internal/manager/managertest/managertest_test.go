package managertest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func submitRequest(key string) *rpcpb.SubmitRequest {
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp", WaitMillis: 5000}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`)}
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
			if e, ok := m.FSM().Entry("t", "k1"); !ok || e.JobID != resp.JobId {
				return false, "every replica to hold the job"
			}
		}
		return true, ""
	})
}

// While a key's Admit is in flight at the leader (held by
// Knobs.BeforeAdmit), the key is in progress: a submission of it that may not
// wait answers in_progress, one that may waits for the Admit (seen waiting by
// Knobs.WaitsOnAdmit before the Admit is let go) and replays its job, and the
// log holds one admission.
func TestKnobsHoldAnAdmissionInFlight(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	waiting := make(chan string, 2)
	var once sync.Once
	c := managertest.Start(t, managertest.Options{Knobs: manager.TestingKnobs{
		BeforeAdmit: func(ctx context.Context, _, _ string) {
			once.Do(func() {
				close(held)
				select {
				case <-release:
				case <-ctx.Done():
				}
			})
		},
		WaitsOnAdmit: func(_, key string) { waiting <- key },
	}})
	m := c.Managers[0]
	req := submitRequest("k1")
	type answer struct {
		resp *rpcpb.SubmitResponse
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		resp, err := m.Submit(context.Background(), req)
		first <- answer{resp, err}
	}()
	<-held
	noWait := proto.Clone(req).(*rpcpb.SubmitRequest)
	noWait.WaitMillis = 0
	if resp, err := m.Submit(context.Background(), noWait); err != nil || resp.Outcome != rpc.OutcomeInProgress {
		t.Fatalf("submission of a key in flight, no wait: %+v %v", resp, err)
	}
	if k := <-waiting; k != req.Key {
		t.Fatalf("the no-wait submission found %q in flight", k)
	}
	waits := proto.Clone(req).(*rpcpb.SubmitRequest)
	waits.WaitMillis = 10_000
	second := make(chan answer, 1)
	go func() {
		resp, err := m.Submit(context.Background(), waits)
		second <- answer{resp, err}
	}()
	if k := <-waiting; k != req.Key { // it waits on the Admit still held
		t.Fatalf("the second submission found %q in flight", k)
	}
	close(release)
	a, b := <-first, <-second
	if a.err != nil || a.resp.Outcome != rpc.OutcomeCommitted || a.resp.Replayed {
		t.Fatalf("first: %+v %v", a.resp, a.err)
	}
	if b.err != nil || b.resp.Outcome != rpc.OutcomeCommitted || !b.resp.Replayed || b.resp.JobId != a.resp.JobId {
		t.Fatalf("the one that waited: %+v %v, want a replay of job %s", b.resp, b.err, a.resp.JobId)
	}
	if n := m.FSM().Stats().Jobs; n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// unavailable is a fault layer that answers every submission unavailable.
type unavailable struct{ *manager.Manager }

func (unavailable) Submit(context.Context, *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
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
