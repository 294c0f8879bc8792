package autopilot

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// ring gives node i the gossip address of node i-1 as its only seed.
func ring(nodes []*node) func(int) []string {
	return func(i int) []string { return []string{nodes[(i+len(nodes)-1)%len(nodes)].gossipAddr()} }
}

func ids(nodes []*node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.id)
	}
	return out
}

func apply(t *testing.T, l *node, count int) {
	t.Helper()
	for i := range count {
		if err := l.raft.Apply([]byte{byte(i)}, 5*time.Second).Error(); err != nil {
			t.Fatalf("apply on %s: %v", l.id, err)
		}
	}
}

func TestThreeManagersOneSeedEachBootstrapOneCluster(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Minute), newNode(t, "m2", 3, time.Minute), newNode(t, "m3", 3, time.Minute)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	if b := bootstrappers(nodes); !slices.Equal(b, []string{"m1"}) {
		t.Fatalf("bootstrapped by %v; want exactly [m1]", b)
	}
	apply(t, leader(t, nodes), 3)
}

func TestFiveManagersExpectThreeFormOneCluster(t *testing.T) {
	var nodes []*node
	for i := range 5 {
		nodes = append(nodes, newNode(t, fmt.Sprintf("m%d", i+1), 3, time.Minute))
	}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters(ids(nodes)...)))
	if b := bootstrappers(nodes); len(b) != 1 {
		t.Fatalf("bootstrapped by %v; want exactly one", b)
	}
}

// TestManagerLifecycle: a fourth manager joins and becomes a voter; the
// leader leaves gracefully and is removed; a follower is killed and removed
// after the grace period while the cluster keeps its leader.
func TestManagerLifecycle(t *testing.T) {
	const grace = 1500 * time.Millisecond
	nodes := []*node{newNode(t, "m1", 3, grace), newNode(t, "m2", 3, grace), newNode(t, "m3", 3, grace)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))

	// A fresh fourth manager, configured with bootstrap_expect 1 — the most
	// eager setting: it must still join the existing cluster, not found one.
	m4 := newNode(t, "m4", 1, grace)
	m4.start([]string{nodes[1].gossipAddr()}, false)
	nodes = append(nodes, m4)
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3", "m4")))
	if b := bootstrappers(nodes); !slices.Equal(b, []string{"m1"}) {
		t.Fatalf("bootstrapped by %v; want exactly [m1]", b)
	}

	// Graceful stop of the leader: leadership moves, it is removed.
	old := leader(t, nodes)
	t.Logf("stopping leader %s gracefully", old.id)
	old.leave()
	rest := running(nodes)
	testutil.WaitFor(t, waitTimeout, converged(rest, voters(ids(rest)...)))

	// Kill a follower: removed after the grace period, leader kept.
	l := leader(t, rest)
	var victim *node
	var survivors []*node
	for _, n := range rest {
		if n != l && victim == nil {
			victim = n
		} else {
			survivors = append(survivors, n)
		}
	}
	// Every survivor must know the leader before the kill, or a follower
	// that still follows the old leader reports its own leader change below.
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, n := range survivors {
			if _, id := n.raft.LeaderWithID(); string(id) != l.id {
				return false, fmt.Sprintf("%s to follow %s, it follows %q", n.id, l.id, id)
			}
		}
		return true, ""
	})
	obs := make(chan raft.Observation, 64)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	for _, n := range survivors {
		n.raft.RegisterObserver(observer)
		defer n.raft.DeregisterObserver(observer)
	}
	t.Logf("killing follower %s; leader is %s", victim.id, l.id)
	killed := time.Now()
	victim.kill()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		if l.raft.State() != raft.Leader {
			t.Fatalf("%s lost leadership after %s was killed", l.id, victim.id)
		}
		return converged(survivors, voters(ids(survivors)...))()
	})
	if since := time.Since(killed); since < grace {
		t.Fatalf("%s removed %v after it was killed, before the %v grace period", victim.id, since, grace)
	}
drain:
	for {
		select {
		case o := <-obs:
			if lo := o.Data.(raft.LeaderObservation); lo.LeaderID != raft.ServerID(l.id) {
				t.Fatalf("leadership changed while %s was being removed: %+v", victim.id, lo)
			}
		default:
			break drain
		}
	}
	apply(t, l, 1)
}

// TestRestartAllDoesNotBootstrapAgain: every manager of a cluster stops and
// restarts on its Raft state, with fresh gossip pools and the most eager
// bootstrap_expect: no new cluster, the old one comes back with its data.
func TestRestartAllDoesNotBootstrapAgain(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Minute), newNode(t, "m2", 3, time.Minute), newNode(t, "m3", 3, time.Minute)}
	startAll(t, nodes, ring(nodes))
	want := voters("m1", "m2", "m3")
	testutil.WaitFor(t, waitTimeout, converged(nodes, want))
	l := leader(t, nodes)
	apply(t, l, 5)
	before := configOf(t, l)

	for _, n := range nodes {
		n.kill()
	}
	for _, n := range nodes {
		n.expect = 1
		n.gossipPort = testutil.FreePort(t)
	}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, want))
	if b := bootstrappers(nodes); len(b) != 0 {
		t.Fatalf("%v bootstrapped after a restart", b)
	}
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, n := range nodes {
			if st := n.ap.Status(); !st.HasState {
				return false, fmt.Sprintf("%s's autopilot to see its state: %+v", n.id, st)
			}
		}
		return true, ""
	})
	if b := bootstrappers(nodes); len(b) != 0 {
		t.Fatalf("%v bootstrapped after a restart", b)
	}
	l = leader(t, nodes)
	if err := l.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if got := l.fsm.value(); got < 5 {
		t.Fatalf("leader %s applied %d entries after the restart; the old log had 5", l.id, got)
	}
	if after := configOf(t, l); after != before {
		t.Fatalf("configuration changed across the restart: %s -> %s", before, after)
	}
}

// TestRestartOnNewRaftAddress: a manager comes back with the same ID and its
// state but a new Raft address; the leader updates its address (AddVoter)
// instead of waiting for the dead-server grace period.
func TestRestartOnNewRaftAddress(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	var victim *node
	for _, n := range nodes {
		if n != l {
			victim = n
			break
		}
	}
	oldAddr := victim.raftAddr
	victim.kill()
	apply(t, l, 2)
	victim.start([]string{l.gossipAddr()}, true)
	if victim.raftAddr == oldAddr {
		t.Fatal("test bug: the address did not change")
	}
	t.Logf("%s moved from %s to %s", victim.id, oldAddr, victim.raftAddr)
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		f := l.raft.GetConfiguration()
		if f.Error() != nil {
			return false, f.Error().Error()
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == victim.id {
				return string(s.Address) == victim.raftAddr && s.Suffrage == raft.Voter, fmt.Sprintf("leader to list %s at %s: %+v", victim.id, victim.raftAddr, s)
			}
		}
		return false, victim.id + " in the leader's configuration"
	})
	apply(t, l, 1)
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		got, want := victim.fsm.value(), l.fsm.value()
		return got == want, fmt.Sprintf("%s to catch up: %d of %d entries", victim.id, got, want)
	})
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		st := victim.ap.Status()
		if st.Bootstrapped {
			t.Fatalf("%s bootstrapped after a restart: %+v", victim.id, st)
		}
		return st.HasState, fmt.Sprintf("%s's autopilot to see its state: %+v", victim.id, st)
	})
}

func configOf(t *testing.T, n *node) string {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return configString(f.Configuration(), true)
}
