package manager

import (
	"context"
	"slices"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A submission another datacenter's outbox carries here (the SubmitRequest's
// Carried) comes from a datacenter that holds its job: its Carrier. Carrying
// the job back there would be harmless only while the carrier still
// remembers it; one that carried it after more than
// MANAGER_JOB_RETENTION_SECONDS (a datacenter that came back after a day)
// has forgotten both its entry and its job, and would admit the key again: a
// second run. So once the job is final here, this datacenter records the
// carrier as confirmed, and answers a carried submission of a job it still
// owes from that owed entry instead of admitting it again.
//
// Only the carrier is confirmed: the other datacenters the request names
// stay this datacenter's to carry as well. Two datacenters that both
// admitted a job and carried it to each other at the same time must not
// each leave a third to the other (docs/multidc.md).

// carriedOwed answers a carried submission from this datacenter's owed entry
// of the same job: this datacenter resolved the job before its entry expired
// and may have forgotten the job since, so admitting it again could run it
// twice (TestOutboxAnswersACarriedJobFromTheOwedEntry).
func (m *Manager) carriedOwed(req *rpcpb.SubmitRequest, jobID string) (*rpcpb.SubmitResponse, bool) {
	if !req.Carried {
		return nil, false
	}
	e, ok := m.fsm.Owed(req.Tenant, req.Key, jobID)
	if !ok {
		return nil, false
	}
	return m.entryResponse(e, "", true), true
}

// confirmCarrier records, once a carried submission has a final outcome
// here, that its carrier holds the job, so that this datacenter's outbox
// does not carry the job back (TestOutboxDoesNotCarryAJobBackToItsOrigin).
// A failure (leadership lost) leaves the pair to this datacenter's outbox,
// as before.
func (m *Manager) confirmCarrier(ctx context.Context, req *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse) {
	if !req.Carried || (resp.Outcome != rpc.OutcomeCommitted && resp.Outcome != rpc.OutcomeRejected) {
		return
	}
	dc := req.Carrier
	if dc == "" || dc == m.cfg.Datacenter || !slices.Contains(req.GetJob().GetDatacenters(), dc) ||
		!m.owes(req.Tenant, req.Key, resp.JobId, dc) {
		return
	}
	items := []ledger.Confirmation{{Tenant: req.Tenant, Key: req.Key, JobID: resp.JobId, Datacenter: dc}}
	if _, err := m.apply(ctx, ledger.Confirm{Items: items}); err != nil {
		m.log.Debug("recording that a carried submission's carrier holds the job failed; the outbox carries it back",
			logging.KeyDatacenter, dc, logging.KeyError, err)
	}
}

// owes reports whether this datacenter's ledger, live or owed, still has
// job jobID of (tenant, key) to carry to dc.
func (m *Manager) owes(tenant, key, jobID, dc string) bool {
	if e, ok := m.fsm.Entry(tenant, key); ok && e.JobID == jobID && !slices.Contains(e.Confirmed, dc) {
		return true
	}
	e, ok := m.fsm.Owed(tenant, key, jobID)
	return ok && !slices.Contains(e.Confirmed, dc)
}
