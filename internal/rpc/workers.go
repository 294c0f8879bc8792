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
	if err == nil {
		err = checkRequest(p, "body", 0)
	}
	return reply(sv.s, "lease", err, func() (*rpcpb.LeaseResponse, error) { return w.Lease(ctx, p) })
}

// serveWorkerCall runs the worker call an item of the submit stream
// carries (heartbeat, complete or fail) and answers it in r; ok is false
// for an item that carries none.
func (s *Server) serveWorkerCall(ctx context.Context, it *rpcpb.SubmitItem, r *rpcpb.SubmitResult) (ok bool) {
	hb, complete, fail := it.GetHeartbeat(), it.GetComplete(), it.GetFail()
	if hb == nil && complete == nil && fail == nil {
		return false
	}
	var w Workers
	var err error
	set := 0
	for _, b := range []bool{it.GetRequest() != nil, hb != nil, complete != nil, fail != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		err = Errorf(CodeInvalid, "item %d carries more than one of request, heartbeat, complete and fail", it.GetId())
	} else {
		w, err = s.workers()
	}
	switch {
	case err != nil:
	case hb != nil:
		if err = checkRequest(hb, "body", 0); err == nil {
			r.Heartbeat, err = w.Heartbeat(ctx, hb)
		}
	case complete != nil:
		if err = checkRequest(complete, "result", len(complete.GetResult())); err == nil {
			r.Job, err = w.Complete(ctx, complete)
		}
	default:
		if err = checkRequest(fail, "error", len(fail.GetError())); err == nil {
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
	return streamCall(c, ctx, "heartbeat", "heartbeat", &rpcpb.SubmitItem{Heartbeat: req}, workerCallSize(req, 0), 0, (*rpcpb.SubmitResult).GetHeartbeat)
}

// Complete finishes a job at the leader, on a submit stream.
func (c *Client) Complete(ctx context.Context, req *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	return streamCall(c, ctx, "complete", "complete", &rpcpb.SubmitItem{Complete: req}, workerCallSize(req, len(req.GetResult())), 0, (*rpcpb.SubmitResult).GetJob)
}

// Fail reports a failed attempt at the leader, on a submit stream.
func (c *Client) Fail(ctx context.Context, req *rpcpb.FailRequest) (*rpcpb.Job, error) {
	return streamCall(c, ctx, "fail", "fail", &rpcpb.SubmitItem{Fail: req}, workerCallSize(req, len(req.GetError())), 0, (*rpcpb.SubmitResult).GetJob)
}
