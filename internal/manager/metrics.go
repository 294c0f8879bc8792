package manager

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// metrics are the manager's own; each one's Help says what it counts.
type metrics struct {
	submissions                                           *prometheus.CounterVec
	submitTime, applyLatency                              prometheus.Histogram
	expired, outboxConfirmed, leaseReplays, outboxRefused prometheus.Counter
	outboxInvalid, clockHandoffs                          prometheus.Counter
	outboxOldest                                          prometheus.Gauge
}

// latencyBuckets are the bounds of the manager's latency histograms: 0.5 ms
// doubling up to about 16 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// newMetrics makes the metrics, registered on reg unless it is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	histogram := func(name, help string) prometheus.Histogram {
		return f.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	}
	return &metrics{
		submissions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "once_manager_submissions_total",
			Help: "Submissions handled at this manager, by outcome or error code.",
		}, []string{"result"}),
		submitTime:   histogram("once_manager_submit_seconds", "Time to answer a submission at the leader."),
		applyLatency: histogram("once_manager_raft_apply_seconds", "Time from proposing a ledger command to its application."),
		expired: counter("once_manager_expired_total",
			"Entries, jobs and watermarks removed by Expire commands this manager proposed."),
		outboxConfirmed: counter("once_manager_outbox_confirmed_total",
			"Multi-datacenter submissions this manager's outbox carried to another datacenter and recorded as final there (one per entry and datacenter)."),
		outboxRefused: counter("once_manager_outbox_refused_total",
			"Multi-datacenter submissions refused (503 outbox_full) because the outbox held MANAGER_OUTBOX_MAX_ENTRIES."),
		outboxInvalid: counter("once_manager_outbox_invalid_total",
			"Attempts of this manager's outbox to carry a multi-datacenter submission that another datacenter refused as invalid (retried at the longest backoff until it accepts; logged at error once per entry, datacenter and leader term)."),
		outboxOldest: f.NewGauge(prometheus.GaugeOpts{
			Name: "once_manager_outbox_oldest_entry_age_seconds",
			Help: "Age (since it was resolved) of the oldest multi-datacenter submission this manager's outbox, as leader, is still carrying to another datacenter; 0 at a follower or when none is.",
		}),
		leaseReplays: counter("once_manager_lease_replays_total",
			"Leases retried with their Idempotency-Key and answered with the kept answer (the same jobs), at this manager as leader."),
		clockHandoffs: counter("once_manager_clock_handoffs_total",
			"Leadership handoffs by this manager because its clock disagreed with its group's."),
	}
}

func (m *metrics) observeSubmit(resp *rpcpb.SubmitResponse, err error, d time.Duration) {
	m.submitTime.Observe(d.Seconds())
	result := "error"
	if err == nil && resp != nil {
		result = resp.Outcome
	} else if e := (*rpc.Error)(nil); errors.As(err, &e) { // e escapes: declared on the error path alone
		result = string(e.Code)
	}
	m.submissions.WithLabelValues(result).Inc()
}

// jobStateGauges are once_manager_jobs_by_state{state}: the jobs of the
// worker lifecycle by state, read from stats (the FSM's) when scraped.
func jobStateGauges(stats func() ledger.Stats) []prometheus.Collector {
	var out []prometheus.Collector
	for _, s := range []struct {
		state string
		n     func(ledger.Stats) int
	}{
		{api.JobStatusQueued, func(s ledger.Stats) int { return s.Queued }},
		{api.JobStatusRunning, func(s ledger.Stats) int { return s.Running }},
		{api.JobStatusSucceeded, func(s ledger.Stats) int { return s.Succeeded }},
		{api.JobStatusFailed, func(s ledger.Stats) int { return s.Failed }},
		{api.JobStatusDead, func(s ledger.Stats) int { return s.Dead }},
		{api.JobStatusCancelled, func(s ledger.Stats) int { return s.Cancelled }},
	} {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_jobs_by_state",
			Help:        "Jobs of the worker lifecycle in the job table, by state (docs/ledger.md, \"Job lifecycle\").",
			ConstLabels: prometheus.Labels{"state": s.state}}, func() float64 { return float64(s.n(stats())) }))
	}
	return out
}
