package manager

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/autopilot"
)

// What the daemon (internal/manager/managerd) reads of a Manager and drives
// in it, beyond New, Close and the RPC service: the readers behind its
// metrics, the collectors built on the Manager's state, the leader check and
// Raft errors of the Operator service, the autopilot it starts and the
// outbox it runs.

// CheckLeader is nil when this manager is the serving leader (it leads and
// has applied every entry of earlier terms); else the error a caller gets:
// not_leader, naming the leader's RPC address when known, or unavailable
// while a new leader catches up.
func (m *Manager) CheckLeader() error { return m.checkLeader() }

// ApplyError is the error a caller gets for err, a Raft future's failure on
// this node: not_leader (the node stops serving as leader) or unavailable.
func (m *Manager) ApplyError(err error) error { return m.applyError(err) }

// RaftLogBatches is the Raft log's write batches since start: one fsync
// each.
func (m *Manager) RaftLogBatches() uint64 { return m.logStore.batches.Load() }

// LeaseAnswers is how many lease answers this manager keeps for retries
// (workers.go), and their accounted bytes.
func (m *Manager) LeaseAnswers() (n int, bytes int64) {
	return m.leaseReplays.Len(), m.leaseReplays.Bytes()
}

// JobStateGauges are once_manager_jobs_by_state{state}, read from the
// ledger when scraped.
func (m *Manager) JobStateGauges() []prometheus.Collector { return jobStateGauges(m.fsm.Stats) }

// OutboxGauges are the outbox's gauges, read from the ledger when scraped.
func (m *Manager) OutboxGauges() []prometheus.Collector {
	return outboxGauges(m.fsm, m.cfg.OutboxMaxEntries)
}

// AutopilotCollector exports the state of the autopilot set by SetAutopilot
// (a follower, or a manager without one, exports no sample).
func (m *Manager) AutopilotCollector() prometheus.Collector { return autopilotCollector{m} }

// SetAutopilot records the autopilot that manages this datacenter's Raft
// group once membership starts: Status and AutopilotCollector read it.
func (m *Manager) SetAutopilot(ap *autopilot.Autopilot) { m.autopilot.Store(ap) }

// RunOutbox carries the multi-datacenter submissions this datacenter
// resolved to the other datacenters they name, every pass while this
// manager leads, until ctx ends (docs/multidc.md). datacenters maps each
// datacenter of the federation to its managers' RPC addresses.
func (m *Manager) RunOutbox(ctx context.Context, datacenters func() map[string][]string, log *slog.Logger) {
	newOutbox(m, datacenters, log).run(ctx)
}
