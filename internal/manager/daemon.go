package manager

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/autopilot"
)

// What the daemon (internal/manager/managerd) reads of a Manager and drives
// in it, beyond New, Close and the RPC service: the readers behind its
// metrics, the collectors built on the Manager's state, the autopilot it
// starts and the outbox it runs (and CheckLeader and ApplyError, for its
// Operator service).

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

// AutopilotCollector exports the state of the autopilot set by SetAutopilot
// (a follower, or a manager without one, exports no sample).
func (m *Manager) AutopilotCollector() prometheus.Collector { return autopilotCollector{m} }

// SetAutopilot records the autopilot that manages this datacenter's Raft
// group once membership starts: Status and AutopilotCollector read it.
func (m *Manager) SetAutopilot(ap *autopilot.Autopilot) { m.autopilot.Store(ap) }

// Autopilot returns the autopilot SetAutopilot recorded, nil before.
func (m *Manager) Autopilot() *autopilot.Autopilot { return m.autopilot.Load() }

// RunOutbox carries the multi-datacenter submissions this datacenter
// resolved to the other datacenters they name, every pass while this
// manager leads, until ctx ends (docs/multidc.md). datacenters maps each
// datacenter of the federation to its managers' RPC addresses.
func (m *Manager) RunOutbox(ctx context.Context, datacenters func() map[string][]string, log *slog.Logger) {
	newOutbox(m, datacenters, log).run(ctx)
}
