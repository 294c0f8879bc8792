package managerd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
)

// registerMetrics registers on reg the series read from m's state when
// scraped: its Raft log and indexes, whether it leads, its ledger, its kept
// lease answers, its jobs by state, its outbox and its autopilot; and the
// settings of the federation's managers and the datacenter's gates that
// differ from this manager's (mismatches). The Manager's own counters and
// histograms are registered by manager.New (Deps.Registerer).
func registerMetrics(reg prometheus.Registerer, m *manager.Manager, mismatches func() []rpc.ConfigMismatch) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "once_manager_raft_log_batches_total",
		Help: "Raft log write batches (one fsync each) since start."}, func() float64 { return float64(m.RaftLogBatches()) }))
	gauges := []struct {
		name, help string
		value      func() float64
	}{
		{"once_manager_raft_last_index", "Index of the last Raft log entry.",
			func() float64 { return float64(m.Raft().LastIndex()) }},
		{"once_manager_raft_applied_index", "Index of the last Raft log entry applied to the ledger.",
			func() float64 { return float64(m.Raft().AppliedIndex()) }},
		{"once_manager_is_leader", "1 while this manager is the serving leader.",
			func() float64 {
				if m.CheckLeader() == nil {
					return 1
				}
				return 0
			}},
		{"once_manager_ledger_entries", "Entries in the idempotency ledger.",
			func() float64 { return float64(m.FSM().Stats().Entries) }},
		{"once_manager_jobs", "Jobs in the job table.",
			func() float64 { return float64(m.FSM().Stats().Jobs) }},
		{"once_manager_lease_answers", "Lease answers this manager keeps by Idempotency-Key for retries (docs/workers.md).",
			func() float64 { n, _ := m.LeaseAnswers(); return float64(n) }},
		{"once_manager_lease_answer_bytes", "Accounted bytes of the lease answers kept for retries (bounded at 64 MiB).",
			func() float64 { _, b := m.LeaseAnswers(); return float64(b) }},
		{"once_manager_config_mismatches", "Settings of other managers of the federation and of this datacenter's gates (IDEMPOTENCY_* lifetimes and waiting) that differ from this manager's, counted per node and setting; see GET /rpc/v1/status.",
			func() float64 { return float64(len(mismatches())) }},
	}
	for _, g := range gauges {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, g.value))
	}
	reg.MustRegister(m.JobStateGauges()...)
	reg.MustRegister(m.OutboxGauges()...)
	reg.MustRegister(m.AutopilotCollector())
}

// registerTLSReloadMetrics registers the outcome of the reloads of the
// manager's cluster TLS files (MANAGER_TLS_*), as Prometheus tells its
// configuration's (prometheus_config_last_reload_successful): a reload
// that fails keeps the certificate and CA in use, an expiring certificate
// presented until it expires, and these series let an alert say so. The
// gate's are once_gate_tls_certificate_* of the same labels.
func registerTLSReloadMetrics(reg prometheus.Registerer, c *certs.Cluster) {
	labels := prometheus.Labels{"certificate": "cluster"}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_tls_certificate_last_reload_successful",
			Help:        "1 if the last look at the TLS certificate files named by the certificate label loaded them or found them unchanged, 0 if they could not be used (what was loaded before stays in use).",
			ConstLabels: labels},
			func() float64 {
				if c.LastReload().OK {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_tls_certificate_last_reload_success_timestamp_seconds",
			Help:        "Time, in seconds since the epoch, the TLS certificate files named by the certificate label were last loaded (at start, or by a reload that found them changed).",
			ConstLabels: labels},
			func() float64 { return float64(c.LastReload().Loaded.UnixNano()) / 1e9 }),
	)
}
