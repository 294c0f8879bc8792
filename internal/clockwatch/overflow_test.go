package clockwatch

import (
	"math"
	"testing"
	"time"
)

// Offsets are differences of two int64 clocks, so a peer whose clock is
// centuries off (a dead RTC battery, a clock set by hand to 1900 or 2200, a
// buggy peer) makes values near the ends of int64. Every sum and difference
// of them saturates rather than wraps: a wrapped value turns "far in the
// past" into "far in the future", or a huge disagreement into agreement.

// A peer far in the past is seen behind, however far: the offset saturates
// rather than wraps to "far ahead".
func TestAckSampleFarPeerSaturates(t *testing.T) {
	local := t0.UnixNano()
	if s := AckSample(math.MinInt64, local, 4*ms, t0); s.Offset >= 0 {
		t.Fatalf("a peer at the earliest clock: offset %v; want far behind (negative)", s.Offset)
	}
	if s := AckSample(math.MaxInt64, -local, 4*ms, t0); s.Offset <= 0 {
		t.Fatalf("a peer at the latest clock, this one before 1970: offset %v; want far ahead (positive)", s.Offset)
	}
}

// The median of two samples of one peer, one far behind and one far ahead
// (its clock jumped), lies between them.
func TestEstimateMedianFarApart(t *testing.T) {
	e := NewEstimator(0, 0)
	far := time.Duration(5e18) // ~158 years
	e.Observe("p", Sample{Offset: -far, RTT: ms, At: t0})
	e.Observe("p", Sample{Offset: far, RTT: ms, At: t0})
	// Longer round trips: left out (the estimate takes the shorter half).
	e.Observe("p", Sample{Offset: sec, RTT: 10 * ms, At: t0})
	e.Observe("p", Sample{Offset: sec, RTT: 10 * ms, At: t0})
	got, ok := estimateOf(e, "p", t0, 0)
	if !ok || got.Offset != 0 {
		t.Fatalf("median of -%v and %v = %+v, %v; want 0", far, far, got, ok)
	}
}

// A sample of a peer far ahead stays far ahead when this node's clock is
// then stepped far back: the correction saturates.
func TestEstimateStepCorrectionSaturates(t *testing.T) {
	e := NewEstimator(0, 0)
	far := time.Duration(5e18)
	wall := t0.UnixNano()
	e.Observe("p", Sample{Offset: far, RTT: ms, At: t0, Wall: wall})
	// This node's clock set back by 5e18 ns: the peer is further ahead
	// still, beyond what a Duration holds.
	got, _ := estimateOf(e, "p", t0, wall-int64(far))
	if got.Offset != time.Duration(math.MaxInt64) {
		t.Fatalf("offset %v after this clock was set back %v; want the largest Duration", got.Offset, far)
	}
}

// Five voters, three measured: one far behind, this node, one far ahead.
// The two unmeasured could put the median anywhere between: unknown, even
// when the range is wider than a Duration holds.
func TestGroupViewRangeOverflow(t *testing.T) {
	far := time.Duration(5e18)
	if v := GroupView(5, []time.Duration{-far, far}, 500*ms); v.Known {
		t.Fatalf("GroupView(5, [-%v %v]) = %+v; want unknown", far, far, v)
	}
}

// A peer far ahead does not agree with a group far behind, whatever the
// wrapped difference would say.
func TestAgreesFarApart(t *testing.T) {
	v := View{Known: true, Offset: time.Duration(math.MinInt64 + 1)}
	if v.Agrees(time.Duration(math.MaxInt64), 500*ms) {
		t.Fatalf("a peer at +max agrees with a group at -max")
	}
}

// The group's clock far ahead of this one is the latest time there is, not a
// wrapped time before 1970.
func TestLedgerTimeClampSaturates(t *testing.T) {
	wall := t0.UnixNano()
	in := Input{Wall: wall, View: View{Known: true, Offset: time.Duration(math.MaxInt64 - 1000), Voters: 3, Measured: 3}, MaxOffset: 500 * ms}
	if r := LedgerTime(in); r.Now != math.MaxInt64 || !r.Clamped || r.Held {
		t.Fatalf("LedgerTime with the group far ahead = %+v; want Now at the largest time, clamped, not held", r)
	}
}
