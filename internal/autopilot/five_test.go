package autopilot

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// Five managers: what docs/operations.md promises for a datacenter of 5
// (bootstrap in any order, two failures tolerated and cleaned up, returns as
// voters, a wiped data directory). Every other test of the package runs 3.

func fiveNodes(t *testing.T, expect int, grace time.Duration) []*node {
	var nodes []*node
	for i := range 5 {
		nodes = append(nodes, newNode(t, fmt.Sprintf("m%d", i+1), expect, grace))
	}
	return nodes
}

// startFive starts five managers that expect five, each seeded with all the
// others, and returns them and their leader once they agree on five voters.
func startFive(t *testing.T, grace time.Duration) ([]*node, *node) {
	t.Helper()
	nodes := fiveNodes(t, 5, grace)
	startAll(t, nodes, allSeeds(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters(ids(nodes)...)))
	return nodes, leader(t, nodes)
}

// allSeeds gives every node the gossip addresses of all the others.
func allSeeds(nodes []*node) func(int) []string {
	return func(i int) []string {
		var out []string
		for j, n := range nodes {
			if j != i {
				out = append(out, n.gossipAddr())
			}
		}
		return out
	}
}

// followers returns the running nodes other than l.
func followers(nodes []*node, l *node) []*node {
	var out []*node
	for _, n := range running(nodes) {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// caughtUp waits until every running node has applied what l has.
func caughtUp(t *testing.T, nodes []*node, l *node) {
	t.Helper()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		want := l.fsm.value()
		for _, n := range running(nodes) {
			if got := n.fsm.value(); got != want {
				return false, fmt.Sprintf("%s to apply %d entries, it has %d", n.id, want, got)
			}
		}
		return true, ""
	})
}

// TestFiveManagersStaggeredBootstrapOnce: bootstrap_expect 5, four managers
// start in no particular order and wait; the fifth, the one with the lowest
// ID (the one that bootstraps), starts only once all four wait for it.
// Exactly one bootstrap, one group of five voters.
func TestFiveManagersStaggeredBootstrapOnce(t *testing.T) {
	nodes := fiveNodes(t, 5, time.Minute)
	seeds := allSeeds(nodes)
	early := []int{3, 1, 4, 2} // m4, m2, m5, m3
	for _, i := range early {
		nodes[i].start(seeds(i), false)
	}
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, i := range early {
			n := nodes[i]
			if st := n.ap.Status(); !strings.HasPrefix(st.Waiting, "seen 4 of 5") || st.HasState {
				return false, fmt.Sprintf("%s to wait for the fifth manager: %+v", n.id, st)
			}
		}
		return true, ""
	})
	if b := bootstrappers(nodes); len(b) != 0 {
		t.Fatalf("%v bootstrapped with 4 of 5 managers", b)
	}
	nodes[0].start(seeds(0), false)
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters(ids(nodes)...)))
	if b := bootstrappers(nodes); !slices.Equal(b, []string{"m1"}) {
		t.Fatalf("bootstrapped by %v; want exactly [m1]", b)
	}
	l := leader(t, nodes)
	apply(t, l, 3)
	caughtUp(t, nodes, l)
}

// TestFiveManagersTwoKilledAtOnce: two followers of five die together. The
// three left keep a leader and commit; after the grace period both dead
// voters are removed (3 voters left, all alive), never before it; when they
// come back on their data they are voters again and catch up.
func TestFiveManagersTwoKilledAtOnce(t *testing.T) {
	const grace = 1500 * time.Millisecond
	nodes, l := startFive(t, grace)
	apply(t, l, 2)

	fs := followers(nodes, l)
	dead := fs[:2]
	killed := time.Now()
	for _, n := range dead {
		n.kill()
	}
	t.Logf("killed %s and %s; leader %s", dead[0].id, dead[1].id, l.id)
	l = leader(t, nodes)
	apply(t, l, 2) // 3 of 5 commit

	survivors := running(nodes)
	testutil.WaitFor(t, waitTimeout, converged(survivors, voters(ids(survivors)...)))
	if since := time.Since(killed); since < grace {
		t.Fatalf("dead voters removed %v after the kill, before the %v grace period", since, grace)
	}
	l = leader(t, nodes)
	apply(t, l, 1)

	for _, n := range dead {
		n.start([]string{l.gossipAddr()}, false)
	}
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters(ids(nodes)...)))
	if b := bootstrappers(nodes); len(b) != 1 {
		t.Fatalf("bootstrapped by %v; want exactly one", b)
	}
	l = leader(t, nodes)
	apply(t, l, 1)
	caughtUp(t, nodes, l)
}

// TestFiveManagersTwoKilledReturnWithinGrace: two followers die and come
// back on their data before the grace period ends: nothing is removed, they
// are voters throughout and catch up.
func TestFiveManagersTwoKilledReturnWithinGrace(t *testing.T) {
	nodes, l := startFive(t, time.Hour)
	all := voters(ids(nodes)...)
	dead := followers(nodes, l)[:2]
	for _, n := range dead {
		n.kill()
	}
	l = leader(t, nodes)
	apply(t, l, 3)
	if got := l.config(); got != all {
		t.Fatalf("configuration %q while two voters are dead within the grace period; want %q", got, all)
	}
	for _, n := range dead {
		n.start([]string{l.gossipAddr()}, false)
	}
	testutil.WaitFor(t, waitTimeout, converged(nodes, all))
	l = leader(t, nodes)
	apply(t, l, 1)
	caughtUp(t, nodes, l)
}

// wipe forgets the node's Raft state, as a wiped data directory does.
func (n *node) wipe() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		n.t.Fatalf("%s: wipe while running", n.id)
	}
	n.store, n.snaps = raft.NewInmemStore(), raft.NewInmemSnapshotStore()
}

// TestFiveManagersWipedFollowerReturns: a follower dies, its data directory
// is wiped, and it comes back with its node ID and Raft address, before the
// grace period ends. It does not bootstrap, it stays the one server of its
// ID (no second voter, no second group), and it receives the log.
func TestFiveManagersWipedFollowerReturns(t *testing.T) {
	nodes, l := startFive(t, time.Hour)
	all := voters(ids(nodes)...)
	apply(t, l, 4)
	// The victim is a follower that did not bootstrap the group (the one
	// that did usually leads, but a loaded machine may have moved the
	// leadership): a restarted node's status no longer says it did.
	var victim *node
	for _, n := range followers(nodes, l) {
		if !slices.Contains(bootstrappers(nodes), n.id) {
			victim = n
			break
		}
	}
	if victim == nil {
		t.Fatalf("no follower of %v but the bootstrapper %v", ids(nodes), bootstrappers(nodes))
	}
	victim.kill()
	apply(t, l, 1)
	victim.wipe()
	victim.expect = 1 // the most eager setting: it must still not found a group
	victim.start([]string{l.gossipAddr()}, false)
	testutil.WaitFor(t, waitTimeout, converged(nodes, all))
	l = leader(t, nodes)
	apply(t, l, 1)
	caughtUp(t, nodes, l)
	if b := bootstrappers(nodes); len(b) != 1 || b[0] == victim.id {
		t.Fatalf("bootstrapped by %v; want exactly one, not the wiped %s", b, victim.id)
	}
}

// TestFiveManagersWipedAfterRemoval: a follower dies, is removed after the
// grace period, and comes back wiped: the leader adds it again and it
// becomes a voter of the same group.
func TestFiveManagersWipedAfterRemoval(t *testing.T) {
	const grace = 1500 * time.Millisecond
	nodes, l := startFive(t, grace)
	apply(t, l, 2)
	victim := followers(nodes, l)[0]
	victim.kill()
	rest := running(nodes)
	testutil.WaitFor(t, waitTimeout, converged(rest, voters(ids(rest)...)))
	victim.wipe()
	victim.expect = 1
	victim.start([]string{l.gossipAddr()}, false)
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters(ids(nodes)...)))
	l = leader(t, nodes)
	apply(t, l, 1)
	caughtUp(t, nodes, l)
	if b := bootstrappers(nodes); len(b) != 1 || b[0] == victim.id {
		t.Fatalf("bootstrapped by %v; want exactly one, not the wiped %s", b, victim.id)
	}
}
