package rpc

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The worker calls (docs/rpc.md): Lease, a unary method of the Manager
// service (a long poll); Heartbeat, Complete and Fail, items of the submit
// stream, batched with the submissions. The leader answers; another manager
// answers not_leader naming it. A job's lease, its heartbeats, completion and failure are Raft
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
	return nil, Errorf(CodeInternal, "this manager serves no worker calls")
}

// Lease serves Workers.Lease.
func (sv *service) Lease(ctx context.Context, p *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	w, err := sv.s.workers()
	if err != nil {
		return nil, sv.s.callStatus("lease", err)
	}
	return serveCall(sv.s, ctx, "lease", p, fromPBLeaseRequest, w.Lease, toPBLeaseResponse)
}

// serveWorkerCall runs the worker call an item of the submit stream
// carries (heartbeat, complete or fail) and answers it in r; ok is false
// for an item that carries none.
func (s *Server) serveWorkerCall(ctx context.Context, it *rpcpb.SubmitItem, r *rpcpb.SubmitResult) (ok bool) {
	var err error
	switch {
	case it.GetHeartbeat() != nil:
		p := it.GetHeartbeat()
		var w Workers
		if w, err = s.workers(); err == nil {
			var resp *api.HeartbeatResponse
			resp, err = w.Heartbeat(ctx, &HeartbeatRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId(), LeaseFor: time.Duration(p.GetLeaseForNanos())})
			if err == nil {
				r.Heartbeat = &rpcpb.HeartbeatResponse{LeaseId: resp.LeaseID, ExpiresAt: resp.ExpiresAt}
			}
		}
	case it.GetComplete() != nil:
		p := it.GetComplete()
		var w Workers
		if w, err = s.workers(); err == nil {
			if err = checkSize(p, MaxWorkerRequestBytes); err == nil {
				req := &CompleteRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId()}
				if len(p.GetResult()) > 0 {
					req.Result = p.GetResult()
				}
				var job *api.Job
				if job, err = w.Complete(ctx, req); err == nil {
					r.Job = toPBJob(job)
				}
			}
		}
	case it.GetFail() != nil:
		p := it.GetFail()
		var w Workers
		if w, err = s.workers(); err == nil {
			if err = checkSize(p, MaxWorkerRequestBytes); err == nil {
				var job *api.Job
				job, err = w.Fail(ctx, &FailRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), LeaseID: p.GetLeaseId(), Error: p.GetError(), Retry: p.GetRetry()})
				if err == nil {
					r.Job = toPBJob(job)
				}
			}
		}
	default:
		return false
	}
	if err != nil {
		r.Error = toPBError(err, func(err error) { s.log.Error("rpc worker call failed", logging.KeyError, err) })
	}
	return true
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

// Heartbeat extends a lease at the leader, on a submit stream.
func (c *Client) Heartbeat(ctx context.Context, req *HeartbeatRequest) (*api.HeartbeatResponse, error) {
	p := &rpcpb.HeartbeatRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, LeaseForNanos: int64(req.LeaseFor)}
	r, err := c.workerCall(ctx, "heartbeat", &rpcpb.SubmitItem{Heartbeat: p}, 64+len(req.Tenant)+len(req.JobID)+len(req.LeaseID))
	if err != nil {
		return nil, err
	}
	return &api.HeartbeatResponse{LeaseID: r.GetHeartbeat().GetLeaseId(), ExpiresAt: r.GetHeartbeat().GetExpiresAt()}, nil
}

// Complete finishes a job at the leader, on a submit stream.
func (c *Client) Complete(ctx context.Context, req *CompleteRequest) (*api.Job, error) {
	p := &rpcpb.CompleteRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, Result: req.Result}
	r, err := c.workerCall(ctx, "complete", &rpcpb.SubmitItem{Complete: p}, 64+len(req.Tenant)+len(req.JobID)+len(req.LeaseID)+len(req.Result))
	if err != nil {
		return nil, err
	}
	return jobOf(r), nil
}

// Fail reports a failed attempt at the leader, on a submit stream.
func (c *Client) Fail(ctx context.Context, req *FailRequest) (*api.Job, error) {
	p := &rpcpb.FailRequest{Tenant: req.Tenant, JobId: req.JobID, LeaseId: req.LeaseID, Error: req.Error, Retry: req.Retry}
	r, err := c.workerCall(ctx, "fail", &rpcpb.SubmitItem{Fail: p}, 64+len(req.Tenant)+len(req.JobID)+len(req.LeaseID)+len(req.Error))
	if err != nil {
		return nil, err
	}
	return jobOf(r), nil
}

// jobOf is the job a complete or fail answered (empty if it named none).
func jobOf(r *rpcpb.SubmitResult) *api.Job {
	if j := r.GetJob(); j != nil {
		return fromPBJob(j)
	}
	return &api.Job{}
}

// workerCall sends a worker call on a submit stream to the leader, with the
// retries of every call; it travels batched with the submissions and the
// other worker calls of the lane.
func (c *Client) workerCall(ctx context.Context, what string, item *rpcpb.SubmitItem, size int) (*rpcpb.SubmitResult, error) {
	if size > maxMessageBytes-1024 {
		return nil, Errorf(CodeInvalid, "a %s of about %d bytes is over the stream's message limit of %d", what, size, maxMessageBytes)
	}
	var res *rpcpb.SubmitResult
	err := c.retry(ctx, what, func(addr string) error {
		r, err := c.streamAttempt(ctx, addr, what, item, size, 0)
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unauthenticated {
			// The listener refused the stream: a definite answer, as a
			// unary call's refusal is (callError).
			err = &Error{Code: CodeUnauthenticated, Message: st.Message()}
		}
		res = r
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
