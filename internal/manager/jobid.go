package manager

import (
	"time"

	"github.com/once-dev/once/internal/jobid"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/keys"
)

// expiryBasisMaxSkew bounds how far a gate's expiry basis
// (the submission's expiry_basis_unix_nanos) may be from the leader's clock to be used:
// further off, the leader's own time is the basis (docs/multidc.md).
const expiryBasisMaxSkew = 2 * time.Second

// submissionJobID is the job ID a new entry of req reserves: the ID derived
// from (tenant, key, fingerprint), the same in every datacenter
// (internal/jobid). A proposed ID must be that one: the ID is always a
// function of the fingerprint, which is what binds a Commit to the request
// it was decided for (docs/multidc.md).
func submissionJobID(req *rpcpb.SubmitRequest) (string, error) {
	id := jobid.Derive(req.Tenant, req.Key, req.Fingerprint)
	if req.ProposedJobId != "" && req.ProposedJobId != id {
		return "", rpc.Errorf(rpc.CodeInvalid, "proposed job id %q is not the one derived from the tenant, key and fingerprint", req.ProposedJobId)
	}
	return id, nil
}

// expiryBasis is the instant the TTLs of req's entry count from: the gate's
// stamp when it is within expiryBasisMaxSkew of the ledger's time, so that
// every datacenter of a multi-datacenter submission computes the same
// expires_at; else the ledger's time (the leader's clock as clock.go rules it).
func (m *Manager) expiryBasis(req *rpcpb.SubmitRequest) time.Time {
	now := m.expiryNow()
	if b := gateExpiryBasis(req); !b.IsZero() && b.Sub(now).Abs() <= expiryBasisMaxSkew {
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
func (m *Manager) retainedJob(req *rpcpb.SubmitRequest, k keys.Key, id string) (*rpcpb.SubmitResponse, bool) {
	if k.Structured {
		return nil, false
	}
	return m.keptJob(req, id)
}

// keptJob answers with req's tenant's job id, replayed, when the job table
// still holds it, or else with the job of req's other form (the ID its
// AltFingerprint derives: sameRequest), which can only be this
// datacenter's own job of that form.
func (m *Manager) keptJob(req *rpcpb.SubmitRequest, id string) (*rpcpb.SubmitResponse, bool) {
	if resp, ok := m.keptJobID(req.Tenant, id); ok || req.AltFingerprint == "" {
		return resp, ok
	}
	return m.keptJobID(req.Tenant, jobid.Derive(req.Tenant, req.Key, req.AltFingerprint))
}

// keptJobID answers with the tenant's job id, replayed, when the job table
// still holds it within its retention. A job past it (Gone by expiryNow, the
// clock GetJob and ListJobs judge it by) is absent, though no sweep has
// removed it yet: the read answers not found, and the Admit that follows
// commits the job anew, so a submission, a read and a list agree at the
// retention's end.
func (m *Manager) keptJobID(tenant, id string) (*rpcpb.SubmitResponse, bool) {
	j, ok := m.fsm.Job(tenant, id)
	if !ok || j.Gone(m.expiryNow().UnixNano()) {
		return nil, false
	}
	return &rpcpb.SubmitResponse{Outcome: rpc.OutcomeCommitted, Replayed: true, JobId: j.ID, Job: m.pbJob(j)}, true
}
