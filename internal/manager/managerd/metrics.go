package managerd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/manager"
)

// registerMetrics registers on reg the series read from m's state when
// scraped: its Raft log and indexes, whether it leads, its ledger, its kept
// lease answers, its jobs by state, its outbox and its autopilot. The
// Manager's own counters and histograms are registered by manager.New
// (Deps.Registerer).
func registerMetrics(reg prometheus.Registerer, m *manager.Manager) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "once_manager_raft_log_batches_total",
			Help: "Raft log write batches (one fsync each) since start."}, func() float64 { return float64(m.RaftLogBatches()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_raft_last_index",
			Help: "Index of the last Raft log entry."}, func() float64 { return float64(m.Raft().LastIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_raft_applied_index",
			Help: "Index of the last Raft log entry applied to the ledger."}, func() float64 { return float64(m.Raft().AppliedIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_is_leader",
			Help: "1 while this manager is the serving leader."}, func() float64 {
			if m.CheckLeader() == nil {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_ledger_entries",
			Help: "Entries in the idempotency ledger."}, func() float64 { return float64(m.FSM().Stats().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_jobs",
			Help: "Jobs in the job table."}, func() float64 { return float64(m.FSM().Stats().Jobs) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_lease_answers",
			Help: "Lease answers this manager keeps by Idempotency-Key for retries (docs/workers.md)."},
			func() float64 { n, _ := m.LeaseAnswers(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_lease_answer_bytes",
			Help: "Accounted bytes of the lease answers kept for retries (bounded at 64 MiB)."},
			func() float64 { _, b := m.LeaseAnswers(); return float64(b) }),
	)
	reg.MustRegister(m.JobStateGauges()...)
	reg.MustRegister(m.OutboxGauges()...)
	reg.MustRegister(m.AutopilotCollector())
}
