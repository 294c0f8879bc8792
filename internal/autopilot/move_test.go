package autopilot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// A manager rescheduled (killed, then back under its ID on a new gossip and
// a new Raft address) is one voter at its new address in the leader's
// configuration, without waiting for the grace period, and no voter is left
// at its old address; the pool lists it once, alive, at its new gossip
// address.
func TestRescheduledManagerMovesEverything(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	victim := followers(nodes, l)[0]
	oldRaft, oldGossip := victim.raftAddr, victim.gossipAddr()
	victim.kill()
	apply(t, l, 2)
	victim.gossipPort = testutil.FreePort(t)
	victim.start([]string{l.gossipAddr()}, true)
	t.Logf("%s moved from %s/%s to %s/%s", victim.id, oldGossip, oldRaft, victim.gossipAddr(), victim.raftAddr)
	testutil.WaitFor(t, 2*waitTimeout, func() (bool, string) {
		f := l.raft.GetConfiguration()
		if f.Error() != nil {
			return false, f.Error().Error()
		}
		cfg := configString(f.Configuration(), true)
		if strings.Contains(cfg, oldRaft) {
			return false, "the old address gone: " + cfg
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == victim.id {
				return string(s.Address) == victim.raftAddr && s.Suffrage == raft.Voter, "the new address as a voter: " + cfg
			}
		}
		return false, victim.id + " in the leader's configuration: " + cfg
	})
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, n := range running(nodes) {
			for _, m := range n.pool.Members() {
				if m.Name == victim.id && (m.Addr != victim.gossipAddr() || m.State.String() != "alive") {
					return false, fmt.Sprintf("%s to list %s alive at %s: %+v", n.id, victim.id, victim.gossipAddr(), m)
				}
			}
			if len(n.pool.Managers("dc1")) != 3 {
				return false, fmt.Sprintf("%s to list 3 managers: %+v", n.id, n.pool.Managers("dc1"))
			}
		}
		return true, ""
	})
	apply(t, l, 1)
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		got, want := victim.fsm.value(), l.fsm.value()
		return got == want, fmt.Sprintf("%s to catch up: %d of %d entries", victim.id, got, want)
	})
	if s := l.ap.Status(); len(s.Refused) != 0 {
		t.Errorf("refusals left: %+v", s.Refused)
	}
}

// A follower that flaps (killed and back on the same addresses, again and
// again, within the grace period) changes nothing in the configuration: no
// removal, no re-addition, not one configuration entry.
func TestFlappingFollowerChangesNoConfiguration(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	victim := followers(nodes, l)[0]
	index := func() uint64 {
		f := l.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return f.Index()
	}
	before := index()
	for i := range 4 {
		victim.kill()
		// Found dead by the pool, or not yet: either way within the grace.
		testutil.WaitFor(t, waitTimeout, func() (bool, string) {
			for _, m := range l.pool.Members() {
				if m.Name == victim.id {
					return i%2 == 0 || m.State.String() != "alive", fmt.Sprintf("round %d: %s to find %s gone: %v", i, l.id, victim.id, m.State)
				}
			}
			return true, ""
		})
		victim.start([]string{l.gossipAddr()}, false)
		apply(t, l, 1)
		testutil.WaitFor(t, waitTimeout, func() (bool, string) {
			got, want := victim.fsm.value(), l.fsm.value()
			return got == want, fmt.Sprintf("round %d: %s to catch up: %d of %d entries", i, victim.id, got, want)
		})
	}
	if after := index(); after != before {
		t.Fatalf("the configuration changed from index %d to %d: %s", before, after, configOf(t, l))
	}
	if got := configOf(t, l); strings.Count(got, "Voter") != 3 {
		t.Fatalf("configuration %s", got)
	}
}

// A leader that leaves while another voter of three is dead does not remove
// itself: the configuration without it (the survivor and the dead voter)
// would have no quorum, and the survivor, holding that configuration, could
// elect no leader even once the leaver is back. It leaves the configuration
// as it is, so the leaver restarted on its data forms a quorum again with
// the survivor.
func TestLeaderLeavingBesideADeadVoterKeepsTheQuorum(t *testing.T) {
	t.Run("found dead by the pool", func(t *testing.T) { leaderLeavesBesideADeadVoter(t, true) })
	// Killed a moment ago: the pool may still list it alive, but the
	// leader's heartbeats fail to reach it.
	t.Run("unreachable by raft", func(t *testing.T) { leaderLeavesBesideADeadVoter(t, false) })
}

func leaderLeavesBesideADeadVoter(t *testing.T, waitPool bool) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	fs := followers(nodes, l)
	dead, survivor := fs[0], fs[1]
	dead.kill()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		if !waitPool {
			why, ok := l.ap.UnhealthyNow()[raft.ServerID(dead.id)]
			return ok, fmt.Sprintf("%s to find %s unhealthy: %q", l.id, dead.id, why)
		}
		for _, m := range l.pool.Members() {
			if m.Name == dead.id {
				return m.State.String() == "dead", fmt.Sprintf("%s to find %s dead: %v", l.id, dead.id, m.State)
			}
		}
		return false, dead.id + " in " + l.id + "'s pool"
	})
	for _, m := range l.pool.Members() {
		if m.Name == dead.id {
			t.Logf("%s's pool lists %s %v", l.id, dead.id, m.State)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := l.ap.Leave(ctx, time.Second)
	cancel()
	t.Logf("leave: %v", err)
	l.kill()
	if got := configOf(t, survivor); strings.Count(got, "(Voter)") != 3 || !strings.Contains(got, l.id+"@") {
		t.Fatalf("%s's configuration after the leader left: %s, want the three voters", survivor.id, got)
	}
	l.start([]string{survivor.gossipAddr()}, false)
	testutil.WaitFor(t, 2*waitTimeout, func() (bool, string) {
		for _, n := range []*node{l, survivor} {
			if n.raft.State() == raft.Leader {
				return true, ""
			}
		}
		return false, "a leader among " + l.id + " and " + survivor.id
	})
}

// A follower that leaves while another voter of three was killed a moment
// ago (the pool may list it alive still, the leader's heartbeats fail to
// reach it) is not removed: the configuration without it would have no
// quorum of live voters, and the leader could commit nothing, nor anyone be
// elected, until the dead voter is back.
func TestFollowerLeavingBesideAJustKilledVoterIsNotRemoved(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	fs := followers(nodes, l)
	dead, leaver := fs[0], fs[1]
	dead.kill()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		why, ok := l.ap.UnhealthyNow()[raft.ServerID(dead.id)]
		return ok, fmt.Sprintf("%s to find %s unhealthy: %q", l.id, dead.id, why)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := leaver.ap.Leave(ctx, time.Second)
	cancel()
	t.Logf("leave: %v", err)
	leaver.kill()
	if got := configOf(t, l); strings.Count(got, "(Voter)") != 3 {
		t.Fatalf("%s's configuration after %s left: %s, want the three voters", l.id, leaver.id, got)
	}
}
