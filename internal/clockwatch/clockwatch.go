// Package clockwatch estimates the clock offsets among a group's members and
// turns them into the ledger's rule for time. It is pure logic: no goroutines,
// no clock of its own (every time comes in as an argument), so every rule is
// table-tested.
//
// An offset is "the peer's wall clock minus mine". It is measured the way NTP
// and Serf do it, on a round trip that already happens (memberlist's ping and
// ack, see internal/membership): the responder puts its wall clock in the ack;
// the prober knows the round-trip time, so
//
//	offset ≈ remote − (local_at_ack − rtt/2)   (AckSample)
//
// with an error of at most rtt/2 (the one-way delays may differ). The
// Estimator keeps a few recent samples per peer and answers a robust
// estimate; GroupView takes the median over a group's voters (this node
// counted as 0), which is what a majority of the group agrees "now" is; and
// LedgerTime is the rule a manager stamps commands with (docs/ledger.md,
// "Ledger time").
package clockwatch

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Sample is one measurement of a peer's clock.
type Sample struct {
	// Offset is the peer's wall clock minus this node's, at the time of the
	// measurement.
	Offset time.Duration
	// RTT is the round trip of the measurement; the offset is exact within
	// RTT/2.
	RTT time.Duration
	// At is when the sample was taken, on this node's monotonic clock (a
	// time.Now() value, never a skewed wall clock): it ages samples out.
	At time.Time
	// Wall is this node's wall clock (the one Offset is measured against)
	// when the sample was taken, in unix nanoseconds; 0: not recorded. If
	// that clock has been stepped since (set back, set forward, restored),
	// the step is how far it moved beyond the real time elapsed on the
	// monotonic clock, and the sample's offset is corrected by it: a clock
	// restored after being set back must not see its peers still that far
	// ahead until fresh samples outvote the old ones.
	Wall int64
}

// AckSample is the sample of a round trip whose answer carried the peer's
// wall clock, remote. local is this node's wall clock when the answer
// arrived (both unix nanoseconds), at the same moment as time.Now() gave it.
// The peer read its clock about rtt/2 before, so the offset is
// remote − (local − rtt/2).
func AckSample(remote, local int64, rtt time.Duration, at time.Time) Sample {
	return Sample{Offset: time.Duration(sub(remote, sub(local, int64(rtt/2)))), RTT: rtt, At: at, Wall: local}
}

// add and sub are a+b and a-b saturated at the ends of int64. Offsets are
// differences of two clocks, and a clock centuries off (a dead RTC battery,
// a clock set by hand to 1900, a buggy peer) puts them near those ends,
// where a wrapped sum would turn a peer far behind into one far ahead, or a
// huge disagreement into an agreement.
func add(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func sub(a, b int64) int64 {
	d := a - b
	switch {
	case a >= 0 && b < 0 && d < 0:
		return math.MaxInt64
	case a < 0 && b > 0 && d >= 0:
		return math.MinInt64
	}
	return d
}

// offsetAt is s's offset corrected for any step of this node's wall clock
// since s was taken (Sample.Wall), wall being that clock's reading at now.
func (s Sample) offsetAt(now time.Time, wall int64) time.Duration {
	if s.Wall == 0 || wall == 0 {
		return s.Offset
	}
	step := sub(sub(wall, s.Wall), int64(now.Sub(s.At)))
	return time.Duration(sub(int64(s.Offset), step))
}

// Estimate is a peer's offset as the Estimator sees it.
type Estimate struct {
	Offset time.Duration // peer's clock minus this node's
	RTT    time.Duration // the smallest round trip among the samples used
	// Samples is how many recent samples the estimate rests on.
	Samples int
	// At is when the newest of them was taken.
	At time.Time
}

// Default estimator parameters.
const (
	// DefaultWindow is how many samples per peer are kept.
	DefaultWindow = 8
	// DefaultMaxAge is how old a sample may be and still count: a peer that
	// stopped answering probes stops counting.
	DefaultMaxAge = time.Minute
)

// Estimator keeps the last Window samples of each peer and estimates its
// offset: of the recent samples (younger than MaxAge) it takes the half with
// the smallest round trips (a long round trip is a queueing delay in one
// direction, which biases the offset by up to half of it; NTP's clock filter
// prefers short ones for that reason) and answers their median offset. One
// wild sample cannot move the estimate while most are sane. It is safe for
// concurrent use. The zero value is not usable: use NewEstimator.
type Estimator struct {
	window int
	maxAge time.Duration

	mu    sync.Mutex
	peers map[string][]Sample // ring, oldest first
}

// NewEstimator returns an Estimator keeping window samples per peer (<= 0:
// DefaultWindow) no older than maxAge (<= 0: DefaultMaxAge).
func NewEstimator(window int, maxAge time.Duration) *Estimator {
	if window <= 0 {
		window = DefaultWindow
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	return &Estimator{window: window, maxAge: maxAge, peers: map[string][]Sample{}}
}

// Observe records a sample of peer. A negative round trip is refused.
func (e *Estimator) Observe(peer string, s Sample) {
	if s.RTT < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ss := e.peers[peer]
	if len(ss) >= e.window {
		ss = append(ss[:0], ss[len(ss)-e.window+1:]...)
	}
	e.peers[peer] = append(ss, s)
}

// Forget drops a peer's samples (it left the group).
func (e *Estimator) Forget(peer string) {
	e.mu.Lock()
	delete(e.peers, peer)
	e.mu.Unlock()
}

// Peers returns the estimate of every peer with a sample younger than MaxAge,
// by name: at now (on the clock of Sample.At), with wall this node's wall
// clock then (unix nanoseconds, 0: do not correct for steps; Sample.Wall).
func (e *Estimator) Peers(now time.Time, wall int64) map[string]Estimate {
	e.mu.Lock()
	all := make(map[string][]Sample, len(e.peers))
	for p, ss := range e.peers {
		all[p] = slices.Clone(ss)
	}
	e.mu.Unlock()
	out := make(map[string]Estimate, len(all))
	for p, ss := range all {
		if est, ok := estimate(ss, now, wall, e.maxAge); ok {
			out[p] = est
		}
	}
	return out
}

// estimate is Estimator's rule over one peer's samples.
func estimate(ss []Sample, now time.Time, wall int64, maxAge time.Duration) (Estimate, bool) {
	recent := ss[:0:0]
	var newest time.Time
	for _, s := range ss {
		if now.Sub(s.At) > maxAge {
			continue
		}
		recent = append(recent, s)
		if s.At.After(newest) {
			newest = s.At
		}
	}
	if len(recent) == 0 {
		return Estimate{}, false
	}
	sort.SliceStable(recent, func(i, j int) bool { return recent[i].RTT < recent[j].RTT })
	best := recent[:(len(recent)+1)/2]
	offs := make([]time.Duration, len(best))
	for i, s := range best {
		offs[i] = s.offsetAt(now, wall)
	}
	slices.Sort(offs)
	// The median: the middle offset, or halfway between the two middle ones.
	// a <= b, so a negative b-a is one that overflowed (a far behind, b far
	// ahead), and then a/2+b/2 cannot.
	a, b := offs[(len(offs)-1)/2], offs[len(offs)/2]
	med := a/2 + b/2
	if d := b - a; d >= 0 {
		med = a + d/2
	}
	return Estimate{Offset: med, RTT: best[0].RTT, Samples: len(recent), At: newest}, true
}

// View is a node's view of its group's clock.
type View struct {
	// Known: offsets are measured for a majority of the voters (this node
	// included) and their median is decisive. Until then the node does not
	// know whether its own clock is the odd one out.
	Known bool
	// Offset is the group's clock minus this node's: the median of the
	// voters' offsets, this node counted as 0. Zero when not Known.
	Offset time.Duration
	// Voters is the size of the group; Measured how many of them have an
	// offset (this node included).
	Voters, Measured int
}

// GroupView computes the view of a node among voters voters (itself
// included), given the offsets measured to the other voters (peer's clock
// minus this node's). It is Known when 1+len(offsets) is a majority of
// voters and the median is decisive: with an odd count it is the middle
// value; with an even count the two middle values must agree within
// maxOffset (then the one nearer this node's clock is taken). Two values
// that disagree (this node and one peer, ten minutes apart) say nothing about
// which of them is wrong.
//
// Voters not measured yet count too: each could hold any clock, so the
// median of all the voters lies anywhere between the measured values it
// would be with every unmeasured clock below them and with every one above.
// The view is Known only when that whole range is within maxOffset, and
// then the value of the range nearest this node's clock is taken, unless
// that value is within maxOffset of this node's clock and the range's other
// end is not: then that end is taken, so that the node does not stamp with
// a clock up to twice maxOffset off the group's. Otherwise
// a minority could decide it: of five voters, the two measured first both
// ten minutes ahead would make a node whose clock is right, and so are the
// two not measured yet, take the group's clock for ten minutes ahead.
func GroupView(voters int, offsets []time.Duration, maxOffset time.Duration) View {
	all := append([]time.Duration{0}, offsets...) // this node's own offset is 0
	v := View{Voters: max(voters, 1), Measured: len(all)}
	if v.Measured > v.Voters {
		// More estimates than voters: some do not measure a voter (two pool
		// members claiming one voter's ID, a configuration change in
		// flight), and nothing here tells which. Keeping the first ones
		// would let the bogus ones decide the median; alone, this node is
		// the group whatever the others say. Otherwise the view is unknown,
		// the safe side, until the estimates fit the voters again.
		v.Measured = v.Voters
		if v.Voters > 1 {
			return v
		}
		all = all[:1]
	}
	if v.Measured < v.Voters/2+1 {
		return v
	}
	slices.Sort(all)
	// The median of all the voters is their value at index lowMid (and,
	// with an even count, highMid too; the same index for an odd count).
	// With the unmeasured voters all below the measured ones, lowMid falls
	// on the measured value at lowMid-unmeasured; with all of them above,
	// highMid falls on the measured value at highMid. The majority check
	// keeps both indexes within the measured values.
	unmeasured := v.Voters - v.Measured
	lowMid, highMid := (v.Voters-1)/2, v.Voters/2
	lo, hi := all[lowMid-unmeasured], all[highMid]
	// hi >= lo: a negative difference overflowed, a range wider than any
	// bound.
	if d := hi - lo; d < 0 || d > maxOffset {
		return v
	}
	v.Known = true
	// The value of [lo, hi] nearest this node's clock: 0 when the range
	// holds it, else the end nearer 0. With every voter measured and an
	// even count, lo and hi are the two middle values and 0 is one of the
	// values, so this is the nearer of the two. But when the nearer end is
	// within maxOffset and the farther is not, the group's clock may be up
	// to twice maxOffset from this node's: the farther end is taken, the
	// view is Offending, and a stamp of this clock plus it is within
	// maxOffset of every value the range allows.
	near, far := lo, hi
	if hi < 0 {
		near, far = hi, lo
	}
	switch {
	case lo <= 0 && hi >= 0:
	case near.Abs() <= maxOffset && far.Abs() > maxOffset:
		v.Offset = far
	default:
		v.Offset = near
	}
	return v
}

// Offending reports whether a node with this view should not stamp with its
// own clock: the group, as far as it is known, disagrees with it by more than
// maxOffset.
func (v View) Offending(maxOffset time.Duration) bool {
	return v.Known && v.Offset.Abs() > maxOffset
}

// Agrees reports whether a peer with the given offset (its clock minus this
// node's) agrees with the group's clock within maxOffset: a candidate to hand
// leadership to.
func (v View) Agrees(peerOffset, maxOffset time.Duration) bool {
	return v.Known && time.Duration(sub(int64(peerOffset), int64(v.Offset))).Abs() <= maxOffset
}

// Input is what LedgerTime decides from. Times are unix nanoseconds.
type Input struct {
	// Wall is this node's wall clock.
	Wall int64
	// Floor is the highest stamp the ledger has applied or this node has
	// issued: ledger time never goes below it.
	Floor int64
	// View is this node's view of the group's clock.
	View View
	// MaxOffset is the bound on how far this node's clock may disagree with
	// the group's before it is not used (MANAGER_MAX_CLOCK_OFFSET).
	MaxOffset time.Duration
	// Anchored says Anchor and Elapsed are set: Anchor is a stamp known not
	// to be ahead of real time by more than MaxOffset (the ledger time a
	// leader found when it took over, or its last stamp while the View was
	// Known), and Elapsed is the real time since, on the monotonic clock.
	Anchored bool
	Anchor   int64
	Elapsed  time.Duration
}

// Reading is LedgerTime's answer.
type Reading struct {
	// Now is the time to stamp (unix nanoseconds).
	Now int64
	// Clamped: the node's clock disagreed with the group by more than
	// MaxOffset, so Now is the group's clock (Wall + View.Offset).
	Clamped bool
	// Capped: the View is not Known and the clock ran ahead of Anchor +
	// Elapsed, so Now was held to that.
	Capped bool
	// Held: Now is Floor (the clock, clamped or capped, was below it).
	Held bool
	// Unsure: the View is not Known and this clock is more than MaxOffset
	// away from Anchor + Elapsed, either way: after a whole-group outage, or
	// because this clock is off, and nothing tells which. Now is still the
	// safe side for judging expiry (capped), but an entry stamped with it
	// may lag real time: the caller should wait for the View.
	Unsure bool
}

// LedgerTime is the rule of ledger time (docs/ledger.md, "Ledger time"):
//
//  1. With a Known view that disagrees with this clock by more than
//     MaxOffset, use the group's clock: Wall + View.Offset.
//  2. Without a Known view, never move ahead of Anchor by more than the real
//     time elapsed since it was taken: min(Wall, Anchor + Elapsed); and when
//     Wall is more than MaxOffset away from Anchor + Elapsed, say Unsure (the
//     caller waits for the View rather than stamp new entries with a time
//     that may lag real time), and when Wall is that far behind, use
//     Anchor + Elapsed (a clock set back lags real time). Without an anchor
//     (an empty ledger) it is Wall, and Unsure: there is nothing to check
//     this clock against.
//  3. Never below Floor: time does not run backwards.
//
// So clock skew can delay an expiry but never bring one forward by more than
// MaxOffset.
func LedgerTime(in Input) Reading {
	r := Reading{Now: in.Wall}
	if in.View.Offending(in.MaxOffset) {
		r.Now, r.Clamped = add(in.Wall, int64(in.View.Offset)), true
	}
	if !in.View.Known && !in.Anchored {
		r.Unsure = true // nothing to compare this clock with
	}
	if !in.View.Known && in.Anchored {
		limit := add(in.Anchor, int64(in.Elapsed))
		if r.Now > limit {
			r.Now, r.Capped = limit, true
		}
		if time.Duration(sub(in.Wall, limit)).Abs() > in.MaxOffset {
			r.Unsure = true
			// A clock this far behind Anchor + Elapsed, itself never ahead of
			// real time by more than MaxOffset, lags real time: it was set
			// back. Anchor + Elapsed is nearer.
			r.Now = max(r.Now, limit)
		}
	}
	if r.Now < in.Floor {
		r.Now, r.Held = in.Floor, true
	}
	return r
}
