package manager

import (
	"context"
	"net/http"
	"time"

	"github.com/once-dev/once/internal/jobid"
	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/keys"
)

// expiryBasisMaxSkew bounds how far a gate's expiry basis
// (rpc.SubmitRequest.ExpiryBasis) may be from the leader's clock to be used:
// further off, the leader's own time is the basis (docs/multidc.md).
const expiryBasisMaxSkew = 2 * time.Second

// submissionJobID is the job ID a new entry of req reserves: the ID derived
// from (tenant, key, fingerprint), the same in every datacenter
// (internal/jobid). A proposed ID must be that one: the ID is always a
// function of the fingerprint, which is what binds a Commit to the request
// it was decided for (docs/multidc.md).
func submissionJobID(req *rpc.SubmitRequest) (string, error) {
	id := jobid.Derive(req.Tenant, req.Key, req.Fingerprint)
	if req.ProposedJobID != "" && req.ProposedJobID != id {
		return "", rpc.Errorf(rpc.CodeInvalid, "proposed job id %q is not the one derived from the tenant, key and fingerprint", req.ProposedJobID)
	}
	return id, nil
}

// expiryBasis is the instant the TTLs of req's entry count from: the gate's
// stamp when it is within expiryBasisMaxSkew of the ledger's time, so that
// every datacenter of a multi-datacenter submission computes the same
// expires_at; else the ledger's time (the leader's clock as clock.go rules it).
func (m *Manager) expiryBasis(req *rpc.SubmitRequest) time.Time {
	now := m.expiryNow()
	if b := req.ExpiryBasis; !b.IsZero() && b.Sub(now).Abs() <= expiryBasisMaxSkew {
		return b
	}
	return now
}

// basisExpiry is basis+ttl in Unix nanoseconds, never at or before now (the
// ledger refuses an expiry that is not after the command's time).
func basisExpiry(basis, now time.Time, ttl time.Duration) int64 {
	exp := basis.Add(ttl)
	if !exp.After(now) {
		exp = now.Add(time.Millisecond)
	}
	return exp.UnixNano()
}

// retainedJob answers a new opaque key whose derived job ID names a job the
// ledger still retains: the same (tenant, key, fingerprint) was committed, its
// entry expired, the job did not. That job is the answer (replayed); no second
// job is created. Structured keys go through Reserve, whose watermark check
// answers idempotency_key_expired as before.
func (m *Manager) retainedJob(req *rpc.SubmitRequest, k keys.Key, id string) (*rpc.SubmitResponse, bool) {
	if k.Structured {
		return nil, false
	}
	return m.retainedJobResponse(req.Tenant, id)
}

func (m *Manager) retainedJobResponse(tenant, id string) (*rpc.SubmitResponse, bool) {
	j, ok := m.fsm.Job(tenant, id)
	if !ok {
		return nil, false
	}
	job := m.apiJob(j)
	return &rpc.SubmitResponse{Outcome: rpc.OutcomeCommitted, Replayed: true, JobID: j.ID, Job: &job}, true
}

// ReasonJobIDInUse is the Reason of the rejection resolveJobIDInUse
// proposes, and an Admit records, (422, job_rejected at the gate).
const ReasonJobIDInUse = ledger.ReasonJobIDInUse

// resolveJobIDInUse resolves a PENDING entry whose Commit found its derived
// job ID taken (ledger.OutcomeJobIDInUse): the same (tenant, key,
// fingerprint) was committed before, its entry expired, the job is still
// retained, and no watermark refused the key (an opaque key, or a structured
// one whose watermark aged out). The job is not created twice. Left PENDING,
// the entry would be proposed again by every orphan sweep until it expired;
// so it is rejected (422, ReasonJobIDInUse, the detail naming the job), and
// that rejection is the answer to the submission and to every duplicate
// while the entry lives.
func (m *Manager) resolveJobIDInUse(ctx context.Context, e ledger.Entry, now time.Time, expiresAt int64) (*rpc.SubmitResponse, error) {
	rej := ledger.Reject{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID, Now: now.UnixNano(), ExpiresAt: expiresAt,
		Status: http.StatusUnprocessableEntity, Reason: ReasonJobIDInUse, Detail: ledger.JobIDInUseDetail(e.JobID)}
	res, err := m.tracedApply(ctx, "raft.apply.resolve", m.resolves, rej)
	if err != nil {
		return nil, err
	}
	switch res.Outcome {
	case ledger.OutcomeRejected, ledger.OutcomeUnchanged:
		return m.entryResponse(res.Entry, "", res.Outcome == ledger.OutcomeUnchanged), nil
	case ledger.OutcomeNotFound:
		return nil, rpc.Errorf(rpc.CodeUnavailable, "the pending entry expired before admission finished; retry")
	}
	return nil, rpc.Errorf(rpc.CodeInternal, "resolve: unexpected outcome %s: %v", res.Outcome, res.Err)
}
