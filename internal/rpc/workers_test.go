package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// stubWorkers answers Complete with the result it was given, and
// budget_exceeded for a result over budget bytes.
type stubWorkers struct{ budget int }

func (stubWorkers) Lease(context.Context, *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	return &rpcpb.LeaseResponse{}, nil
}
func (stubWorkers) Heartbeat(context.Context, *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error) {
	return &rpcpb.HeartbeatResponse{}, nil
}
func (s stubWorkers) Complete(_ context.Context, r *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	if s.budget > 0 && len(r.Result) > s.budget {
		return nil, Errorf(CodeBudgetExceeded, "over budget")
	}
	return &rpcpb.Job{JobId: r.JobId, Result: r.Result}, nil
}
func (stubWorkers) Fail(context.Context, *rpcpb.FailRequest) (*rpcpb.Job, error) {
	return &rpcpb.Job{}, nil
}

// workersManager is a leader that serves w's worker calls.
type workersManager struct {
	*fakeManager
	Workers
}

func workersClient(t *testing.T, w Workers) *Client {
	return serviceClient(t, workersManager{&fakeManager{leader: true}, w})
}

func serviceClient(t *testing.T, svc Service) *Client {
	addr := serve(t, svc)
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	return c
}

// A completion whose result is the largest body a gate accepts reaches the
// manager with the call's other members (at their bounds), not refused as
// an oversized body.
func TestWorkerBodyLimitAdmitsTheGatesLargest(t *testing.T) {
	c := workersClient(t, stubWorkers{})
	result := json.RawMessage(`"` + strings.Repeat("r", MaxBodyBytes-2) + `"`)
	long := strings.Repeat("x", api.MaxTypeLen)
	job, err := c.Complete(context.Background(), &rpcpb.CompleteRequest{Tenant: long, JobId: long, LeaseId: long, Result: result})
	if err != nil || len(job.Result) != len(result) {
		t.Fatalf("complete with a %d-byte result: %v", len(result), err)
	}
}

// budget_exceeded keeps its identity across the wire.
func TestBudgetExceededCrossesTheWire(t *testing.T) {
	c := workersClient(t, stubWorkers{budget: 10})
	_, err := c.Complete(context.Background(), &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l", Result: json.RawMessage(`"0123456789"`)})
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("want %v, got %v", ErrBudgetExceeded, err)
	}
}

// recordManager is a leader that serves recordWorkers' worker calls and job
// actions.
type recordManager struct {
	*fakeManager
	recordWorkers
}

// recordWorkers keeps what it was asked and answers with every member set.
// Complete answers not_leader naming leader when it is set.
type recordWorkers struct {
	lease  chan *rpcpb.LeaseRequest
	action chan *rpcpb.JobActionRequest
	leader string
}

// fullJob is a job with every member set.
func fullJob() *rpcpb.Job {
	return &rpcpb.Job{JobId: "j1", Type: "ty", Status: "committed", IdempotencyKey: "k", CreatedAt: "2026-01-02T03:04:05.000Z",
		Datacenters:    map[string]*rpcpb.DatacenterStatus{"dc1": {Status: "committed"}, "dc2": {Status: "rejected", Reason: "r"}},
		DatacentersSet: true, Payload: []byte(`{"a":1}`), State: "succeeded", Attempts: 3, Result: []byte(`[1]`), Error: "e",
		NamedDatacenters: []string{"dc1", "dc2"}}
}

func (r recordWorkers) Lease(_ context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	r.lease <- req
	return &rpcpb.LeaseResponse{Replayed: true, Leases: []*rpcpb.Lease{{LeaseId: "l1", Job: fullJob(), Attempt: 3, ExpiresAt: "x"}}}, nil
}
func (recordWorkers) Heartbeat(_ context.Context, req *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error) {
	return &rpcpb.HeartbeatResponse{LeaseId: req.LeaseId, ExpiresAt: req.JobId + "/" + req.Tenant + "/" + time.Duration(req.LeaseForNanos).String()}, nil
}
func (r recordWorkers) Complete(_ context.Context, req *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	if r.leader != "" {
		return nil, &Error{Code: CodeNotLeader, Message: "follower", Leader: r.leader}
	}
	return &rpcpb.Job{JobId: req.JobId, Result: req.Result}, nil
}
func (recordWorkers) Fail(_ context.Context, req *rpcpb.FailRequest) (*rpcpb.Job, error) {
	if !req.Retry || req.Error != "boom" {
		return nil, Errorf(CodeInvalid, "fail: %+v", req)
	}
	return nil, Errorf(CodeLeaseLost, "lost")
}
func (r recordWorkers) Cancel(_ context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	r.action <- req
	return &rpcpb.JobActionResponse{Job: fullJob(), Replayed: true}, nil
}
func (recordWorkers) Retry(context.Context, *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return nil, Errorf(CodeConflict, "queued")
}

// Every member of the worker calls and the job actions crosses the wire,
// both ways, and their errors keep their codes and leader hints.
func TestWorkerCallsSurviveTheWire(t *testing.T) {
	leader := serve(t, recordManager{&fakeManager{leader: true}, recordWorkers{}})
	w := recordWorkers{lease: make(chan *rpcpb.LeaseRequest, 1), action: make(chan *rpcpb.JobActionRequest, 1), leader: leader}
	c := serviceClient(t, recordManager{&fakeManager{leader: true}, w})
	ctx := context.Background()
	req := &rpcpb.LeaseRequest{Tenant: "t", Worker: "w", Types: []string{"a", "b"}, MaxJobs: 7, LeaseForNanos: int64(30 * time.Second),
		WaitNanos: int64(time.Millisecond), Request: "r", Fingerprint: "f"}
	resp, err := c.Lease(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-w.lease; !proto.Equal(got, req) {
		t.Errorf("lease request crossed as %+v, want %+v", got, req)
	}
	want := &rpcpb.LeaseResponse{Replayed: true, Leases: []*rpcpb.Lease{{LeaseId: "l1", Job: fullJob(), Attempt: 3, ExpiresAt: "x"}}}
	if !proto.Equal(resp, want) {
		t.Errorf("lease answer crossed as %+v, want %+v", resp, want)
	}
	hb, err := c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l", LeaseForNanos: int64(time.Second)})
	if err != nil || hb.LeaseId != "l" || hb.ExpiresAt != "j/t/1s" {
		t.Errorf("heartbeat: %+v %v", hb, err)
	}
	if _, err := c.Fail(ctx, &rpcpb.FailRequest{Tenant: "t", JobId: "j", LeaseId: "l", Error: "boom", Retry: true}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("fail: want %v, got %v", ErrLeaseLost, err)
	}
	areq := &rpcpb.JobActionRequest{Tenant: "t", JobId: "j1", Key: "k", Fingerprint: "f"}
	ar, err := c.Cancel(ctx, areq)
	if err != nil || !ar.Replayed || !proto.Equal(ar.Job, fullJob()) {
		t.Errorf("cancel: %+v %v", ar, err)
	}
	if got := <-w.action; !proto.Equal(got, areq) {
		t.Errorf("action request crossed as %+v, want %+v", got, areq)
	}
	if _, err := c.Retry(ctx, areq); !errors.Is(err, ErrConflict) {
		t.Errorf("retry: want %v, got %v", ErrConflict, err)
	}
	// not_leader's hint crosses: the client follows it to the leader.
	job, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l", Result: json.RawMessage(`7`)})
	if err != nil || job.JobId != "j" || string(job.Result) != "7" || c.Leader() != leader {
		t.Errorf("complete: %+v %v (client's leader %q, want %q)", job, err, c.Leader(), leader)
	}
}

// A worker call over MaxWorkerRequestBytes is refused as invalid.
func TestWorkerCallOverTheBoundIsInvalid(t *testing.T) {
	c := workersClient(t, stubWorkers{})
	result := json.RawMessage(`"` + strings.Repeat("r", MaxWorkerRequestBytes) + `"`)
	if _, err := c.Complete(context.Background(), &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l", Result: result}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("want %v, got %v", ErrInvalid, err)
	}
}

// Heartbeats, completions and failures ride the submit stream (counted by
// its batch statistics), concurrent ones batched with each other.
func TestWorkerCallsRideTheSubmitStream(t *testing.T) {
	c := workersClient(t, stubWorkers{})
	before := batchStats.sentItems.Load()
	const n = 64
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var err error
			switch i % 3 {
			case 0:
				_, err = c.Heartbeat(context.Background(), &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
			case 1:
				_, err = c.Complete(context.Background(), &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
			default:
				_, err = c.Fail(context.Background(), &rpcpb.FailRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := batchStats.sentItems.Load() - before; got < n {
		t.Fatalf("%d items sent on submit streams for %d worker calls", got, n)
	}
}
