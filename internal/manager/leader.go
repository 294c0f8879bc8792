package manager

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
)

// leaderLoop runs the leader's duties while this node leads: it watches
// leadership through a Raft observer (never missing a transition, unlike a
// dropped LeaderCh signal) and runs one leadership term's work at a time.
func (m *Manager) leaderLoop() {
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	m.raft.RegisterObserver(observer)
	defer m.raft.DeregisterObserver(observer)

	var cancel context.CancelFunc
	var wg sync.WaitGroup
	stop := func() {
		if cancel != nil {
			cancel()
			wg.Wait()
			cancel = nil
		}
		m.readyTerm.Store(0)
		m.jobsQueued.fire() // leases waiting at this leader answer now
	}
	defer stop()
	var leadTerm uint64 // the term the running lead serves
	check := func() {
		leading := m.raft.State() == raft.Leader
		term := m.raft.CurrentTerm()
		// A term of leadership lost and won again between two looks (the
		// observations of both come after the second) is a new term: its
		// lead starts afresh, barrier included, or the node would lead
		// without ever serving (CheckLeader compares the terms).
		if cancel != nil && (!leading || term != leadTerm) {
			stop()
		}
		if leading && m.votes != nil {
			// Elected, its log holds every committed entry (voteguard.go).
			m.votes.markProven("elected leader")
		}
		if leading && cancel == nil {
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			leadTerm = term
			wg.Go(func() { m.lead(ctx, term) })
		}
	}
	check()
	tick := time.NewTicker(time.Second) // a safety net under the observer
	defer tick.Stop()
	for {
		select {
		case <-m.shutdown:
			return
		case <-obs:
			check()
		case <-tick.C:
			check()
		}
	}
}

// lead is one term of leadership: apply everything of earlier terms (Barrier),
// open for business, then expire entries every cleanup interval and job leases every leaseCheckInterval
// until leadership ends. A barrier that completes in another term than term
// proves nothing of it: lead returns, and the loop starts the new term's.
// A barrier that fails in term is retried, also while this node does not
// lead: the loop reads the state and the term apart, so it may start a lead
// for the term of an election the node still runs, and it ends the lead
// itself when the node does not lead
// (TestALeadStartedDuringItsElectionServesTheTermItWins).
func (m *Manager) lead(ctx context.Context, term uint64) {
	if f := m.deps.Knobs.BeforeBarrier; f != nil {
		f()
	}
	for {
		err := m.raft.Barrier(m.cfg.ApplyTimeout).Error()
		if m.raft.CurrentTerm() != term {
			return
		}
		if err == nil {
			break
		}
		m.log.Warn("leader barrier failed; retrying", logging.KeyError, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	m.readyTerm.Store(term)
	m.log.Info("leading", logging.KeyTerm, term, logging.KeyIndex, m.raft.AppliedIndex())

	tick := time.NewTicker(m.cfg.Idempotency.CleanupInterval)
	defer tick.Stop()
	leases := time.NewTicker(leaseCheckInterval)
	defer leases.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.expire(ctx)
		case <-leases.C:
			m.expireLeases(ctx)
		}
	}
}

// expireBatch bounds one Expire command's removals, so a large backlog is
// expired in several entries rather than one huge apply.
const expireBatch = 10000

// expire proposes Expire commands while something is due: an entry or a
// job (NextExpiry), or a watermark not updated for IDEMPOTENCY_WATERMARK_TTL_SECONDS
// (OldestWatermark), each on its own: a watermark ages out even when no
// entry or job is due.
func (m *Manager) expire(ctx context.Context) {
	for ctx.Err() == nil {
		now := m.expiryNow()
		if !m.expiryDue(now) {
			return
		}
		res, err := m.apply(ctx, ledger.Expire{
			Now:          now.UnixNano(),
			MaxRemovals:  expireBatch,
			WatermarkTTL: m.cfg.WatermarkTTL,
		})
		if err != nil {
			m.log.Warn("expire failed", logging.KeyError, err)
			return
		}
		m.metrics.expired.Add(float64(res.Removed.Total()))
		if !res.More {
			return
		}
	}
}

// expiryDue reports whether an Expire stamped now would remove something.
func (m *Manager) expiryDue(now time.Time) bool {
	if next, ok := m.fsm.NextExpiry(); ok && next <= now.UnixNano() {
		return true
	}
	if ttl := m.cfg.WatermarkTTL; ttl > 0 {
		if oldest, ok := m.fsm.OldestWatermark(); ok && oldest <= now.Add(-ttl).UnixNano() {
			return true
		}
	}
	return false
}

// every calls f every d until stop is closed.
func every(stop <-chan struct{}, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}
