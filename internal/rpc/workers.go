package rpc

import (
	"context"
	"time"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The worker calls (docs/rpc.md): Lease, a unary method of the Manager
// service (a long poll); Heartbeat, Complete and Fail, items of the submit
// stream, batched with the submissions. The leader answers; another manager
// answers not_leader naming it. A job's lease, its heartbeats, completion and failure are Raft
// commands, durable before the answer.

// Workers is the manager side of the worker routes. Errors are *Error:
// CodeNotFound for an unknown job, CodeLeaseLost for a lease that is not the
// job's current one, CodeNotLeader, CodeUnavailable, CodeInvalid.
type Workers interface {
	Lease(ctx context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error)
	Heartbeat(ctx context.Context, req *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error)
	Complete(ctx context.Context, req *rpcpb.CompleteRequest) (*rpcpb.Job, error)
	Fail(ctx context.Context, req *rpcpb.FailRequest) (*rpcpb.Job, error)
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
	resp, err := w.Lease(ctx, p)
	return resp, sv.s.callStatus("lease", err)
}

// serveWorkerCall runs the worker call an item of the submit stream
// carries (heartbeat, complete or fail) and answers it in r; ok is false
// for an item that carries none.
func (s *Server) serveWorkerCall(ctx context.Context, it *rpcpb.SubmitItem, r *rpcpb.SubmitResult) (ok bool) {
	hb, complete, fail := it.GetHeartbeat(), it.GetComplete(), it.GetFail()
	if hb == nil && complete == nil && fail == nil {
		return false
	}
	w, err := s.workers()
	switch {
	case err != nil:
	case hb != nil:
		r.Heartbeat, err = w.Heartbeat(ctx, hb)
	case complete != nil:
		if err = checkSize(complete, MaxWorkerRequestBytes); err == nil {
			r.Job, err = w.Complete(ctx, complete)
		}
	default:
		if err = checkSize(fail, MaxWorkerRequestBytes); err == nil {
			r.Job, err = w.Fail(ctx, fail)
		}
	}
	if err != nil {
		r.Error = toPBError(err, func(err error) { s.log.Error("rpc worker call failed", logging.KeyError, err) })
	}
	return true
}

// Lease asks the leader for jobs; the call may be held up to the request's
// wait.
func (c *Client) Lease(ctx context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	return unary(c, ctx, "lease", time.Duration(req.GetWaitNanos()), rpcpb.ManagerClient.Lease, req)
}

// Heartbeat extends a lease at the leader, on a submit stream.
func (c *Client) Heartbeat(ctx context.Context, req *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error) {
	r, err := c.workerCall(ctx, "heartbeat", &rpcpb.SubmitItem{Heartbeat: req}, workerCallSize(req, 0))
	if err != nil {
		return nil, err
	}
	if h := r.GetHeartbeat(); h != nil {
		return h, nil
	}
	return &rpcpb.HeartbeatResponse{}, nil
}

// Complete finishes a job at the leader, on a submit stream.
func (c *Client) Complete(ctx context.Context, req *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	return jobOf(c.workerCall(ctx, "complete", &rpcpb.SubmitItem{Complete: req}, workerCallSize(req, len(req.GetResult()))))
}

// Fail reports a failed attempt at the leader, on a submit stream.
func (c *Client) Fail(ctx context.Context, req *rpcpb.FailRequest) (*rpcpb.Job, error) {
	return jobOf(c.workerCall(ctx, "fail", &rpcpb.SubmitItem{Fail: req}, workerCallSize(req, len(req.GetError()))))
}

// jobOf is the job a complete or fail answered (empty if it named none), or
// its error.
func jobOf(r *rpcpb.SubmitResult, err error) (*rpcpb.Job, error) {
	if err != nil {
		return nil, err
	}
	if j := r.GetJob(); j != nil {
		return j, nil
	}
	return &rpcpb.Job{}, nil
}

// workerCall sends a worker call on a submit stream to the leader, with the
// retries of every call; it travels batched with the submissions and the
// other worker calls of the lane.
func (c *Client) workerCall(ctx context.Context, what string, item *rpcpb.SubmitItem, size int) (*rpcpb.SubmitResult, error) {
	if err := checkStreamSize(what, size); err != nil {
		return nil, err
	}
	var res *rpcpb.SubmitResult
	err := c.retry(ctx, what, true, func(addr string) error {
		// Each attempt sends an item of its own (streamAttempt's rule): the
		// lane writes the item's id and timeout as it sends it, and the lane
		// of an attempt that timed out may still be encoding its copy.
		it := &rpcpb.SubmitItem{Heartbeat: item.GetHeartbeat(), Complete: item.GetComplete(), Fail: item.GetFail()}
		r, err := c.streamAttempt(ctx, addr, what, it, size, 0)
		res = r
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
