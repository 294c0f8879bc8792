package rpc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The worker calls of the Manager service (docs/rpc.md): Lease, Heartbeat,
// Complete, Fail. The leader answers; another manager answers not_leader
// naming it. A job's lease, its heartbeats, completion and failure are Raft
// commands, durable before the answer.

// LeaseRequest asks the leader for up to MaxJobs queued jobs of Tenant.
// Wait, when positive, holds the call at the leader until a job is queued or
// the wait ends (a long poll: no polling between gate and leader).
//
// Request, when set, is the caller's idempotency key for the lease (the
// worker's Idempotency-Key) and Fingerprint the digest of what it asked:
// the leader keeps its answer (for 10 minutes, while it leads) and answers
// a repeat of the key, through any gate, with the same leases
// (LeaseResponse.Replayed); the key with another Fingerprint is
// CodeRequestReused.
type LeaseRequest struct {
	Tenant      string        `json:"tenant"`
	Worker      string        `json:"worker"`
	Types       []string      `json:"types,omitempty"`
	MaxJobs     int           `json:"max_jobs"`
	LeaseFor    time.Duration `json:"lease_for"`
	Wait        time.Duration `json:"wait"`
	Request     string        `json:"request,omitempty"`
	Fingerprint string        `json:"fingerprint,omitempty"`
}

// LeaseResponse is what the leader handed out, oldest queued first.
// Replayed: the answer is the one kept for the request's key.
type LeaseResponse struct {
	Leases   []api.Lease `json:"leases"`
	Replayed bool        `json:"replayed,omitempty"`
}

// HeartbeatRequest extends a lease to the leader's now + LeaseFor.
type HeartbeatRequest struct {
	Tenant   string        `json:"tenant"`
	JobID    string        `json:"job_id"`
	LeaseID  string        `json:"lease_id"`
	LeaseFor time.Duration `json:"lease_for"`
}

// CompleteRequest finishes a job as succeeded with Result.
type CompleteRequest struct {
	Tenant  string          `json:"tenant"`
	JobID   string          `json:"job_id"`
	LeaseID string          `json:"lease_id"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// FailRequest reports a failed attempt.
type FailRequest struct {
	Tenant  string `json:"tenant"`
	JobID   string `json:"job_id"`
	LeaseID string `json:"lease_id"`
	Error   string `json:"error"`
	Retry   bool   `json:"retry"`
}

// Workers is the manager side of the worker routes. Errors are *Error:
// CodeNotFound for an unknown job, CodeLeaseLost for a lease that is not the
// job's current one, CodeNotLeader, CodeUnavailable, CodeInvalid.
type Workers interface {
	Lease(ctx context.Context, req *LeaseRequest) (*LeaseResponse, error)
	Heartbeat(ctx context.Context, req *HeartbeatRequest) (*api.HeartbeatResponse, error)
	Complete(ctx context.Context, req *CompleteRequest) (*api.Job, error)
	Fail(ctx context.Context, req *FailRequest) (*api.Job, error)
}

// workers is the Server's Workers, or the error of a manager without them.
func (s *Server) workers() (Workers, error) {
	if w, ok := s.svc.(Workers); ok {
		return w, nil
	}
	return nil, s.callStatus("workers", Errorf(CodeInternal, "this manager serves no worker calls"))
}

// Lease serves Workers.Lease.
func (sv *service) Lease(ctx context.Context, p *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	w, err := sv.s.workers()
	if err != nil {
		return nil, err
	}
	return serveCall(sv.s, ctx, "lease", p, fromPBLeaseRequest, w.Lease, toPBLeaseResponse)
}

// Heartbeat serves Workers.Heartbeat.
func (sv *service) Heartbeat(ctx context.Context, p *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error) {
	w, err := sv.s.workers()
	if err != nil {
		return nil, err
	}
	return serveCall(sv.s, ctx, "heartbeat", p, func(p *rpcpb.HeartbeatRequest) *HeartbeatRequest {
		return &HeartbeatRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId(), LeaseFor: time.Duration(p.GetLeaseForNanos())}
	}, w.Heartbeat, func(r *api.HeartbeatResponse) *rpcpb.HeartbeatResponse {
		return &rpcpb.HeartbeatResponse{LeaseId: r.LeaseID, ExpiresAt: r.ExpiresAt}
	})
}

// Complete serves Workers.Complete.
func (sv *service) Complete(ctx context.Context, p *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	w, err := sv.s.workers()
	if err != nil {
		return nil, err
	}
	if err := checkSize(p, MaxWorkerRequestBytes); err != nil {
		return nil, sv.s.callStatus("complete", err)
	}
	return serveCall(sv.s, ctx, "complete", p, func(p *rpcpb.CompleteRequest) *CompleteRequest {
		r := &CompleteRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId()}
		if len(p.GetResult()) > 0 {
			r.Result = p.GetResult()
		}
		return r
	}, w.Complete, toPBJob)
}

// Fail serves Workers.Fail.
func (sv *service) Fail(ctx context.Context, p *rpcpb.FailRequest) (*rpcpb.Job, error) {
	w, err := sv.s.workers()
	if err != nil {
		return nil, err
	}
	if err := checkSize(p, MaxWorkerRequestBytes); err != nil {
		return nil, sv.s.callStatus("fail", err)
	}
	return serveCall(sv.s, ctx, "fail", p, func(p *rpcpb.FailRequest) *FailRequest {
		return &FailRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId(), Error: p.GetError(), Retry: p.GetRetry()}
	}, w.Fail, toPBJob)
}

func toPBLeaseRequest(r *LeaseRequest) *rpcpb.LeaseRequest {
	return &rpcpb.LeaseRequest{Tenant: r.Tenant, Worker: r.Worker, Types: r.Types, MaxJobs: int64(r.MaxJobs),
		LeaseForNanos: int64(r.LeaseFor), WaitNanos: int64(r.Wait), Request: r.Request, Fingerprint: r.Fingerprint}
}

func fromPBLeaseRequest(p *rpcpb.LeaseRequest) *LeaseRequest {
	return &LeaseRequest{Tenant: p.GetTenant(), Worker: p.GetWorker(), Types: p.GetTypes(), MaxJobs: int(p.GetMaxJobs()),
		LeaseFor: time.Duration(p.GetLeaseForNanos()), Wait: time.Duration(p.GetWaitNanos()), Request: p.GetRequest(), Fingerprint: p.GetFingerprint()}
}

func toPBLeaseResponse(r *LeaseResponse) *rpcpb.LeaseResponse {
	p := &rpcpb.LeaseResponse{Replayed: r.Replayed, Leases: make([]*rpcpb.Lease, len(r.Leases))}
	for i := range r.Leases {
		l := &r.Leases[i]
		p.Leases[i] = &rpcpb.Lease{LeaseId: l.LeaseID, Job: toPBJob(&l.Job), Attempt: int64(l.Attempt), ExpiresAt: l.ExpiresAt}
	}
	return p
}

func fromPBLeaseResponse(p *rpcpb.LeaseResponse) *LeaseResponse {
	r := &LeaseResponse{Replayed: p.GetReplayed(), Leases: make([]api.Lease, len(p.GetLeases()))}
	for i, l := range p.GetLeases() {
		r.Leases[i] = api.Lease{LeaseID: l.GetLeaseId(), Attempt: int(l.GetAttempt()), ExpiresAt: l.GetExpiresAt()}
		if j := l.GetJob(); j != nil {
			r.Leases[i].Job = *fromPBJob(j)
		}
	}
	return r
}

// Lease asks the leader for jobs; the call may be held up to req.Wait.
func (c *Client) Lease(ctx context.Context, req *LeaseRequest) (*LeaseResponse, error) {
	var resp *LeaseResponse
	err := c.call(ctx, "lease", req.Wait, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.Lease(ctx, toPBLeaseRequest(req))
		if err == nil {
			resp = fromPBLeaseResponse(p)
		}
		return err
	})
	return resp, err
}

// Heartbeat extends a lease at the leader.
func (c *Client) Heartbeat(ctx context.Context, req *HeartbeatRequest) (*api.HeartbeatResponse, error) {
	var resp *api.HeartbeatResponse
	err := c.call(ctx, "heartbeat", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, LeaseForNanos: int64(req.LeaseFor)})
		if err == nil {
			resp = &api.HeartbeatResponse{LeaseID: p.GetLeaseId(), ExpiresAt: p.GetExpiresAt()}
		}
		return err
	})
	return resp, err
}

// Complete finishes a job at the leader.
func (c *Client) Complete(ctx context.Context, req *CompleteRequest) (*api.Job, error) {
	var job *api.Job
	err := c.call(ctx, "complete", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.Complete(ctx, &rpcpb.CompleteRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, Result: req.Result})
		if err == nil {
			job = fromPBJob(p)
		}
		return err
	})
	return job, err
}

// Fail reports a failed attempt at the leader.
func (c *Client) Fail(ctx context.Context, req *FailRequest) (*api.Job, error) {
	var job *api.Job
	err := c.call(ctx, "fail", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.Fail(ctx, &rpcpb.FailRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, Error: req.Error, Retry: req.Retry})
		if err == nil {
			job = fromPBJob(p)
		}
		return err
	})
	return job, err
}
