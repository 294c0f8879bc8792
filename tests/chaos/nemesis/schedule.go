package nemesis

import (
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind names a fault.
type Kind string

// The faults. Each one is injected, held, removed, and followed by a wait until
// the cluster is whole again (every process running, one leader that every
// manager follows, every manager a voter and caught up), so faults never
// overlap and quorum is never lost except by KillAll, which is the contract's
// own "all of them at once".
const (
	// KillLeader sends SIGKILL to the Raft leader, keeps it down for the hold
	// time while the others elect a new leader and serve, then starts it again
	// on the same data directory.
	KillLeader Kind = "kill-leader"
	// KillFollower does the same to a follower.
	KillFollower Kind = "kill-follower"
	// Restart sends SIGKILL to any process, a manager (leader or not) or a
	// gate, and starts it again after a short delay: a crash and a quick
	// restart, with the gate's cache or the manager's memory lost.
	Restart Kind = "restart"
	// PauseLeader stops the leader with SIGSTOP for several election timeouts,
	// so the others elect a new leader behind its back, then continues it with
	// SIGCONT: a deposed leader that still believes it leads.
	PauseLeader Kind = "pause-leader"
	// PartitionLeader cuts the leader's Raft links to every other manager
	// (both directions, through the managers' failpoints), then heals them.
	// Gates still reach it, as a client on the wrong side of a partition would.
	PartitionLeader Kind = "partition-leader"
	// PartitionFollower cuts one follower off the same way.
	PartitionFollower Kind = "partition-follower"
	// ClockSkew shifts one manager's wall clock by minutes, forward or back
	// (seeded), makes it the leader (a leadership transfer), holds, then sets
	// its clock right again: the leader stamps ledger times from a clock that
	// is wrong (through the clock failpoint of the fault-injection manager).
	ClockSkew Kind = "clock-skew"
	// KillAll sends SIGKILL to every manager at once and starts them all
	// again after the hold time (the contract's guarantee 2: nothing answered
	// is lost even then).
	KillAll Kind = "kill-all"
)

// AllKinds lists every fault, in report order. It is also the default set.
var AllKinds = []Kind{KillLeader, KillFollower, Restart, PauseLeader, PartitionLeader, PartitionFollower, ClockSkew, KillAll}

// Without returns kinds without the excluded ones (e.g. a run without
// ClockSkew).
func Without(kinds []Kind, exclude ...Kind) []Kind {
	var out []Kind
	for _, k := range kinds {
		if !slices.Contains(exclude, k) {
			out = append(out, k)
		}
	}
	return out
}

// ParseKinds parses a comma-separated list of kinds ("all" or empty: AllKinds).
func ParseKinds(s string) ([]Kind, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return slices.Clone(AllKinds), nil
	}
	var out []Kind
	for part := range strings.SplitSeq(s, ",") {
		k := Kind(strings.TrimSpace(part))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("nemesis: unknown fault kind %q (known: %s)", k, kindList(AllKinds))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

func kindList(kinds []Kind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Fault is one planned fault of a schedule.
type Fault struct {
	// Seq numbers the faults from 1; Round counts the rounds from 1.
	Seq, Round int
	Kind       Kind
	// Quiet is the time the cluster runs undisturbed before the fault.
	Quiet time.Duration
	// Hold is how long the fault lasts: a killed node's downtime, the pause,
	// the partition.
	Hold time.Duration
	// Pick chooses the target among the candidates (sorted by name) that
	// the fault's kind allows: candidate Pick % len(candidates).
	Pick uint64
	// Skew is ClockSkew's clock offset: 1 to 10 minutes, forward or back
	// (zero for the other kinds).
	Skew time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("#%d %s (round %d, after %v quiet, hold %v)", f.Seq, f.Kind, f.Round,
		f.Quiet.Round(time.Millisecond), f.Hold.Round(time.Millisecond))
	if f.Skew != 0 {
		s += fmt.Sprintf(" skew %v", f.Skew)
	}
	return s
}

// Timings are the mean durations of a schedule. Each drawn duration is uniform
// in [d/2, 3d/2].
type Timings struct {
	// Interval is the quiet time between two faults.
	Interval time.Duration
	// Downtime is how long KillLeader, KillFollower and KillAll keep their
	// victims down.
	Downtime time.Duration
	// RestartDelay is the time between the kill and the start of Restart.
	RestartDelay time.Duration
	// Pause is how long PauseLeader keeps the leader stopped; make it several
	// election timeouts, so the others elect a new leader meanwhile.
	Pause time.Duration
	// Partition is how long a partition lasts.
	Partition time.Duration
	// Skew is how long ClockSkew's skewed manager leads before its clock is
	// set right.
	Skew time.Duration
}

// DefaultTimings suit a cluster with localcluster's Fast timings (500 ms
// election timeout).
var DefaultTimings = Timings{
	Interval:     3 * time.Second,
	Downtime:     3 * time.Second,
	RestartDelay: 500 * time.Millisecond,
	Pause:        3 * time.Second,
	Partition:    4 * time.Second,
	Skew:         4 * time.Second,
}

func (t Timings) withDefaults() Timings {
	d := DefaultTimings
	if t.Interval > 0 {
		d.Interval = t.Interval
	}
	if t.Downtime > 0 {
		d.Downtime = t.Downtime
	}
	if t.RestartDelay > 0 {
		d.RestartDelay = t.RestartDelay
	}
	if t.Pause > 0 {
		d.Pause = t.Pause
	}
	if t.Partition > 0 {
		d.Partition = t.Partition
	}
	if t.Skew > 0 {
		d.Skew = t.Skew
	}
	return d
}

func (t Timings) hold(k Kind) time.Duration {
	switch k {
	case KillLeader, KillFollower, KillAll:
		return t.Downtime
	case Restart:
		return t.RestartDelay
	case PauseLeader:
		return t.Pause
	case PartitionLeader, PartitionFollower:
		return t.Partition
	case ClockSkew:
		return t.Skew
	}
	panic("nemesis: unknown kind " + string(k))
}

// Schedule is the seeded sequence of faults: rounds in which every kind occurs
// once, in a random order, with random quiet and hold times and target picks.
// The same seed, kinds and timings give the same faults: the schedule does not
// depend on the cluster (which node is the leader when a fault comes is the
// cluster's business; which follower is picked among the followers is the
// schedule's).
type Schedule struct {
	kinds   []Kind
	timings Timings
	rng     *mrand.Rand
	round   []Kind
	seq     int
	rounds  int
}

// NewSchedule returns the schedule of seed over kinds (nil: AllKinds).
func NewSchedule(seed uint64, kinds []Kind, t Timings) *Schedule {
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	return &Schedule{kinds: slices.Clone(kinds), timings: t.withDefaults(),
		rng: mrand.New(mrand.NewPCG(seed, 0x6e656d65736973))} // "nemesis"
}

// Next returns the next fault.
func (s *Schedule) Next() Fault {
	if len(s.round) == 0 {
		s.rounds++
		s.round = slices.Clone(s.kinds)
		s.rng.Shuffle(len(s.round), func(i, j int) { s.round[i], s.round[j] = s.round[j], s.round[i] })
	}
	k := s.round[0]
	s.round = s.round[1:]
	s.seq++
	f := Fault{
		Seq:   s.seq,
		Round: s.rounds,
		Kind:  k,
		Quiet: s.jitter(s.timings.Interval),
		Hold:  s.jitter(s.timings.hold(k)),
		Pick:  s.rng.Uint64(),
	}
	if k == ClockSkew { // drawn for this kind only: other kinds' schedules stay as they were
		f.Skew = time.Minute + time.Duration(s.rng.Int64N(int64(9*time.Minute)+1))
		if s.rng.IntN(2) == 0 {
			f.Skew = -f.Skew
		}
	}
	return f
}

// jitter draws uniformly from [d/2, 3d/2].
func (s *Schedule) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(s.rng.Int64N(int64(d)+1))
}
