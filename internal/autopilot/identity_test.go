package autopilot

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/testutil"
)

// claim is a manager's pool record: name, NodeID, Raft address, state,
// protocol version.
func claim(name, id, addr string, state membership.State, version int) membership.Member {
	return membership.Member{Name: name, State: state, LastSeen: time.Unix(100, 0), Meta: membership.Meta{
		Role: membership.RoleManager, Datacenter: "dc1", NodeID: id, RaftAddr: addr, Version: version}}
}

func voterAt(id, addr string) raft.Server {
	return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter}
}

// render: "id=name@addr ..." for the accepted records, sorted by ID.
func renderAccepted(byID map[raft.ServerID]membership.Member) string {
	var parts []string
	for id, m := range byID {
		parts = append(parts, fmt.Sprintf("%s=%s@%s", id, m.Name, m.Meta.RaftAddr))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func renderRefused(rs []Refusal) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s:%s(%s@%s)", r.Reason, r.Node, r.ID, r.RaftAddr))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func TestResolveIdentities(t *testing.T) {
	const alive, dead, left = membership.StateAlive, membership.StateDead, membership.StateLeft
	cfg := []raft.Server{voterAt("m1", "A1"), voterAt("m2", "A2"), voterAt("m3", "A3")}
	base := []membership.Member{claim("m1", "m1", "A1", alive, 3), claim("m2", "m2", "A2", alive, 3), claim("m3", "m3", "A3", alive, 3)}
	with := func(extra ...membership.Member) []membership.Member { return append(slices.Clone(base), extra...) }
	replace := func(i int, m membership.Member, extra ...membership.Member) []membership.Member {
		out := slices.Clone(base)
		out[i] = m
		return append(out, extra...)
	}
	for _, tc := range []struct {
		name     string
		servers  []raft.Server
		members  []membership.Member
		accepted string
		refused  string
	}{
		{name: "all genuine", servers: cfg, members: base,
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3"},
		{name: "impostor claims a voter's ID at another address", servers: cfg,
			members:  with(claim("x", "m2", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "duplicate_id:x(m2@B)"},
		{name: "impostor claims a voter's ID and address", servers: cfg,
			members:  with(claim("x", "m2", "A2", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "duplicate_id:x(m2@A2)"},
		{name: "two live claimants of a new ID: neither", servers: cfg,
			members:  with(claim("x", "m4", "B", alive, 3), claim("y", "m4", "C", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "duplicate_id:x(m4@B) duplicate_id:y(m4@C)"},
		{name: "two live claimants, neither at the configuration's address", servers: cfg,
			members:  replace(1, claim("x", "m2", "B", alive, 3), claim("y", "m2", "C", alive, 3)),
			accepted: "m1=m1@A1 m3=m3@A3", refused: "duplicate_id:x(m2@B) duplicate_id:y(m2@C)"},
		{name: "move while the old address is live under another ID", servers: cfg,
			members:  replace(1, claim("m2", "m2", "B", alive, 3), claim("z", "m9", "A2", alive, 3)),
			accepted: "m1=m1@A1 m3=m3@A3", refused: "address_in_use:z(m9@A2) old_address_alive:m2(m2@B)"},
		{name: "move while the old member is alive under another name", servers: cfg,
			members:  replace(1, claim("m2-new", "m2", "B", alive, 3), claim("old", "m7", "A2", alive, 3)),
			accepted: "m1=m1@A1 m3=m3@A3", refused: "address_in_use:old(m7@A2) old_address_alive:m2-new(m2@B)"},
		{name: "real move: same name, new address", servers: cfg,
			members:  replace(1, claim("m2", "m2", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@B m3=m3@A3"},
		{name: "real move: old record dead", servers: cfg,
			members:  with(claim("m2-new", "m2", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "duplicate_id:m2-new(m2@B)"},
		{name: "real move: old record dead under its own name", servers: cfg,
			members:  replace(1, claim("m2", "m2", "A2", dead, 3), claim("m2-new", "m2", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2-new@B m3=m3@A3"},
		{name: "real move: old record left", servers: cfg,
			members:  replace(1, claim("m2", "m2", "A2", left, 3), claim("m2-new", "m2", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2-new@B m3=m3@A3"},
		{name: "new ID claims a live voter's address", servers: cfg,
			members:  with(claim("x", "m4", "A2", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "address_in_use:x(m4@A2)"},
		{name: "new ID takes a dead voter's address", servers: cfg,
			members:  replace(1, claim("m2", "m2", "A2", dead, 3), claim("x", "m4", "A2", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3 m4=x@A2"},
		{name: "two new IDs claim one address", servers: cfg,
			members:  with(claim("x", "m4", "B", alive, 3), claim("y", "m5", "B", alive, 3)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "address_in_use:x(m4@B) address_in_use:y(m5@B)"},
		{name: "a voter moves onto another live voter's address", servers: cfg,
			members:  replace(1, claim("m2", "m2", "A3", alive, 3)),
			accepted: "m1=m1@A1 m3=m3@A3", refused: "address_in_use:m2(m2@A3)"},
		{name: "older protocol refused", servers: cfg,
			members:  with(claim("m4", "m4", "A4", alive, 2)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "old_protocol:m4(m4@A4)"},
		{name: "no version advertised is version 1", servers: cfg,
			members:  with(claim("m4", "m4", "A4", alive, 0)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3", refused: "old_protocol:m4(m4@A4)"},
		{name: "same protocol as the oldest server", servers: cfg,
			members:  replace(0, claim("m1", "m1", "A1", alive, 2), claim("m4", "m4", "A4", alive, 2)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3 m4=m4@A4"},
		{name: "newer protocol accepted", servers: cfg,
			members:  with(claim("m4", "m4", "A4", alive, 4)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3 m4=m4@A4"},
		{name: "a server in the configuration is not refused for its version", servers: cfg,
			members:  replace(2, claim("m3", "m3", "A3", alive, 1)),
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3"},
		{name: "no configuration yet", servers: nil,
			members:  base,
			accepted: "m1=m1@A1 m2=m2@A2 m3=m3@A3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byID, refused := resolveIdentities(tc.servers, tc.members, "dc1")
			if got := renderAccepted(byID); got != tc.accepted {
				t.Errorf("accepted %q, want %q", got, tc.accepted)
			}
			if got := renderRefused(refused); got != tc.refused {
				t.Errorf("refused %q, want %q", got, tc.refused)
			}
		})
	}
}

// TestGossipAloneChangesNoIdentity: a pool member that claims a voter's
// NodeID with another Raft address (gossip is all it takes to say so) changes
// nothing in the Raft configuration; the leader refuses the claim and counts
// it.
func TestGossipAloneChangesNoIdentity(t *testing.T) {
	nodes := []*node{newNode(t, "m1", 3, time.Hour), newNode(t, "m2", 3, time.Hour), newNode(t, "m3", 3, time.Hour)}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	before := configOf(t, l)
	var victim *node
	for _, n := range nodes {
		if n != l {
			victim = n
			break
		}
	}
	// The impostor sorts before the victim by name, so a leader that took
	// the first claimant would take its address.
	impostor, err := membership.Start(context.Background(), membership.Config{
		NodeName: "impostor", BindAddr: "127.0.0.1", BindPort: testutil.FreePort(t),
		Seeds: []string{l.gossipAddr()}, Profile: membership.ProfileTest, Logger: l.log.With(logging.KeyNode, "impostor"),
		Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc1", NodeID: victim.id,
			RPCAddr: "127.0.0.1:1", RaftAddr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), HasRaftState: true, Version: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = impostor.Shutdown() })

	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		n := l.ap.RefusalCounts()[RefusedDuplicateID]
		return n == 1, fmt.Sprintf("the leader to count one %s refusal, have %d (%v)", RefusedDuplicateID, n, l.ap.RefusalCounts())
	})
	st := l.ap.Status()
	if len(st.Refused) != 1 || st.Refused[0].Node != "impostor" || st.Refused[0].ID != victim.id {
		t.Fatalf("Status().Refused = %+v, want the impostor's claim of %s", st.Refused, victim.id)
	}
	// Two more reconcile rounds with the claim standing see it and change
	// nothing, nor count it again. A claim that gossip drops and brings
	// back (a loaded machine's memberlist suspects the impostor, and it
	// refutes) is a new standing, with a new Since, and counted again: the
	// rounds are then counted from its return.
	since, want, counted := st.Refused[0].Since, uint64(1), time.Now()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		st1 := l.ap.Status()
		n := l.ap.RefusalCounts()[RefusedDuplicateID]
		st2 := l.ap.Status()
		if len(st1.Refused) != 1 || len(st2.Refused) != 1 || !st1.Refused[0].Since.Equal(st2.Refused[0].Since) {
			return false, "the impostor's claim standing"
		}
		if s := st1.Refused[0].Since; !s.Equal(since) {
			since, want, counted = s, n, time.Now()
			return false, "two reconcile rounds after the claim came back"
		}
		if n != want {
			t.Fatalf("one standing claim counted %d times, want %d", n, want)
		}
		return st2.LastReconcile.After(counted.Add(l.ap.cfg.ReconcileInterval)), "two reconcile rounds after the refusal"
	})
	if got := configOf(t, l); got != before {
		t.Fatalf("configuration changed by a gossip claim:\n got %s\nwant %s", got, before)
	}
}

// TestOlderProtocolNotAdded: a manager advertising an older protocol version
// than every server of the group is not added, as voter or non-voter; the
// refusal is counted and listed. One at the group's version is added.
func TestOlderProtocolNotAdded(t *testing.T) {
	var nodes []*node
	for _, id := range []string{"m1", "m2", "m3"} {
		n := newNode(t, id, 3, time.Hour)
		n.version = 3
		nodes = append(nodes, n)
	}
	startAll(t, nodes, ring(nodes))
	testutil.WaitFor(t, waitTimeout, converged(nodes, voters("m1", "m2", "m3")))
	l := leader(t, nodes)
	old := newNode(t, "m4", 0, time.Hour)
	old.version = 2
	old.start([]string{l.gossipAddr()}, false)
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		n := l.ap.RefusalCounts()[RefusedOldProtocol]
		return n == 1, fmt.Sprintf("the leader to count one %s refusal, have %v", RefusedOldProtocol, l.ap.RefusalCounts())
	})
	if st := l.ap.Status(); len(st.Refused) != 1 || st.Refused[0].ID != "m4" || st.Refused[0].Reason != RefusedOldProtocol {
		t.Fatalf("Status().Refused = %+v", st.Refused)
	}
	counted := time.Now()
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		return l.ap.Status().LastReconcile.After(counted.Add(l.ap.cfg.ReconcileInterval)), "two reconcile rounds after the refusal"
	})
	if got := l.config(); got != voters("m1", "m2", "m3") {
		t.Fatalf("configuration %q after an older server joined the pool", got)
	}
	cur := newNode(t, "m5", 0, time.Hour)
	cur.version = 3
	cur.start([]string{l.gossipAddr()}, false)
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		got := l.config()
		return got == voters("m1", "m2", "m3", "m5"), fmt.Sprintf("m5 added and promoted, have %q", got)
	})
}
