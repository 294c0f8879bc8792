package rpc

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/once-dev/once/pkg/api"
)

// A tenant's actions on its jobs (docs/rpc.md): POST
// /rpc/v1/jobs/{id}/cancel and /retry. The leader answers (another manager
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

// MountJobActions serves a's routes on mux.
func MountJobActions(mux *http.ServeMux, a JobActions, log *slog.Logger) {
	h := &handler{log: log}
	setID := func(r *JobActionRequest, id string) { r.JobID = id }
	mountJobAction(mux, h, "cancel", setID, a.Cancel)
	mountJobAction(mux, h, "retry", setID, a.Retry)
}

// Cancel cancels a queued job at the leader.
func (c *Client) Cancel(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error) {
	var resp JobActionResponse
	return &resp, c.post(ctx, "/rpc/v1/jobs/"+url.PathEscape(req.JobID)+"/cancel", req, 0, &resp)
}

// Retry gives a failed or dead job a new attempt at the leader.
func (c *Client) Retry(ctx context.Context, req *JobActionRequest) (*JobActionResponse, error) {
	var resp JobActionResponse
	return &resp, c.post(ctx, "/rpc/v1/jobs/"+url.PathEscape(req.JobID)+"/retry", req, 0, &resp)
}
