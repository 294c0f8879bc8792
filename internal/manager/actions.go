package manager

import (
	"context"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A tenant's actions on its jobs (rpc.JobActions; docs/ledger.md, "Cancel
// and retry"): each is one Raft command, proposed by the leader, that
// changes the job and records the action under the caller's idempotency key
// in the same entry. A repeat of the key (after a timeout, a crash, through
// another gate or leader) finds the key recorded and is answered as a
// replay: the action is never applied twice.

var _ rpc.JobActions = (*Manager)(nil)

// Cancel implements rpc.JobActions: a queued job ends cancelled.
func (m *Manager) Cancel(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return m.jobAction(ctx, "cancel", req, func(a ledger.JobAction) ledger.Command { return ledger.Cancel{JobAction: a} }, nil)
}

// Retry implements rpc.JobActions: a failed or dead job is queued again for
// a new attempt.
func (m *Manager) Retry(ctx context.Context, req *rpcpb.JobActionRequest) (*rpcpb.JobActionResponse, error) {
	return m.jobAction(ctx, "retry", req, func(a ledger.JobAction) ledger.Command { return ledger.Retry{JobAction: a} },
		func(res ledger.Result) {
			if res.Outcome == ledger.OutcomeRetried {
				// Leases waiting at this leader take it now: woken once
				// the retry is applied, whether or not its caller still
				// waits (a caller that left, retrying with its key, is
				// answered with a replay).
				m.jobsQueued.fire()
			}
		})
}

// jobAction proposes the action cmd makes of req and renders its result;
// then, when not nil, is given the command's result once applied, even if
// ctx has ended (Manager.applyThen).
func (m *Manager) jobAction(ctx context.Context, name string, req *rpcpb.JobActionRequest,
	cmd func(ledger.JobAction) ledger.Command, then func(ledger.Result)) (*rpcpb.JobActionResponse, error) {
	if err := m.CheckLeader(); err != nil {
		return nil, err
	}
	if req.Tenant == "" || req.JobId == "" || req.Key == "" || req.Fingerprint == "" {
		return nil, rpc.Errorf(rpc.CodeInvalid, "%s: tenant, job ID, key and fingerprint are required", name)
	}
	// The key is an entry of the ledger's, as a submission's is.
	if _, err := parseKey(req.Key); err != nil {
		return nil, err
	}
	now := m.ledgerNow()
	res, err := m.applyThen(ctx, cmd(ledger.JobAction{
		Tenant:         req.Tenant,
		JobID:          req.JobId,
		Key:            req.Key,
		Fingerprint:    req.Fingerprint,
		Now:            now.UnixNano(),
		ExpiresAt:      now.Add(m.cfg.Idempotency.CommittedTTL).UnixNano(),
		MaxEntries:     uint64(m.cfg.LedgerMaxEntries),
		MaxBytes:       uint64(m.cfg.LedgerMaxBytes),
		MaxTenantBytes: uint64(m.cfg.LedgerTenantMaxBytes),
	}), then)
	if err != nil {
		return nil, err
	}
	switch res.Outcome {
	case ledger.OutcomeCancelled, ledger.OutcomeRetried:
		return &rpcpb.JobActionResponse{Job: m.pbJobRead(res.Job)}, nil
	case ledger.OutcomeExists, ledger.OutcomeUnchanged:
		return &rpcpb.JobActionResponse{Job: m.pbJobRead(res.Job), Replayed: true}, nil
	case ledger.OutcomeNotFound:
		return nil, rpc.Errorf(rpc.CodeNotFound, "job %q not found", req.JobId)
	case ledger.OutcomeKeyReused:
		return nil, requestReused(name)
	case ledger.OutcomeConflict:
		return nil, rpc.Errorf(rpc.CodeConflict, "%s: job %s is %s", name, req.JobId, res.Job.State())
	}
	return nil, m.refusal(name, req.Tenant, res)
}

// requestReused answers a request whose idempotency key was recorded with
// another request's fingerprint.
func requestReused(what string) error {
	return rpc.Errorf(rpc.CodeRequestReused, "%s: the idempotency key was used with another request", what)
}
