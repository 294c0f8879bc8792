package manager

// ProtocolVersion is what this build reads of the ledger's commands, as a
// manager advertises it to its datacenter (membership.Meta.Version). A
// leader proposes an encoding only once every server of its Raft
// configuration advertises a version that reads it (groupVersion): a
// replica that cannot read an entry refuses it while the others apply it,
// and the group diverges (docs/ledger.md, "Compatibility and rolling
// upgrades").
//
//  1. Every build before gating: Reserve v2, Commit v3, Expire v2, the
//     batch types, Confirm, and the job lifecycle's commands at version 1.
//  2. Lease v2 (ledger.Lease.Replay): a lease retried with its idempotency
//     key after a change of leader is given the first attempt's jobs.
//  3. Lease v3 (ledger.Lease.MaxBytes): a lease's answer bounded by its
//     jobs' bytes; Complete v2 and Fail v2: results and errors within the
//     byte budgets.
//  4. Admit (ledger.Admit), alone and in reserve batches: a submission
//     reserved and decided in one entry, one Raft round; WorkerBatch
//     (ledger.WorkerBatch): the workers' commands share entries; Claim and
//     Release (ledger claim.go), and the CLAIMED entry state in snapshots:
//     an omitted datacenters list in a federation.
//  5. Cancel and Retry (ledger actions.go), and the CANCELLED job state in
//     snapshots and stores: a tenant cancels a queued job or retries a
//     failed or dead one; the owed table (snapshot version 6): a
//     multi-datacenter entry kept past its expiry until every datacenter
//     confirmed it. Autopilot adds no server advertising less.
const ProtocolVersion = protocolJobActions

// The versions that added what a leader waits for.
const (
	protocolLeaseReplay = 2
	protocolByteBudgets = 3
	protocolOneRound    = 4
	protocolWorkerBatch = 4
	protocolClaims      = 4
	protocolJobActions  = 5
)

// protocolBeforeGating is what a manager that advertises nothing known is
// taken to read: every build before gating advertised 1.
const protocolBeforeGating = 1

// groupVersion is the lowest protocol version among the servers of the
// Raft configuration (voters and non-voters alike: each applies the log).
// A server whose version is not known yet (membership has not reached it)
// counts as protocolBeforeGating, and so does an unknown configuration:
// the safe side is the old encoding.
func (m *Manager) groupVersion() int {
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return protocolBeforeGating
	}
	low := ProtocolVersion
	for _, s := range f.Configuration().Servers {
		v := protocolBeforeGating
		if p, ok := m.peer(string(s.ID)); ok {
			v = p.Version
		}
		low = min(low, v)
	}
	return low
}
