package manager

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/clockwatch"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// Ledger time (docs/ledger.md, "Ledger time"). Every time the manager stamps
// into a command, and every time it judges an expiry with, comes from
// ledgerNow or expiryNow: never from Deps.Now directly. They apply
// clockwatch.LedgerTime to this manager's clock, its view of the group's
// clocks (measured by membership on memberlist's probes) and the ledger's
// own time (ledger.FSM.LedgerTime), so that one manager's bad clock cannot
// expire entries early nor make ledger time run backwards.

// ClockSource measures the clock offsets of the other members of the pool: a
// *membership.Pool.
type ClockSource interface {
	ClockOffsets() []membership.PeerOffset
}

// Clock-watch timings.
const (
	// viewTTL is how long a computed group view is reused: the view needs the
	// Raft configuration (a round trip to raft's loop), too costly per
	// submission.
	viewTTL = 200 * time.Millisecond
	// clockStepTolerance: a cached view is dropped when this manager's wall
	// clock has moved more than this beyond the real time elapsed since the
	// view was computed (a step: the clock set back, forward, or restored),
	// since the view's offsets were measured against the clock before it.
	clockStepTolerance = 10 * time.Millisecond
	// clockCheckInterval is how often the clock watch looks at this manager's
	// clock (logging changes, handing leadership over).
	clockCheckInterval = time.Second
	// handoffAfterChecks: a leader hands leadership over after its clock has
	// disagreed with the group's at this many checks in a row (a single odd
	// estimate does not move leadership).
	handoffAfterChecks = 3
	// handoffBackoff is the least time between two leadership handoffs by one
	// manager.
	handoffBackoff = time.Minute
	// readingTries bounds how often a reading of ledger time is taken again
	// because the clock stepped while it measured the view (readLedgerTime):
	// a clock that steps at every try is not one to measure anything by.
	readingTries = 3
)

// ledgerClock is the manager's clock state; see ledgerNow.
type ledgerClock struct {
	mu  sync.Mutex
	src ClockSource

	// the cached group view
	viewAt    time.Time // monotonic
	viewWall  int64     // this manager's wall clock (m.now) then, unix ns
	view      clockwatch.View
	peers     []membership.PeerOffset // voters only, by node ID
	computing bool

	// anchorTerm is the leadership term the anchor was taken in (at the first
	// reading of a term); anchored, anchor, anchorAt: see clockwatch.Input.
	anchorTerm uint64
	anchored   bool
	anchor     int64
	anchorAt   time.Time // monotonic
	// issued is the highest time this manager has handed out.
	issued int64
	// gaveUpTerm is the term in which ledgerNow stopped waiting for an
	// unknown view (it does not wait again in that term).
	gaveUpTerm uint64
	last       clockwatch.Reading

	// the clock watch's state
	offendingChecks int
	lastHandoff     time.Time
	handoffCount    int
	handoffTo       string
	wasOffending    bool
}

// ledgerNow is the time to stamp into a command and to judge expiry by, at the
// leader: this manager's clock, unless the group disagrees with it (then the
// group's), held below the ledger's time plus the real time elapsed while the
// group's view is unknown, and never below the ledger's time.
//
// When the view is unknown and this clock is far from the ledger's time plus
// the elapsed time (after a whole-group outage, or a clock that jumped), it
// waits for the view (at most MANAGER_APPLY_TIMEOUT, once per term) rather
// than stamp new entries with a time that may lag real time: such an entry
// would expire early once ledger time catches up.
func (m *Manager) ledgerNow() time.Time {
	var deadline time.Time
	for {
		r := m.readLedgerTime()
		if !r.Unsure {
			return time.Unix(0, r.Now)
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(m.cfg.ApplyTimeout)
		}
		c := &m.clock
		c.mu.Lock()
		gaveUp := c.gaveUpTerm == c.anchorTerm
		if !gaveUp && now.After(deadline) {
			c.gaveUpTerm = c.anchorTerm
			m.log.Warn("the group's clocks are still unmeasured; stamping with the ledger's time plus the time elapsed",
				logging.KeyDuration, m.cfg.ApplyTimeout, logging.KeyClockOffset, time.Duration(m.now().UnixNano()-r.Now))
			gaveUp = true
		}
		c.mu.Unlock()
		if gaveUp {
			return time.Unix(0, r.Now)
		}
		select {
		case <-m.shutdown:
			return time.Unix(0, r.Now)
		case <-time.After(viewTTL / 4):
		}
	}
}

// expiryNow is ledgerNow for judging expiry (is an entry or a job still live,
// and the Expire command's Now): it never waits. When ledgerNow would wait,
// it answers the capped time, which is never ahead of real time by more than
// the bound: an entry may look live a little longer, never shorter.
func (m *Manager) expiryNow() time.Time {
	return time.Unix(0, m.readLedgerTime().Now)
}

// readLedgerTime is one reading of the rule; see ledgerNow.
func (m *Manager) readLedgerTime() clockwatch.Reading {
	// The clock and the view must be of one clock: a step between reading
	// the one and measuring the other (the view's offsets are corrected to
	// the clock after the step, the reading is from before it) would stamp
	// the clock before the step plus the offsets after it, as far ahead as
	// the clock was set back. A reading whose clock stepped across the view
	// is taken again.
	var wall time.Time
	var v clockwatch.View
	for range readingTries {
		at := time.Now()
		wall = m.now()
		v = m.groupView(false, wall)
		if !stepped(m.now().UnixNano()-wall.UnixNano(), time.Since(at)) {
			break
		}
	}
	c := &m.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	mono := time.Now()
	lt := m.fsm.LedgerTime()
	if term := m.readyTerm.Load(); term != 0 && term != c.anchorTerm {
		// The first reading of a leadership term, after its Barrier: the
		// ledger's time is the last stamp of the previous leaders, issued no
		// later than now, so it plus the real time elapsed from here is never
		// ahead of their clocks.
		c.anchorTerm = term
		c.anchored, c.anchor, c.anchorAt = lt > 0, lt, mono
	}
	r := clockwatch.LedgerTime(clockwatch.Input{
		Wall:      wall.UnixNano(),
		Floor:     max(lt, c.issued),
		View:      v,
		MaxOffset: m.cfg.MaxClockOffset,
		Anchored:  c.anchored,
		Anchor:    c.anchor,
		Elapsed:   mono.Sub(c.anchorAt),
	})
	if v.Known {
		c.anchored, c.anchor, c.anchorAt = true, r.Now, mono
	}
	c.issued, c.last = r.Now, r
	return r
}

// groupView returns the group view, recomputed when older than viewTTL, when
// this manager's wall clock has stepped since (clockStepTolerance), or when
// fresh is set. It is computed outside the lock, by one caller at a time
// (the others meanwhile use the previous view), except after a step, when
// every caller computes its own. now is this manager's wall clock (m.now)
// as the caller read it.
func (m *Manager) groupView(fresh bool, now time.Time) clockwatch.View {
	c := &m.clock
	c.mu.Lock()
	moved := !c.viewAt.IsZero() && stepped(now.UnixNano()-c.viewWall, time.Since(c.viewAt))
	// After a step this reading computes its own view even while another
	// does: it must not use the one from before the step.
	if !moved && (c.computing || (!fresh && !c.viewAt.IsZero() && time.Since(c.viewAt) < viewTTL)) {
		v := c.view
		c.mu.Unlock()
		return v
	}
	c.computing = true
	src := c.src
	c.mu.Unlock()
	at, wall := time.Now(), m.now().UnixNano()
	v, peers := m.computeView(src)
	c.mu.Lock()
	c.view, c.peers, c.viewAt, c.viewWall, c.computing = v, peers, at, wall, false
	c.mu.Unlock()
	return v
}

// stepped reports whether a wall clock that moved by wall while the monotonic
// clock moved by mono was stepped (beyond clockStepTolerance).
func stepped(wall int64, mono time.Duration) bool {
	step := time.Duration(wall) - mono
	return step > clockStepTolerance || step < -clockStepTolerance
}

// computeView measures the group: the voters of the Raft configuration and
// the offsets the source has for them.
func (m *Manager) computeView(src ClockSource) (clockwatch.View, []membership.PeerOffset) {
	if src == nil {
		return clockwatch.View{Known: true, Voters: 1, Measured: 1}, nil
	}
	voters, err := m.voterIDs()
	if err != nil {
		return clockwatch.View{}, nil // unknown: the safe side
	}
	var peers []membership.PeerOffset
	var offs []time.Duration
	// A manager's pool member is named by its node ID, and a pool holds one
	// member of a name: counting only such members counts each voter once.
	// Another member whose metadata claims a voter's ID (any holder of the
	// gossip key can publish it) would otherwise add a clock of its choosing
	// to the median (TestClockViewIgnoresMembersClaimingAVotersID).
	for _, o := range src.ClockOffsets() {
		if o.Role == membership.RoleManager && o.Name == o.NodeID && o.NodeID != m.cfg.NodeID &&
			slices.Contains(voters, o.NodeID) {
			peers = append(peers, o)
			offs = append(offs, o.Offset)
		}
	}
	slices.SortFunc(peers, func(a, b membership.PeerOffset) int { return strings.Compare(a.NodeID, b.NodeID) })
	n := len(voters)
	if !slices.Contains(voters, m.cfg.NodeID) {
		n++ // not (yet) a voter: judge as if one
	}
	return clockwatch.GroupView(n, offs, m.cfg.MaxClockOffset), peers
}

// ClockState is this manager's clock as the clock watch sees it.
type ClockState struct {
	View clockwatch.View
	// Peers are the measured offsets of the other voters.
	Peers []membership.PeerOffset
	// Last is the last ledger-time reading (Clamped, Capped, Held).
	Last clockwatch.Reading
	// LedgerTime is the ledger's time (unix nanoseconds).
	LedgerTime int64
	// Handoffs counts the leadership handoffs for a disagreeing clock;
	// HandoffTo is the node ID of the last one's target.
	Handoffs  int
	HandoffTo string
}

// ClockState returns the current clock state, with a fresh view.
func (m *Manager) ClockState() ClockState {
	m.groupView(true, m.now())
	c := &m.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	return ClockState{View: c.view, Peers: slices.Clone(c.peers), Last: c.last, LedgerTime: m.fsm.LedgerTime(),
		Handoffs: c.handoffCount, HandoffTo: c.handoffTo}
}

// checkClock logs when this manager's clock starts or stops disagreeing with
// the group's, and, at a leader whose clock has disagreed for
// handoffAfterChecks checks in a row, hands leadership to a voter whose clock
// agrees (at most once per handoffBackoff). Meanwhile the leader stamps with
// the group's clock (ledgerNow), so the handoff is for the operator's peace
// of mind and the next leader's sake, not for correctness.
func (m *Manager) checkClock() {
	st := m.ClockState()
	bound := m.cfg.MaxClockOffset
	offending := st.View.Offending(bound)
	c := &m.clock
	c.mu.Lock()
	changed := offending != c.wasOffending
	c.wasOffending = offending
	if offending && m.CheckLeader() == nil {
		c.offendingChecks++
	} else {
		c.offendingChecks = 0
	}
	due := c.offendingChecks >= handoffAfterChecks &&
		(c.lastHandoff.IsZero() || time.Since(c.lastHandoff) >= handoffBackoff)
	if due {
		c.lastHandoff = time.Now()
		c.offendingChecks = 0
	}
	c.mu.Unlock()
	if changed && offending {
		m.log.Warn("this manager's clock disagrees with its group's; stamping ledger time with the group's clock",
			logging.KeyClockOffset, -st.View.Offset, logging.KeyVoters, st.View.Voters, logging.KeyCount, st.View.Measured)
	} else if changed && st.View.Known {
		m.log.Info("this manager's clock agrees with its group's again", logging.KeyClockOffset, -st.View.Offset)
	} else if changed {
		m.log.Warn("this manager's clock is no longer measured against a majority of its group; "+
			"ledger time advances no faster than real time from the last stamp", logging.KeyVoters, st.View.Voters, logging.KeyCount, st.View.Measured)
	}
	if !due {
		return
	}
	target, ok := handoffTarget(st, bound)
	if !ok {
		m.log.Warn("clock disagrees with the group, but no voter's clock agrees with it: keeping leadership",
			logging.KeyClockOffset, -st.View.Offset)
		return
	}
	srv, _ := m.RaftServer(target.NodeID)
	m.log.Warn("handing leadership to a manager whose clock agrees with the group's",
		logging.KeyPeer, target.NodeID, logging.KeyClockOffset, -st.View.Offset, logging.KeyReason, "clock offset")
	m.metrics.clockHandoffs.Inc()
	c.mu.Lock()
	c.handoffCount++
	c.handoffTo = target.NodeID
	c.mu.Unlock()
	// raft bounds a transfer by its election timeout, and fails it on
	// shutdown.
	if err := m.raft.LeadershipTransferToServer(raft.ServerID(target.NodeID), srv.Address).Error(); err != nil {
		m.log.Warn("leadership handoff failed", logging.KeyPeer, target.NodeID, logging.KeyError, err)
	}
}

// handoffTarget picks the voter whose clock is nearest the group's, among
// those that agree with it within bound.
func handoffTarget(st ClockState, bound time.Duration) (membership.PeerOffset, bool) {
	var best membership.PeerOffset
	found := false
	for _, p := range st.Peers {
		if !st.View.Agrees(p.Offset, bound) {
			continue
		}
		if !found || (p.Offset-st.View.Offset).Abs() < (best.Offset-st.View.Offset).Abs() {
			best, found = p, true
		}
	}
	return best, found
}

var (
	descPeerOffset = prometheus.NewDesc("once_manager_clock_offset_seconds",
		"Measured clock offset of another voter: its clock minus this manager's.", []string{"peer"}, nil)
	descGroupOffset = prometheus.NewDesc("once_manager_clock_group_offset_seconds",
		"This manager's clock minus its group's (the median of the voters'); absent until measured.", nil, nil)
	descClamped = prometheus.NewDesc("once_manager_clock_clamped",
		"1 while this manager's clock disagrees with its group's by more than MANAGER_MAX_CLOCK_OFFSET (it stamps with the group's clock).", nil, nil)
	descLedgerTime = prometheus.NewDesc("once_manager_ledger_time_seconds",
		"The ledger's time: the highest time stamped into an applied command (unix seconds).", nil, nil)
)

// clockCollector reads the clock state at scrape time.
type clockCollector struct{ m *Manager }

func (c clockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPeerOffset
	ch <- descGroupOffset
	ch <- descClamped
	ch <- descLedgerTime
}

func (c clockCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.ClockState()
	for _, p := range st.Peers {
		ch <- prometheus.MustNewConstMetric(descPeerOffset, prometheus.GaugeValue, p.Offset.Seconds(), p.NodeID)
	}
	if st.View.Known {
		ch <- prometheus.MustNewConstMetric(descGroupOffset, prometheus.GaugeValue, (-st.View.Offset).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descClamped, prometheus.GaugeValue, b2f(st.View.Offending(c.m.cfg.MaxClockOffset)))
	ch <- prometheus.MustNewConstMetric(descLedgerTime, prometheus.GaugeValue, float64(st.LedgerTime)/1e9)
}

// clockStatus fills the clock fields of a Status.
func (m *Manager) clockStatus(st *rpc.Status) {
	cs := m.ClockState()
	if len(cs.Peers) > 0 {
		st.ClockOffsets = make(map[string]float64, len(cs.Peers))
		for _, p := range cs.Peers {
			st.ClockOffsets[p.NodeID] = p.Offset.Seconds()
		}
	}
	if cs.View.Known {
		g := (-cs.View.Offset).Seconds()
		st.ClockGroupOffset = &g
	}
	st.ClockClamped = cs.View.Offending(m.cfg.MaxClockOffset)
	if cs.LedgerTime > 0 {
		st.LedgerTime = api.FormatTime(time.Unix(0, cs.LedgerTime))
	}
}
