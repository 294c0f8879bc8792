package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/autopilot"
)

// refusalReasons are the reason labels of once_manager_autopilot_refusals_total,
// all exported from the start.
var refusalReasons = []string{autopilot.RefusedDuplicateID, autopilot.RefusedOldAddressAlive,
	autopilot.RefusedAddressInUse, autopilot.RefusedOldProtocol}

var (
	autopilotRefusalsDesc = prometheus.NewDesc("once_manager_autopilot_refusals_total",
		"Pool members' identity claims (NodeID, Raft address, protocol version) this manager refused to act on as leader, by reason; each standing claim is counted once.", []string{"reason"}, nil)
	autopilotHealthyDesc = prometheus.NewDesc("once_manager_autopilot_healthy",
		"1 if raft-autopilot finds every Raft server healthy, else 0 (reported by the leader only).", nil, nil)
	autopilotToleranceDesc = prometheus.NewDesc("once_manager_autopilot_failure_tolerance",
		"Voters that may fail without losing quorum, per raft-autopilot (reported by the leader only).", nil, nil)
	autopilotServerDesc = prometheus.NewDesc("once_manager_autopilot_server_healthy",
		"1 if raft-autopilot finds the Raft server healthy, else 0 (reported by the leader only).", []string{"server_id"}, nil)
)

// autopilotCollector exports raft-autopilot's state; a follower exports no
// sample.
type autopilotCollector struct{ m *Manager }

func (c autopilotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- autopilotHealthyDesc
	ch <- autopilotToleranceDesc
	ch <- autopilotServerDesc
	ch <- autopilotRefusalsDesc
}

func (c autopilotCollector) Collect(ch chan<- prometheus.Metric) {
	ap := c.m.autopilot.Load()
	if ap == nil {
		return
	}
	counts := ap.RefusalCounts()
	for _, r := range refusalReasons {
		ch <- prometheus.MustNewConstMetric(autopilotRefusalsDesc, prometheus.CounterValue, float64(counts[r]), r)
	}
	h := ap.Health()
	if h == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(autopilotHealthyDesc, prometheus.GaugeValue, b2f(h.Healthy))
	ch <- prometheus.MustNewConstMetric(autopilotToleranceDesc, prometheus.GaugeValue, float64(h.FailureTolerance))
	for _, s := range h.Servers {
		ch <- prometheus.MustNewConstMetric(autopilotServerDesc, prometheus.GaugeValue, b2f(s.Healthy), s.ID)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
