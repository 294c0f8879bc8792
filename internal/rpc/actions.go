package rpc

import (
	"context"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A tenant's actions on its jobs (docs/rpc.md): the Manager service's
// Cancel and Retry. The leader answers (another manager
// answers not_leader naming it); each action is one Raft command that
// records it under the caller's idempotency key, durable before the answer.

// JobActions is the manager side of the job action routes. Errors are
// *Error: CodeNotFound for an unknown job (or another tenant's),
// CodeConflict for a state the action does not apply to,
// CodeRequestReused for a key recorded with another request, CodeLedgerFull
// and CodeTenantQuota when the key cannot be recorded, CodeNotLeader,
// CodeUnavailable, CodeInvalid.
type JobActions interface {
	Cancel(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error)
	Retry(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error)
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
	do func(JobActions, context.Context, *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error)) (*rpcpb.JobActionResponse, error) {
	a, ok := sv.s.svc.(JobActions)
	err := checkRequest(p, "body", 0)
	if !ok {
		err = Errorf(CodeInternal, "this manager serves no job actions")
	}
	return reply(sv.s, what, err, func() (*rpcpb.JobActionResponse, error) { return do(a, ctx, p) })
}

// Cancel cancels a queued job at the leader.
func (c *Client) Cancel(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return unary(c, ctx, "cancel", 0, rpcpb.ManagerClient.Cancel, req)
}

// Retry gives a failed or dead job a new attempt at the leader.
func (c *Client) Retry(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return unary(c, ctx, "retry", 0, rpcpb.ManagerClient.Retry, req)
}
