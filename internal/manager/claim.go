package manager

import (
	"cmp"
	"context"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/keys"
)

// Claims: a job whose client omitted the datacenters list, in a federation
// (docs/multidc.md, "An omitted list in a federation"). The gate sends the
// submission with Home set: to Home's leader as Home's own job, and to every
// other datacenter's leader as a claim, first. These are the two ends.

// claim records, for a submission whose job runs in another datacenter
// (req.Home), that this datacenter's ledger holds the key for it: a CLAIMED
// entry with the same job ID, fingerprint and expiry as the home's, no job.
// A live entry of the key answers instead: another fingerprint is
// key_reused; this datacenter's own job (a retry found the job's true home)
// its outcome; a claim of Home, or of a home that sorts before it,
// OutcomeClaimed naming its home. A claim for a home that sorts after Home
// gives way to this one (ledger.Entry.GivesWayTo). With no live entry, a job
// this datacenter ran itself answers too (ranHere).
func (m *Manager) claim(ctx context.Context, req *rpcpb.SubmitRequest, k keys.Key, jobID string) (*rpcpb.SubmitResponse, error) {
	deadline := time.Now().Add(submitWait(req))
	for attempt := 0; attempt < 4; attempt++ {
		if e, ok := m.liveEntry(req.Tenant, req.Key); ok && !e.GivesWayTo(req.Fingerprint, req.Home) {
			if !sameRequest(e, req) {
				return m.entryResponse(e, rpc.OutcomeKeyReused, true), nil
			}
			return m.entryResponse(e, "", true), nil
		}
		owner, ended, err := m.proposeOrWait(ctx, req.Tenant, req.Key, deadline)
		if ended {
			continue
		}
		if !owner {
			return inProgress(err)
		}
		if resp, ok := m.ranHere(req, k, jobID); ok {
			m.endProposal(req.Tenant, req.Key)
			return resp, nil
		}
		ttl := cmp.Or(resultTTL(req), m.cfg.Idempotency.CommittedTTL)
		now := m.ledgerNow()
		res, err := m.apply(ctx, ledger.Claim{
			Tenant:         req.Tenant,
			Key:            req.Key,
			Fingerprint:    req.Fingerprint,
			JobID:          jobID,
			Home:           req.Home,
			Type:           req.Job.Type,
			Now:            now.UnixNano(),
			ExpiresAt:      basisExpiry(m.expiryBasis(req), now, ttl),
			MaxEntries:     uint64(m.cfg.LedgerMaxEntries),
			MaxBytes:       uint64(m.cfg.LedgerMaxBytes),
			MaxTenantBytes: uint64(m.cfg.LedgerTenantMaxBytes),
		})
		m.endProposal(req.Tenant, req.Key)
		if err != nil {
			return nil, err
		}
		switch res.Outcome {
		case ledger.OutcomeClaimed:
			return m.entryResponse(res.Entry, "", false), nil
		case ledger.OutcomeExists, ledger.OutcomeKeyReused:
			continue // the fast path answers it
		default:
			return nil, m.refusal("claim", req.Tenant, res)
		}
	}
	return nil, rpc.Errorf(rpc.CodeUnavailable, "the key's entry kept changing while claiming it; retry")
}

// ranHere answers a claim whose key has no live entry here when this
// datacenter was the job's home: its entry expired, but it still retains the
// job (the same derived ID), or, for a structured key, its watermark refuses
// the sequence. Claiming the key for another home would let that home run
// the job a second time; a single datacenter answers such a late retry with
// the retained job or idempotency_key_expired, and the home that ran the
// job answers it the same way here: the gate's round meets the job (or the
// refusal) and answers with it
// (TestOmittedListRetryAfterExpiryThroughAnotherDatacenter). A structured
// key whose watermark aged out while the job is retained is answered with
// the job, not the job_id_in_use rejection an Admit would record: a claim
// records nothing.
func (m *Manager) ranHere(req *rpcpb.SubmitRequest, k keys.Key, jobID string) (*rpcpb.SubmitResponse, bool) {
	if k.Structured {
		if w, ok := m.fsm.Watermark(req.Tenant, k.ClientID, k.Nonce); ok && w.Refuses(k.Sequence) {
			return &rpcpb.SubmitResponse{Outcome: rpc.OutcomeKeyExpired}, true
		}
	}
	return m.keptJob(req, jobID)
}

// overClaim judges, at the home, another home's claim on the key (e, with the
// request's fingerprint) that a submission of this datacenter's own job
// found. Both first attempts got their claims into every other datacenter
// (only possible with two datacenters racing), so exactly one must win, the
// same one at both ends: the datacenter whose name sorts first. This one
// wins when it sorts before the claim's home: the claim is released (nil,
// nil: reserve the key now); the other home can no longer run the job, as
// its own ledger holds this datacenter's claim. Otherwise the answer is
// OutcomeClaimed naming the claim's home.
func (m *Manager) overClaim(ctx context.Context, req *rpcpb.SubmitRequest, e ledger.Entry) (*rpcpb.SubmitResponse, error) {
	home := e.Home()
	if req.Home == "" || m.cfg.Datacenter >= home {
		return m.entryResponse(e, "", true), nil
	}
	res, err := m.apply(ctx, ledger.Release{Tenant: e.Tenant, Key: e.Key, Fingerprint: e.Fingerprint, Home: home,
		Now: m.ledgerNow().UnixNano()})
	if err != nil {
		return nil, err
	}
	switch res.Outcome {
	case ledger.OutcomeReleased, ledger.OutcomeNotFound, ledger.OutcomeUnchanged:
		return nil, nil // the caller looks again
	default:
		return nil, rpc.Errorf(rpc.CodeInternal, "release: unexpected outcome %s: %v", res.Outcome, res.Err)
	}
}
