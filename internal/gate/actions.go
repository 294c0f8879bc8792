package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A tenant's actions on its jobs (docs/api.md, "Cancel and retry"):
// POST /v1/jobs/{job_id}/cancel and /retry. Each requires an
// Idempotency-Key (checked as a submission's), takes an empty body (or a
// JSON object, whose members are ignored), and answers the job as GET does.
// The leader records the action under the key in the same ledger entry, so
// a repeat of the key through any gate is a replay, never a second action;
// the gate also keeps the answer as it does a worker call's.

// handleCancel is POST /v1/jobs/{job_id}/cancel.
func (g *Gate) handleCancel(w http.ResponseWriter, r *http.Request, tenant string) {
	g.serveJobAction(w, r, tenant, "cancel", g.client.Cancel)
}

// handleRetry is POST /v1/jobs/{job_id}/retry.
func (g *Gate) handleRetry(w http.ResponseWriter, r *http.Request, tenant string) {
	g.serveJobAction(w, r, tenant, "retry", g.client.Retry)
}

// serveJobAction checks the request (key, body, job id) and forwards
// the action to the leader. The fingerprint is the action and the job id
// (the body carries nothing): the same key with another action or job is
// 422 idempotency_key_reused.
func (g *Gate) serveJobAction(w http.ResponseWriter, r *http.Request, tenant, action string,
	call func(context.Context, *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error)) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	noteKey(w, key.Raw)
	var ignored struct{}
	if _, ok := g.decodeWorkerBody(w, r, &ignored); !ok {
		return
	}
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	g.serveKeyedCall(w, r, tenant, key.Raw, workerCall{route: action + " " + id,
		forward: func(ctx context.Context, key string, fp [sha256.Size]byte) *workerAnswer {
			start := time.Now()
			resp, err := call(ctx, &rpcpb.JobActionRequest{Tenant: tenant, JobId: id, Key: key, Fingerprint: hex.EncodeToString(fp[:])})
			g.metrics.workerCall(action, err, time.Since(start))
			if err != nil {
				return g.workerError(r, err, id)
			}
			a := workerOK(apiJob(resp.Job))
			a.replayed = resp.Replayed
			return a
		}})
}
