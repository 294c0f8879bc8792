package nemesis

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/tests/localcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func faults(seed uint64, kinds []Kind, t Timings, n int) []Fault {
	s := NewSchedule(seed, kinds, t)
	out := make([]Fault, n)
	for i := range out {
		out[i] = s.Next()
	}
	return out
}

// The same seed gives the same faults; another seed gives others.
func TestScheduleIsSeeded(t *testing.T) {
	a := faults(42, nil, Timings{}, 50)
	b := faults(42, nil, Timings{}, 50)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 42 gave two schedules:\n%v\n%v", a, b)
	}
	if c := faults(43, nil, Timings{}, 50); slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
}

// Every round injects every kind once, so a run of k rounds covers every kind
// k times, in an order that changes from round to round.
func TestScheduleRoundsCoverEveryKind(t *testing.T) {
	kinds := AllKinds
	fs := faults(7, kinds, Timings{}, 10*len(kinds))
	orders := map[string]bool{}
	for r := range 10 {
		round := fs[r*len(kinds) : (r+1)*len(kinds)]
		var got []Kind
		order := ""
		for i, f := range round {
			if f.Round != r+1 || f.Seq != r*len(kinds)+i+1 {
				t.Fatalf("fault %v: want round %d, seq %d", f, r+1, r*len(kinds)+i+1)
			}
			got = append(got, f.Kind)
			order += string(f.Kind) + " "
		}
		orders[order] = true
		slices.Sort(got)
		want := slices.Clone(kinds)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d has kinds %v, want each of %v once", r+1, got, want)
		}
	}
	if len(orders) < 2 {
		t.Fatal("every round came in the same order")
	}
}

// Quiet and hold times stay within [d/2, 3d/2] of their kind's mean.
func TestScheduleTimings(t *testing.T) {
	tm := Timings{Interval: time.Second, Downtime: 2 * time.Second, RestartDelay: 100 * time.Millisecond,
		Pause: 3 * time.Second, Partition: 4 * time.Second, Skew: 5 * time.Second}
	for _, f := range faults(1, nil, tm, 700) {
		mean := tm.hold(f.Kind)
		if f.Hold < mean/2 || f.Hold > mean*3/2 {
			t.Fatalf("%v: hold outside [%v, %v]", f, mean/2, mean*3/2)
		}
		if f.Quiet < tm.Interval/2 || f.Quiet > tm.Interval*3/2 {
			t.Fatalf("%v: quiet outside [%v, %v]", f, tm.Interval/2, tm.Interval*3/2)
		}
	}
}

func TestParseKinds(t *testing.T) {
	for _, in := range []string{"", "all"} {
		got, err := ParseKinds(in)
		if err != nil || !slices.Equal(got, AllKinds) {
			t.Fatalf("ParseKinds(%q) = %v, %v; want every kind", in, got, err)
		}
	}
	got, err := ParseKinds("kill-leader, pause-leader,kill-leader")
	if err != nil || !slices.Equal(got, []Kind{KillLeader, PauseLeader}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ParseKinds("kill-leader,reboot"); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
}

// A process whose last log lines say it could not bind its port is a port
// clash of the harness; any other exit is not.
func TestPortClash(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ log, want string }{
		"bind": {
			log:  "time=... level=INFO msg=\"manager started\"\ntime=... level=ERROR msg=\"manager failed\" role=manager err=\"manager: raft listen 127.0.0.1:42907: listen tcp 127.0.0.1:42907: bind: address already in use\"\n",
			want: "manager: raft listen 127.0.0.1:42907: listen tcp 127.0.0.1:42907: bind: address already in use",
		},
		"crash":     {log: "time=... msg=\"manager started\"\npanic: runtime error: index out of range\n\ngoroutine 1 [running]:\n"},
		"old clash": {log: "err=\"listen tcp 127.0.0.1:1: bind: address already in use\"\nmsg=\"manager started\"\nline\nline\npanic: boom\n"},
		"empty":     {},
	} {
		p := filepath.Join(dir, name+".log")
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := portClash(&localcluster.Node{Name: name, LogPath: p}); got != tc.want {
			t.Errorf("%s: portClash = %q, want %q", name, got, tc.want)
		}
	}
	if got := portClash(&localcluster.Node{LogPath: filepath.Join(dir, "missing.log")}); got != "" {
		t.Errorf("missing log: %q", got)
	}
}

// ClockSkew faults carry a seeded offset of 1 to 10 minutes, in both
// directions over a run; other kinds carry none.
func TestScheduleClockSkewOffsets(t *testing.T) {
	fs := faults(9, nil, Timings{}, 40*len(AllKinds))
	var ahead, behind int
	for _, f := range fs {
		if f.Kind != ClockSkew {
			if f.Skew != 0 {
				t.Fatalf("%v: a %s fault carries a skew", f, f.Kind)
			}
			continue
		}
		d := f.Skew
		if d < 0 {
			behind++
			d = -d
		} else {
			ahead++
		}
		if d < time.Minute || d > 10*time.Minute {
			t.Fatalf("%v: skew outside 1m..10m", f)
		}
	}
	if ahead == 0 || behind == 0 {
		t.Fatalf("40 clock-skew faults: %d ahead, %d behind; want both directions", ahead, behind)
	}
	// A schedule without the kind (the short chaos test's) has none.
	without := Without(AllKinds, ClockSkew)
	if slices.Contains(without, ClockSkew) || len(without) != len(AllKinds)-1 {
		t.Fatalf("Without(AllKinds, ClockSkew) = %v", without)
	}
	for _, f := range faults(9, without, Timings{}, 3*len(without)) {
		if f.Kind == ClockSkew || f.Skew != 0 {
			t.Fatalf("%v in a schedule without clock skew", f)
		}
	}
}
