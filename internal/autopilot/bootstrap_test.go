package autopilot

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/membership"
)

func mgr(id string, state membership.State, expect int, vote uint64, hasState bool) membership.Member {
	return membership.Member{Name: "n-" + id, State: state, Meta: membership.Meta{
		Role: membership.RoleManager, Datacenter: "dc1", NodeID: id, RaftAddr: "addr-" + id,
		HasRaftState: hasState, Bootstrap: membership.BootstrapMeta{Expect: expect, Vote: vote},
	}}
}

func voteOf(ids ...string) uint64 {
	slices.Sort(ids)
	return fingerprint(ids)
}

func TestDecide(t *testing.T) {
	alive := membership.StateAlive
	abc := voteOf("a", "b", "c")
	cases := []struct {
		name      string
		self      string
		view      []string // already in the view
		members   []membership.Member
		bootstrap bool
		stop      bool
		reason    string
	}{
		{name: "too few", self: "a",
			members: []membership.Member{mgr("b", alive, 3, 0, false)}, reason: "seen 2 of 3"},
		{name: "others have not voted for the same set", self: "a",
			members: []membership.Member{mgr("b", alive, 3, abc, false), mgr("c", alive, 3, voteOf("a", "c"), false)},
			reason:  "manager c has not seen the same managers"},
		{name: "unanimous, lowest bootstraps", self: "a",
			members:   []membership.Member{mgr("b", alive, 3, abc, false), mgr("c", alive, 3, abc, false)},
			bootstrap: true},
		{name: "unanimous, not lowest waits", self: "b",
			members: []membership.Member{mgr("a", alive, 3, abc, false), mgr("c", alive, 3, abc, false)},
			reason:  "a (lowest ID) bootstraps"},
		{name: "an alive manager with state stops", self: "a",
			members: []membership.Member{mgr("b", alive, 3, abc, false), mgr("c", alive, 3, 0, true)}, stop: true},
		{name: "a departed manager with state stops too", self: "a",
			members: []membership.Member{mgr("b", alive, 3, abc, false), mgr("c", alive, 3, abc, false), mgr("z", membership.StateDead, 3, 0, true)},
			stop:    true},
		{name: "a manager of the view died", self: "a", view: []string{"d"},
			members: []membership.Member{mgr("b", alive, 3, voteOf("a", "b", "c", "d"), false), mgr("c", alive, 3, voteOf("a", "b", "c", "d"), false)},
			reason:  "manager d was seen but is not alive"},
		{name: "conflicting expect", self: "a",
			members: []membership.Member{mgr("b", alive, 5, abc, false), mgr("c", alive, 3, abc, false)},
			reason:  "bootstrap_expect 5, this one 3"},
		{name: "expect 0 blocks", self: "a",
			members: []membership.Member{mgr("b", alive, 0, 0, false), mgr("c", alive, 3, abc, false)},
			reason:  "does not take part"},
		{name: "other datacenter and gates do not count", self: "a",
			members: []membership.Member{
				mgr("b", alive, 3, voteOf("a", "b"), false),
				{Name: "g", Meta: membership.Meta{Role: membership.RoleGate, Datacenter: "dc1", NodeID: "g"}},
				{Name: "x", Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc2", NodeID: "x", HasRaftState: true}},
			},
			reason: "seen 2 of 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			view := map[string]string{}
			for _, id := range c.view {
				view[id] = "addr-" + id
			}
			d := decide(view, c.self, "addr-"+c.self, "dc1", 3, c.members)
			if d.stop != c.stop || (d.bootstrap != nil) != c.bootstrap || !strings.Contains(d.reason, c.reason) {
				t.Fatalf("decision = %+v; want stop=%v bootstrap=%v reason~%q", d, c.stop, c.bootstrap, c.reason)
			}
			if d.bootstrap != nil {
				got := serversString(d.bootstrap.Servers)
				if got != "a@addr-a(Voter),b@addr-b(Voter),c@addr-c(Voter)" {
					t.Fatalf("configuration = %s", got)
				}
			}
		})
	}
}

// TestBootstrapAtMostOnceSimulation runs the protocol against an adversarial
// gossip layer: every look at the pool shows a random subset of the managers
// a node has heard of, each alive or not at random, each with any meta it
// has ever published (arbitrarily stale). With fewer than 2×expect fresh
// managers, at most one may ever bootstrap.
func TestBootstrapAtMostOnceSimulation(t *testing.T) {
	type published struct {
		vote     uint64
		hasState bool
	}
	type node struct {
		id       string
		view     map[string]string
		heard    map[int]bool // whom this node has heard of (grows)
		history  []published
		stopped  bool
		decided  bool
		restarts int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	runs, bootstraps := 500, 0
	for run := range runs {
		expect := 1 + rng.IntN(4)
		m := expect + rng.IntN(expect) // expect .. 2*expect-1 managers
		nodes := make([]*node, m)
		for i := range nodes {
			nodes[i] = &node{id: fmt.Sprintf("m%02d", rng.IntN(100)*10+i), view: map[string]string{},
				heard: map[int]bool{}, history: []published{{}}}
		}
		decided := 0
		for range 60 * m {
			z := nodes[rng.IntN(m)]
			if z.decided || z.stopped {
				continue
			}
			// Hear of someone new now and then; never forget.
			z.heard[rng.IntN(m)] = true
			var members []membership.Member
			for w := range z.heard {
				if nodes[w] == z {
					continue
				}
				p := nodes[w].history[rng.IntN(len(nodes[w].history))] // any past publication
				state := membership.StateAlive
				if rng.IntN(4) == 0 {
					state = membership.StateDead
				}
				members = append(members, mgr(nodes[w].id, state, expect, p.vote, p.hasState))
			}
			d := decide(z.view, z.id, "addr", "dc1", expect, members)
			switch {
			case d.stop:
				z.stopped = true
				z.history = append(z.history, published{})
			case d.bootstrap != nil:
				z.decided = true
				decided++
				z.history = append(z.history, published{hasState: true})
			default:
				z.history = append(z.history, published{vote: d.vote})
			}
		}
		if decided > 1 {
			t.Fatalf("run %d: %d managers bootstrapped (expect %d, %d managers)", run, decided, expect, m)
		}
		bootstraps += decided
	}
	t.Logf("%d runs, %d bootstrapped a cluster, none twice", runs, bootstraps)
	if bootstraps == 0 {
		t.Fatal("the simulation never bootstraps: it tests nothing")
	}
}

// TestBootstrapConverges: with a pool that has converged, the lowest manager
// bootstraps after one round of votes.
func TestBootstrapConverges(t *testing.T) {
	ids := []string{"m3", "m1", "m2", "m4"}
	views := map[string]map[string]string{}
	votes := map[string]uint64{}
	for _, id := range ids {
		views[id] = map[string]string{}
	}
	var boot []string
	for round := 0; round < 3 && len(boot) == 0; round++ {
		next := map[string]uint64{}
		for _, self := range ids {
			var members []membership.Member
			for _, o := range ids {
				if o != self {
					members = append(members, mgr(o, membership.StateAlive, 3, votes[o], false))
				}
			}
			d := decide(views[self], self, "addr-"+self, "dc1", 3, members)
			if d.bootstrap != nil {
				boot = append(boot, self)
				if n := len(d.bootstrap.Servers); n != 4 {
					t.Fatalf("bootstrap with %d servers", n)
				}
			}
			next[self] = d.vote
		}
		votes = next
	}
	if len(boot) != 1 || boot[0] != "m1" {
		t.Fatalf("bootstrapped by %v; want [m1]", boot)
	}
}

func TestQuorumSafe(t *testing.T) {
	voters := func(ids ...string) []raft.Server {
		var s []raft.Server
		for _, id := range ids {
			s = append(s, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return s
	}
	aliveSet := func(ids ...string) func(raft.ServerID) bool {
		return func(id raft.ServerID) bool {
			for _, a := range ids {
				if string(id) == a {
					return true
				}
			}
			return false
		}
	}
	cases := []struct {
		servers []raft.Server
		remove  string
		alive   []string
		ok      bool
	}{
		{voters("a", "b", "c"), "c", []string{"a", "b"}, true}, // 2 of 2 left
		{voters("a", "b", "c"), "c", []string{"a"}, false},     // 1 of 2
		{voters("a", "b", "c", "d", "e"), "e", []string{"a", "b", "c"}, true},
		{voters("a", "b", "c", "d"), "d", []string{"a", "b"}, true}, // 2 of 3 left
		{voters("a", "b", "c", "d"), "d", []string{"a"}, false},     // 1 of 3
		{append(voters("a", "b"), raft.Server{ID: "n", Suffrage: raft.Nonvoter}), "n", []string{"a"}, true},
	}
	for i, c := range cases {
		if ok, _, _ := quorumSafe(c.servers, raft.ServerID(c.remove), aliveSet(c.alive...)); ok != c.ok {
			t.Errorf("case %d: quorumSafe = %v; want %v", i, ok, c.ok)
		}
	}
}
