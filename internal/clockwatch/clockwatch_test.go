package clockwatch

import (
	"slices"
	"testing"
	"time"
)

const (
	ms  = time.Millisecond
	sec = time.Second
	min = time.Minute
)

var t0 = time.Unix(1_700_000_000, 0)

// estimateOf is peer's entry of e.Peers.
func estimateOf(e *Estimator, peer string, now time.Time, wall int64) (Estimate, bool) {
	est, ok := e.Peers(now, wall)[peer]
	return est, ok
}

// The peer read its clock half a round trip before its answer arrived.
func TestAckSample(t *testing.T) {
	local := t0.UnixNano()
	s := AckSample(local+int64(5*sec), local, 4*ms, t0)
	if s.Offset != 5*sec+2*ms || s.RTT != 4*ms || !s.At.Equal(t0) || s.Wall != local {
		t.Fatalf("AckSample = %+v; want offset 5.002s, rtt 4ms, at t0, wall local", s)
	}
}

func TestEstimate(t *testing.T) {
	s := func(off, rtt time.Duration, age time.Duration) Sample {
		return Sample{Offset: off, RTT: rtt, At: t0.Add(-age)}
	}
	tests := []struct {
		name    string
		samples []Sample
		want    time.Duration
		wantN   int
		ok      bool
	}{
		{"none", nil, 0, 0, false},
		{"one", []Sample{s(10*min, ms, 0)}, 10 * min, 1, true},
		{"median of the short round trips", []Sample{
			s(100*ms, ms, 0), s(102*ms, ms, 0), s(101*ms, ms, 0),
			s(900*ms, 400*ms, 0), s(-700*ms, 300*ms, 0), s(500*ms, 200*ms, 0),
		}, 101 * ms, 6, true},
		{"one wild sample among sane ones", []Sample{
			s(-5*ms, 2*ms, 0), s(-4*ms, 2*ms, 0), s(10*min, 2*ms, 0), s(-6*ms, 2*ms, 0),
		}, -4*ms - (1*ms)/2, 4, true},
		{"old samples do not count", []Sample{s(10*min, ms, 2*DefaultMaxAge), s(3*ms, ms, 0)}, 3 * ms, 1, true},
		{"all old", []Sample{s(10*min, ms, 2*DefaultMaxAge)}, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEstimator(0, 0)
			for _, x := range tt.samples {
				e.Observe("p", x)
			}
			got, ok := estimateOf(e, "p", t0, 0)
			if ok != tt.ok || got.Offset != tt.want || got.Samples != tt.wantN {
				t.Fatalf("Estimate = %+v, %v; want offset %v from %d samples, %v", got, ok, tt.want, tt.wantN, tt.ok)
			}
		})
	}
}

func TestEstimatorWindowAndForget(t *testing.T) {
	e := NewEstimator(3, time.Hour)
	for i := 0; i < 10; i++ { // offsets 0..9 s: only the last three stay
		e.Observe("p", Sample{Offset: time.Duration(i) * sec, RTT: time.Duration(10-i) * ms, At: t0})
	}
	e.Observe("p", Sample{Offset: time.Hour, RTT: -ms, At: t0}) // refused
	got, ok := estimateOf(e, "p", t0, 0)
	if !ok || got.Offset != 8*sec+sec/2 || got.Samples != 3 {
		t.Fatalf("Estimate = %+v, %v; want 8.5s (the two shortest round trips of the last three) from 3 samples", got, ok)
	}
	e.Observe("q", Sample{Offset: sec, At: t0})
	if peers := e.Peers(t0, 0); len(peers) != 2 || peers["q"].Offset != sec {
		t.Fatalf("Peers = %+v", peers)
	}
	e.Forget("p")
	if _, ok := estimateOf(e, "p", t0, 0); ok {
		t.Fatal("p still estimated after Forget")
	}
}

// A sample measured while this node's clock was set back is corrected when
// the clock is restored (a step, seen against the monotonic clock): the
// peers are not still seen that far ahead until fresh samples outvote the
// old ones. Samples without a wall reading are taken as they are.
func TestEstimateCorrectsClockSteps(t *testing.T) {
	e := NewEstimator(8, time.Hour)
	real := t0.UnixNano()
	back := 528 * sec // this node's clock 8m48s behind: peers seem that far ahead
	for i := range 4 {
		at := t0.Add(time.Duration(i) * sec)
		e.Observe("p", Sample{Offset: back + time.Duration(i)*ms, RTT: ms, At: at, Wall: real + int64(time.Duration(i)*sec-back)})
	}
	later := t0.Add(10 * sec)
	if got, _ := estimateOf(e, "p", later, real+int64(10*sec-back)); got.Offset < back || got.Offset > back+4*ms {
		t.Fatalf("still set back: offset %v, want ~%v", got.Offset, back)
	}
	if got, _ := estimateOf(e, "p", later, real+int64(10*sec)); got.Offset < 0 || got.Offset > 4*ms {
		t.Fatalf("restored: offset %v, want ~0 (the step of %v taken out)", got.Offset, back)
	}
	if got, _ := estimateOf(e, "p", later, 0); got.Offset < back {
		t.Fatalf("no wall reading: offset %v, want the samples' %v", got.Offset, back)
	}
	e.Observe("q", Sample{Offset: sec, RTT: ms, At: t0}) // no Wall
	if got, _ := estimateOf(e, "q", later, real+int64(time.Hour)); got.Offset != sec {
		t.Fatalf("a sample without a wall reading was corrected: %v", got.Offset)
	}
}

func TestGroupView(t *testing.T) {
	max := 500 * ms
	tests := []struct {
		name    string
		voters  int
		offsets []time.Duration
		want    View
	}{
		{"alone", 1, nil, View{Known: true, Voters: 1, Measured: 1}},
		{"no samples yet", 3, nil, View{Voters: 3, Measured: 1}},
		{"ahead by 10m, both peers measured", 3, []time.Duration{-10 * min, -20 * min},
			View{Known: true, Offset: -10 * min, Voters: 3, Measured: 3}},
		{"behind by 10m", 3, []time.Duration{10 * min, 20 * min},
			View{Known: true, Offset: 10 * min, Voters: 3, Measured: 3}},
		{"the sane one between them", 3, []time.Duration{10 * min, -10 * min},
			View{Known: true, Offset: 0, Voters: 3, Measured: 3}},
		{"one peer that disagrees: undecided", 3, []time.Duration{-10 * min},
			View{Voters: 3, Measured: 2}},
		{"one peer that agrees", 3, []time.Duration{200 * ms},
			View{Known: true, Offset: 0, Voters: 3, Measured: 2}},
		{"five voters, two measured who agree with each other, not with us: undecided", 5, []time.Duration{-10 * min, -10 * min},
			View{Voters: 5, Measured: 3}},
		{"five voters, three measured, all agreeing", 5, []time.Duration{-10 * min, -10 * min, -10*min + 100*ms},
			View{Voters: 5, Measured: 4, Known: true, Offset: -10*min + 100*ms}},
		{"five voters, one measured", 5, []time.Duration{-10 * min},
			View{Voters: 5, Measured: 2}},
		{"even, middles agree: nearer to us", 5, []time.Duration{-10 * min, -10*min + 300*ms, -20 * min},
			View{Known: true, Offset: -10*min + 300*ms, Voters: 5, Measured: 4}},
		{"more offsets than voters, alone", 1, []time.Duration{time.Hour},
			View{Known: true, Voters: 1, Measured: 1}},
		{"more offsets than voters: unknown", 3, []time.Duration{0, time.Hour, time.Hour},
			View{Voters: 3, Measured: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GroupView(tt.voters, tt.offsets, max); got != tt.want {
				t.Fatalf("GroupView(%d, %v) = %+v; want %+v", tt.voters, tt.offsets, got, tt.want)
			}
		})
	}
}

// A minority of the voters never sets the group's clock, even when it is
// all that has been measured so far: of five voters, two with clocks ten
// minutes ahead, measured before the others, must not make a node whose
// clock is right (as are the two not measured yet) stamp ten minutes ahead.
// The same two with the node's clock the odd one out are undecided too,
// until one more voter is measured.
func TestGroupViewMinorityMeasuredFirst(t *testing.T) {
	max := 500 * ms
	ahead := []time.Duration{10 * min, 10 * min}
	if v := GroupView(5, ahead, max); v.Known || v.Offending(max) {
		t.Fatalf("5 voters, the two measured 10m ahead: %+v; want unknown (the two unmeasured may agree with this node)", v)
	}
	// Four voters, two of them measured 10m ahead: the other one unmeasured
	// may agree with this node, and two against two is no majority.
	if v := GroupView(4, ahead, max); v.Known || v.Offending(max) {
		t.Fatalf("4 voters, the two measured 10m ahead: %+v; want unknown", v)
	}
	// One more voter measured on their side: three of five are a majority,
	// whatever the last one says, and this node's clock is the odd one out.
	third := append(ahead, 10*min+100*ms)
	if v := GroupView(5, third, max); !v.Known || v.Offset != 10*min || !v.Offending(max) {
		t.Fatalf("5 voters, three measured 10m ahead: %+v; want known, offset 10m", v)
	}
	// Two with this node's side are not enough: the last one decides.
	if v := GroupView(5, append(ahead, 100*ms), max); v.Known {
		t.Fatalf("5 voters, two measured 10m ahead and one with this node: %+v; want unknown", v)
	}
	// Three with it are, whatever the last one says.
	if v := GroupView(5, []time.Duration{10 * min, 100 * ms, -100 * ms}, max); !v.Known || v.Offset != 0 || v.Offending(max) {
		t.Fatalf("5 voters, one measured 10m ahead and two with this node: %+v; want known, offset 0", v)
	}
}

// Offsets that outnumber the other voters cannot all be theirs (two pool
// members claiming one voter's ID): whichever were kept, bogus ones could
// decide the median, so the view is unknown. Here the two real peers agree
// with this node and two claimants an hour ahead come first.
func TestGroupViewMoreOffsetsThanVoters(t *testing.T) {
	max := 500 * ms
	offs := []time.Duration{time.Hour, time.Hour, 0, 10 * ms}
	if v := GroupView(3, offs, max); v.Known || v.Offending(max) {
		t.Fatalf("3 voters, offsets %v: %+v; want unknown", offs, v)
	}
}

func TestViewOffendingAgrees(t *testing.T) {
	max := 500 * ms
	v := View{Known: true, Offset: -10 * min}
	if !v.Offending(max) || (View{Known: true, Offset: 400 * ms}).Offending(max) || (View{Offset: time.Hour}).Offending(max) {
		t.Fatal("Offending wrong")
	}
	if !v.Agrees(-10*min+100*ms, max) || v.Agrees(-20*min, max) || v.Agrees(0, max) {
		t.Fatal("Agrees wrong")
	}
}

func TestLedgerTime(t *testing.T) {
	max := 500 * ms
	wall := t0.UnixNano()
	known := func(off time.Duration) View { return View{Known: true, Offset: off, Voters: 3, Measured: 3} }
	unknown := View{Voters: 3, Measured: 1}
	tests := []struct {
		name string
		in   Input
		want Reading
	}{
		{"in agreement: own clock", Input{Wall: wall, View: known(100 * ms)}, Reading{Now: wall}},
		{"10m ahead: the group's clock", Input{Wall: wall, View: known(-10 * min)},
			Reading{Now: wall - int64(10*min), Clamped: true}},
		{"10m behind: the group's clock", Input{Wall: wall, View: known(10 * min)},
			Reading{Now: wall + int64(10*min), Clamped: true}},
		{"just over the bound", Input{Wall: wall, View: known(-501 * ms)},
			Reading{Now: wall - int64(501*ms), Clamped: true}},
		{"behind the floor: held", Input{Wall: wall, Floor: wall + int64(sec), View: known(0)},
			Reading{Now: wall + int64(sec), Held: true}},
		{"clamped below the floor: held", Input{Wall: wall, Floor: wall - int64(min), View: known(-10 * min)},
			Reading{Now: wall - int64(min), Clamped: true, Held: true}},
		{"unknown view, clock ahead of anchor+elapsed: capped",
			Input{Wall: wall + int64(10*min), View: unknown, Anchored: true, Anchor: wall - int64(2*sec), Elapsed: 2 * sec},
			Reading{Now: wall, Capped: true, Unsure: true}},
		{"unknown view, clock just ahead of anchor+elapsed: capped, sure",
			Input{Wall: wall + int64(400*ms), View: unknown, Anchored: true, Anchor: wall - int64(2*sec), Elapsed: 2 * sec},
			Reading{Now: wall, Capped: true}},
		{"unknown view, after a long outage (the anchor is an hour old): unsure",
			Input{Wall: wall, View: unknown, Anchored: true, Anchor: wall - int64(time.Hour), Elapsed: sec},
			Reading{Now: wall - int64(time.Hour) + int64(sec), Capped: true, Unsure: true}},
		{"unknown view, clock just behind anchor+elapsed: own clock",
			Input{Wall: wall, View: unknown, Anchored: true, Anchor: wall - int64(5*sec), Elapsed: 5*sec + 200*ms},
			Reading{Now: wall}},
		{"unknown view, clock 5s behind anchor+elapsed: anchor+elapsed, unsure",
			Input{Wall: wall, View: unknown, Anchored: true, Anchor: wall - int64(5*sec), Elapsed: 10 * sec},
			Reading{Now: wall + int64(5*sec), Unsure: true}},
		{"unknown view, clock behind the floor and anchor+elapsed: anchor+elapsed", Input{Wall: wall - int64(10*min), Floor: wall, View: unknown, Anchored: true, Anchor: wall, Elapsed: sec},
			Reading{Now: wall + int64(sec), Unsure: true}},
		{"unknown view, empty ledger: own clock, unsure", Input{Wall: wall, View: unknown}, Reading{Now: wall, Unsure: true}},
		{"known view ignores the anchor", Input{Wall: wall, View: known(0), Anchored: true, Anchor: wall - int64(time.Hour)},
			Reading{Now: wall}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.MaxOffset = max
			if got := LedgerTime(tt.in); got != tt.want {
				t.Fatalf("LedgerTime(%+v) = %+v; want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestLedgerTimeWithinTheBoundOfEveryMedian: while a voter is unmeasured the
// group's clock is anywhere in a range, and a node stamps within maxOffset
// of it wherever the unmeasured clock is. Here (five voters, four measured,
// this node's clock the highest) the group's clock is 400 ms to 900 ms
// behind this one: stamping with its own clock, taken for 400 ms off, would
// be up to 900 ms ahead of the group's, and keys expire that much early.
func TestLedgerTimeWithinTheBoundOfEveryMedian(t *testing.T) {
	max := 500 * ms
	const wall = int64(1_700_000_000) * int64(sec)
	for _, sign := range []time.Duration{1, -1} {
		offs := []time.Duration{-950 * ms * sign, -900 * ms * sign, -400 * ms * sign}
		v := GroupView(5, offs, max)
		if !v.Known {
			t.Fatalf("GroupView(5, %v) = %+v; want known", offs, v)
		}
		r := LedgerTime(Input{Wall: wall, View: v, MaxOffset: max})
		for u := -2 * sec; u <= 2*sec; u += 10 * ms {
			all := append([]time.Duration{0, u}, offs...)
			slices.Sort(all)
			if d := time.Duration(r.Now - (wall + int64(all[2]))); d.Abs() > max {
				t.Fatalf("offsets %v, the unmeasured voter at %v: stamped %v off the group's clock (view %+v)", offs, u, d, v)
			}
		}
	}
}

// TestLedgerTimeClockSetBackWithoutAView: a leader without a view of its
// group (gossip cut) whose clock is set back a minute stamps anchor+elapsed,
// not its clock. Its clock would be held at the floor, time standing still
// for a minute: a lease heartbeated meanwhile would end as long before its
// worker's next heartbeat, once ledger time catches up, and its job run
// twice.
func TestLedgerTimeClockSetBackWithoutAView(t *testing.T) {
	max := 500 * ms
	const wall = int64(1_700_000_000) * int64(sec)
	unknown := View{Voters: 3, Measured: 1}
	in := Input{Wall: wall - int64(min), Floor: wall - int64(30*sec), View: unknown, MaxOffset: max,
		Anchored: true, Anchor: wall - int64(time.Hour), Elapsed: time.Hour}
	if r := LedgerTime(in); r.Now != wall || !r.Unsure {
		t.Fatalf("LedgerTime(%+v) = %+v; want Now anchor+elapsed %d, unsure", in, r, wall)
	}
}
