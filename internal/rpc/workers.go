package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// The worker routes of a manager's RPC listener (docs/rpc.md). The leader
// answers; another manager answers not_leader naming it. A job's lease, its
// heartbeats, completion and failure are Raft commands, durable before the
// answer.
const (
	LeasePath     = "/rpc/v1/leases"
	jobActionPath = "/rpc/v1/jobs/{id}/"
)

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

// MountWorkers serves w's routes on mux.
func MountWorkers(mux *http.ServeMux, w Workers, log *slog.Logger) {
	h := &handler{log: log}
	mux.HandleFunc("POST "+LeasePath, func(rw http.ResponseWriter, r *http.Request) {
		var req LeaseRequest
		if decodeBody(h, rw, r, &req) {
			resp, err := w.Lease(r.Context(), &req)
			h.reply(rw, resp, err)
		}
	})
	mountJobAction(mux, h, "heartbeat", func(r *HeartbeatRequest, id string) { r.JobID = id }, w.Heartbeat)
	mountJobAction(mux, h, "complete", func(r *CompleteRequest, id string) { r.JobID = id }, w.Complete)
	mountJobAction(mux, h, "fail", func(r *FailRequest, id string) { r.JobID = id }, w.Fail)
}

// mountJobAction serves POST /rpc/v1/jobs/{id}/<action>: the body decoded
// into a Req, its job ID set from the path, then do.
func mountJobAction[Req, Resp any](mux *http.ServeMux, h *handler, action string, setID func(*Req, string),
	do func(context.Context, *Req) (*Resp, error)) {
	mux.HandleFunc("POST "+jobActionPath+action, func(rw http.ResponseWriter, r *http.Request) {
		var req Req
		if decodeBody(h, rw, r, &req) {
			setID(&req, r.PathValue("id"))
			resp, err := do(r.Context(), &req)
			h.reply(rw, resp, err)
		}
	})
}

// decodeBody reads r's JSON body into v, answering CodeInvalid when it
// cannot; it says whether to go on.
func decodeBody(h *handler, rw http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxWorkerRequestBytes+1))
	if err == nil && len(b) > MaxWorkerRequestBytes {
		err = Errorf(CodeInvalid, "body over %d bytes", MaxWorkerRequestBytes)
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		h.reply(rw, nil, Errorf(CodeInvalid, "body: %v", err))
		return false
	}
	return true
}

// Lease asks the leader for jobs; the call may be held up to req.Wait.
func (c *Client) Lease(ctx context.Context, req *LeaseRequest) (*LeaseResponse, error) {
	var resp LeaseResponse
	return &resp, c.post(ctx, LeasePath, req, req.Wait, &resp)
}

// Heartbeat extends a lease at the leader.
func (c *Client) Heartbeat(ctx context.Context, req *HeartbeatRequest) (*api.HeartbeatResponse, error) {
	var resp api.HeartbeatResponse
	return &resp, c.post(ctx, "/rpc/v1/jobs/"+url.PathEscape(req.JobID)+"/heartbeat", req, 0, &resp)
}

// Complete finishes a job at the leader.
func (c *Client) Complete(ctx context.Context, req *CompleteRequest) (*api.Job, error) {
	var job api.Job
	return &job, c.post(ctx, "/rpc/v1/jobs/"+url.PathEscape(req.JobID)+"/complete", req, 0, &job)
}

// Fail reports a failed attempt at the leader.
func (c *Client) Fail(ctx context.Context, req *FailRequest) (*api.Job, error) {
	var job api.Job
	return &job, c.post(ctx, "/rpc/v1/jobs/"+url.PathEscape(req.JobID)+"/fail", req, 0, &job)
}

// post sends v as the JSON body of a POST to path, decoding the answer into
// out; extra lengthens each attempt's timeout (a long poll's wait).
func (c *Client) post(ctx context.Context, path string, v any, extra time.Duration, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return Errorf(CodeInvalid, "encode %s: %v", path, err)
	}
	return c.do(ctx, http.MethodPost, path, nil, b, extra, out)
}
