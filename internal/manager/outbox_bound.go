package manager

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/keys"
)

// admitToOutbox refuses a new multi-datacenter submission while the outbox
// carries MANAGER_OUTBOX_MAX_ENTRIES entries (docs/multidc.md, "The
// outbox"): nothing is recorded, and the client retries the key later
// (503 outbox_full). A submission another datacenter's outbox carries here
// is admitted: that datacenter admitted it already, under its own bound. The
// bound is checked before the Reserve, so the submissions in flight at that
// instant may pass it by as many. A structured key whose sequence its
// client's watermark refuses is let through too: the ledger answers it
// idempotency_key_expired and records nothing, as it would with room.
func (m *Manager) admitToOutbox(req *rpcpb.SubmitRequest, k keys.Key) error {
	own := m.cfg.Datacenter
	if req.Carried || !slices.ContainsFunc(req.Job.Datacenters, func(dc string) bool { return dc != own }) {
		return nil
	}
	if n := m.fsm.OutboxLen(); n >= m.cfg.OutboxMaxEntries {
		// Only when full: the watermark is read under the ledger's lock.
		if k.Structured {
			if w, ok := m.fsm.Watermark(req.Tenant, k.ClientID, k.Nonce); ok && w.Refuses(k.Sequence) {
				return nil
			}
		}
		m.metrics.outboxRefused.Inc()
		return rpc.Errorf(rpc.CodeOutboxFull,
			"the outbox carries its maximum of %d multi-datacenter submissions not yet confirmed by every datacenter they name", m.cfg.OutboxMaxEntries)
	}
	return nil
}

// OutboxGauges are the outbox's gauges, read from the ledger when scraped:
// the same on every manager of the datacenter (replicated state).
func (m *Manager) OutboxGauges() []prometheus.Collector {
	fsm, maxEntries := m.fsm, m.cfg.OutboxMaxEntries
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_entries",
			Help: "Multi-datacenter submissions the outbox carries: resolved here, not yet confirmed by every other datacenter they name (live or expired)."},
			func() float64 { return float64(fsm.OutboxLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_expired_entries",
			Help: "Of once_manager_outbox_entries, those whose entry expired here before every datacenter confirmed them (kept until they do)."},
			func() float64 { return float64(fsm.OwedLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "once_manager_outbox_max_entries",
			Help: "MANAGER_OUTBOX_MAX_ENTRIES: once_manager_outbox_entries at which new multi-datacenter submissions are refused (503 outbox_full)."},
			func() float64 { return float64(maxEntries) }),
	}
}
