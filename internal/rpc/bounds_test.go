package rpc

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// ctxManager answers a submission committed while its context lasts.
type ctxManager struct{ recordManager }

func (ctxManager) Submit(ctx context.Context, _ *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted}, nil
}

// The submit stream's items out of the bounds of docs/rpc.md are answered
// invalid on their own, before the manager runs them (and so are the unary
// requests over them), and the largest
// timeout is a deadline that long, not one already passed: a timeout_micros
// whose duration overflowed ended the item's context at once, and the gate
// retried an unavailable forever.
func TestStreamItemsOutOfBoundsAreInvalid(t *testing.T) {
	w := recordWorkers{lease: make(chan *rpcpb.LeaseRequest, 1), action: make(chan *rpcpb.JobActionRequest, 1)}
	addr := serve(t, ctxManager{recordManager{&fakeManager{leader: true}, w}})
	huge := strings.Repeat("x", MaxMemberBytes+1)
	sub := func() *rpcpb.SubmitRequest { return &rpcpb.SubmitRequest{Tenant: "t", Key: "k"} }
	items := []*rpcpb.SubmitItem{
		{Id: 1, TimeoutMicros: math.MaxInt64, Request: sub()},
		{Id: 2, TimeoutMicros: -1, Request: sub()},
		{Id: 3, Request: sub(), Heartbeat: &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l"}},
		{Id: 4, Complete: &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l"}, Fail: &rpcpb.FailRequest{Tenant: "t", JobId: "j", LeaseId: "l"}},
		{Id: 5, Heartbeat: &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: huge}},
		{Id: 6, Request: &rpcpb.SubmitRequest{Tenant: huge, Key: "k"}},
		{Id: 7, Request: &rpcpb.SubmitRequest{Tenant: "t", Key: "k", Job: &rpcpb.JobRequest{Payload: make([]byte, MaxBodyBytes+1)}}},
		{Id: 8, Complete: &rpcpb.CompleteRequest{Tenant: huge, JobId: "j", LeaseId: "l"}},
	}
	st := rawStream(t, addr)
	if err := st.Send(&rpcpb.SubmitBatch{Items: items}); err != nil {
		t.Fatal(err)
	}
	res := recvResults(t, st, 1, 2, 3, 4, 5, 6, 7, 8)
	if r := res[1]; r.GetResponse().GetOutcome() != OutcomeCommitted {
		t.Errorf("item with the largest timeout: outcome %q, error %q, want committed", r.GetResponse().GetOutcome(), r.GetError().GetCode())
	}
	for id := uint64(2); id <= 8; id++ {
		if e := res[id].GetError(); e.GetCode() != string(CodeInvalid) {
			t.Errorf("item %d: outcome %q, error %q, want invalid", id, res[id].GetResponse().GetOutcome(), e.GetCode())
		}
	}

	// The unary calls that reach the ledger are bounded too.
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, MaxAttempts: 1})
	t.Cleanup(c.Close)
	ctx := context.Background()
	if _, err := c.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "t", Worker: huge}); !errors.Is(err, ErrInvalid) {
		t.Errorf("lease with a huge worker: %v, want invalid", err)
	}
	if _, err := c.Cancel(ctx, &rpcpb.JobActionRequest{Tenant: "t", JobId: "j", Key: huge, Fingerprint: "f"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("cancel with a huge key: %v, want invalid", err)
	}
	// So are the reads, whose answer may name what they were asked for.
	if _, err := c.GetJob(ctx, "t", huge); !errors.Is(err, ErrInvalid) {
		t.Errorf("get job with a huge ID: %v, want invalid", err)
	}
	if _, err := c.GetKey(ctx, huge, "k"); !errors.Is(err, ErrInvalid) {
		t.Errorf("get key with a huge tenant: %v, want invalid", err)
	}
	if _, err := c.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Type: huge}); !errors.Is(err, ErrInvalid) {
		t.Errorf("list with a huge type: %v, want invalid", err)
	}
	if len(w.lease) > 0 || len(w.action) > 0 {
		t.Error("a refused call reached the manager")
	}
}

// An item whose id is that of an item still running on the stream is
// answered invalid and not run; the running one is answered as ever. Both
// used to run, and only one of the two was answered.
func TestAnItemOfARunningIDIsInvalid(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int32
	addr := serve(t, newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		runs.Add(1)
		if req.Key == "first" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: req.Key}, nil
	}))
	st := rawStream(t, addr)
	items := []*rpcpb.SubmitItem{{Id: 7, Request: &rpcpb.SubmitRequest{Key: "first"}}, {Id: 7, Request: &rpcpb.SubmitRequest{Key: "second"}}}
	if err := st.Send(&rpcpb.SubmitBatch{Items: items}); err != nil {
		t.Fatal(err)
	}
	var got []*rpcpb.SubmitResult
	for len(got) < 2 {
		msg, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msg.GetResults()...)
		if len(got) == 1 {
			// The first answer comes while the first item runs.
			if e := got[0].GetError(); e.GetCode() != string(CodeInvalid) {
				t.Fatalf("the second item of id 7: job %q, error %q; want invalid", got[0].GetResponse().GetJobId(), e.GetCode())
			}
			close(release)
		}
	}
	if r := got[1].GetResponse(); r.GetJobId() != "first" {
		t.Errorf("the first item of id 7: job %q, error %q; want its answer", r.GetJobId(), got[1].GetError().GetCode())
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the manager ran %d submissions, want 1", n)
	}
}
