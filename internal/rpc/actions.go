package rpc

import (
	"context"

	"google.golang.org/grpc"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// A tenant's actions on its jobs (docs/rpc.md): the Manager service's
// Cancel and Retry. The leader answers (another manager
// answers not_leader naming it); each action is one Raft command that
// records it under the caller's idempotency key, durable before the answer.

// JobActionRequest asks the leader to cancel or retry the job JobID of
// Tenant. Key is the caller's Idempotency-Key and Fingerprint the digest of
// the action (route and body): the ledger records the action under the key,
// so a repeat of the key through any gate is answered as a replay, and the
// key with another Fingerprint is CodeRequestReused.
type JobActionRequest struct {
	Tenant      string `json:"tenant"`
	JobID       string `json:"job_id"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
}

// JobActionResponse is the job after the action. Replayed: the key had
// recorded this action already (or, for a cancel, the job was cancelled
// already); nothing changed.
type JobActionResponse struct {
	Job      api.Job `json:"job"`
	Replayed bool    `json:"replayed,omitempty"`
}

// JobActions is the manager side of the job action routes. Errors are
// *Error: CodeNotFound for an unknown job (or another tenant's),
// CodeConflict for a state the action does not apply to,
// CodeRequestReused for a key recorded with another request, CodeLedgerFull
// and CodeTenantQuota when the key cannot be recorded, CodeNotLeader,
// CodeUnavailable, CodeInvalid.
type JobActions interface {
	Cancel(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error)
	Retry(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error)
}

// Cancel serves JobActions.Cancel.
func (sv *service) Cancel(ctx context.Context, p *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return sv.jobAction(ctx, "cancel", p, JobActions.Cancel)
}

// Retry serves JobActions.Retry.
func (sv *service) Retry(ctx context.Context, p *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return sv.jobAction(ctx, "retry", p, JobActions.Retry)
}

func (sv *service) jobAction(ctx context.Context, what string, p *rpcpb.JobActionRequest,
	do func(JobActions, context.Context, *JobActionRequest) (*JobActionResponse, error)) (*rpcpb.JobActionResponse, error) {
	a, ok := sv.s.svc.(JobActions)
	if !ok {
		return nil, sv.s.callStatus(what, Errorf(CodeInternal, "this manager serves no job actions"))
	}
	return serveCall(sv.s, ctx, what, p, func(p *rpcpb.JobActionRequest) *JobActionRequest {
		return &JobActionRequest{Tenant: p.GetTenant(), JobID: p.GetJobId(), Key: p.GetKey(), Fingerprint: p.GetFingerprint()}
	}, func(ctx context.Context, r *JobActionRequest) (*JobActionResponse, error) { return do(a, ctx, r) },
		func(r *JobActionResponse) *rpcpb.JobActionResponse {
			return &rpcpb.JobActionResponse{Job: toPBJob(&r.Job), Replayed: r.Replayed}
		})
}

// Cancel cancels a queued job at the leader.
func (c *Client) Cancel(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error) {
	return c.jobAction(ctx, "cancel", req, rpcpb.ManagerClient.Cancel)
}

// Retry gives a failed or dead job a new attempt at the leader.
func (c *Client) Retry(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error) {
	return c.jobAction(ctx, "retry", req, rpcpb.ManagerClient.Retry)
}

func (c *Client) jobAction(ctx context.Context, what string, req *JobActionRequest,
	do func(rpcpb.ManagerClient, context.Context, *rpcpb.JobActionRequest, ...grpc.CallOption) (*rpcpb.JobActionResponse, error)) (*JobActionResponse, error) {
	var resp *JobActionResponse
	err := c.call(ctx, what, 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := do(mc, ctx, &rpcpb.JobActionRequest{Tenant: req.Tenant, JobId: req.JobID, Key: req.Key, Fingerprint: req.Fingerprint})
		if err == nil {
			resp = &JobActionResponse{Replayed: p.GetReplayed()}
			if j := p.GetJob(); j != nil {
				resp.Job = *fromPBJob(j)
			}
		}
		return err
	})
	return resp, err
}
