package autopilot

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftautopilot "github.com/hashicorp/raft-autopilot"

	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/testutil"
)

// fakeRaft is a leader whose configuration changes apply at once; it records
// the calls. Real raft is used in cluster_test.go; this one makes the
// reconcile rules (grace, quorum, address update) exact and fast to check.
type fakeRaft struct {
	mu      sync.Mutex
	servers []raft.Server
	calls   []string
}

type fakeFuture struct {
	err error
	cfg raft.Configuration
}

func (f fakeFuture) Error() error                      { return f.err }
func (f fakeFuture) Index() uint64                     { return 1 }
func (f fakeFuture) Configuration() raft.Configuration { return f.cfg }

func (r *fakeRaft) State() raft.RaftState { return raft.Leader }
func (r *fakeRaft) LastIndex() uint64     { return 10 }
func (r *fakeRaft) CurrentTerm() uint64   { return 2 }
func (r *fakeRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	return "addr-a", "a"
}
func (r *fakeRaft) Leader() raft.ServerAddress      { return "addr-a" }
func (r *fakeRaft) Stats() map[string]string        { return map[string]string{"last_log_term": "2"} }
func (r *fakeRaft) LeadershipTransfer() raft.Future { return fakeFuture{} }
func (r *fakeRaft) LeadershipTransferToServer(raft.ServerID, raft.ServerAddress) raft.Future {
	return fakeFuture{}
}
func (r *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fakeFuture{cfg: raft.Configuration{Servers: slices.Clone(r.servers)}}
}
func (r *fakeRaft) BootstrapCluster(raft.Configuration) raft.Future {
	return fakeFuture{err: raft.ErrCantBootstrap}
}
func (r *fakeRaft) set(call string, srv raft.Server) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call+" "+string(srv.ID)+"@"+string(srv.Address))
	for i, s := range r.servers {
		if s.ID == srv.ID {
			r.servers[i] = srv
			return fakeFuture{}
		}
	}
	r.servers = append(r.servers, srv)
	return fakeFuture{}
}
func (r *fakeRaft) AddVoter(id raft.ServerID, addr raft.ServerAddress, _ uint64, _ time.Duration) raft.IndexFuture {
	return r.set("add", raft.Server{ID: id, Address: addr, Suffrage: raft.Voter})
}
func (r *fakeRaft) AddNonvoter(id raft.ServerID, addr raft.ServerAddress, _ uint64, _ time.Duration) raft.IndexFuture {
	return r.set("addnv", raft.Server{ID: id, Address: addr, Suffrage: raft.Nonvoter})
}
func (r *fakeRaft) DemoteVoter(id raft.ServerID, _ uint64, _ time.Duration) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "demote "+string(id))
	return fakeFuture{}
}
func (r *fakeRaft) RemoveServer(id raft.ServerID, _ uint64, _ time.Duration) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "remove "+string(id))
	r.servers = slices.DeleteFunc(r.servers, func(s raft.Server) bool { return s.ID == id })
	return fakeFuture{}
}
func (r *fakeRaft) RegisterObserver(*raft.Observer)   {}
func (r *fakeRaft) DeregisterObserver(*raft.Observer) {}

func (r *fakeRaft) takeCalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

type fakePool struct {
	mu      sync.Mutex
	local   membership.Member
	members []membership.Member
	joined  chan struct{}
}

func (p *fakePool) LocalNode() membership.Member { p.mu.Lock(); defer p.mu.Unlock(); return p.local }
func (p *fakePool) Members() []membership.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.members)
}
func (p *fakePool) Joined() <-chan struct{} { return p.joined }
func (p *fakePool) Subscribe() (<-chan membership.Event, func()) {
	return make(chan membership.Event), func() {}
}
func (p *fakePool) ModifyMeta(fn func(*membership.Meta)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.local.Meta)
	return nil
}
func (p *fakePool) Leave(time.Duration) error { return nil }

func (p *fakePool) set(ms ...membership.Member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = ms
}

func voter(id, addr string) raft.Server {
	return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter}
}

func departed(id string, state membership.State, ago time.Duration) membership.Member {
	m := mgr(id, state, 3, 0, true)
	m.LastSeen = time.Now().Add(-ago)
	return m
}

// candidates is what raft-autopilot hands the promoter: the servers of the
// configuration that KnownServers reports as not alive.
func candidates(t *testing.T, ap *Autopilot, r *fakeRaft) *raftautopilot.FailedServers {
	t.Helper()
	var f raftautopilot.FailedServers
	known := (*delegate)(ap).KnownServers()
	for _, s := range r.GetConfiguration().Configuration().Servers {
		k, ok := known[s.ID]
		if !ok {
			t.Fatalf("KnownServers misses %s of the configuration", s.ID)
		}
		if k.NodeStatus != raftautopilot.NodeAlive {
			if s.Suffrage == raft.Voter {
				f.FailedVoters = append(f.FailedVoters, k)
			} else {
				f.FailedNonVoters = append(f.FailedNonVoters, k)
			}
		}
	}
	return &f
}

func allowedIDs(f *raftautopilot.FailedServers) []string {
	var out []string
	for _, s := range slices.Concat(f.FailedNonVoters, f.FailedVoters) {
		out = append(out, string(s.ID))
	}
	for _, id := range slices.Concat(f.StaleNonVoters, f.StaleVoters) {
		out = append(out, string(id))
	}
	return out
}

// TestJoinRules: the leader adds alive managers of its datacenter
// (raft-autopilot's AddServer: as non-voters, promoted once healthy) and
// takes a restarted voter's new address at once, as a voter.
func TestJoinRules(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", DeadServerGrace: time.Hour, Logger: testutil.Logger(t)}, r, p)
	check := func(step string, want ...string) {
		t.Helper()
		ap.addServers()
		if got := r.takeCalls(); !slices.Equal(got, want) {
			t.Fatalf("%s: calls = %q; want %q", step, got, want)
		}
	}
	all := []membership.Member{mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true)}
	p.set(all...)
	check("steady state")

	leaving := mgr("f", alive, 3, 0, false)
	leaving.Meta.Leaving = true
	p.set(append(all, mgr("d", alive, 3, 0, false), mgr("e", alive, 3, 0, false), leaving,
		departed("h", membership.StateDead, 0),
		membership.Member{Name: "g", State: alive, Meta: membership.Meta{Role: membership.RoleGate, Datacenter: "dc1", NodeID: "g"}},
		membership.Member{Name: "x", State: alive, Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc2", NodeID: "x", RaftAddr: "addr-x"}},
	)...)
	check("new alive managers of dc1 join as non-voters; leaving, dead, gates and other DCs do not",
		"addnv d@addr-d", "addnv e@addr-e")
	check("added once")

	moved := mgr("c", alive, 3, 0, true)
	moved.Meta.RaftAddr = "addr-c2"
	p.set(all[0], all[1], moved, mgr("d", alive, 3, 0, false), mgr("e", alive, 3, 0, false))
	check("a restarted voter's new address is taken at once, as a voter", "add c@addr-c2")

	// d and e left: removed at once, here rather than by raft-autopilot's
	// pruning, which never removes one of two voters.
	p.set(all[0], all[1], moved, departed("d", membership.StateLeft, 0), departed("e", membership.StateLeft, 0))
	check("managers that left are removed at once", "remove d", "remove e")
	r.servers = []raft.Server{voter("a", "addr-a"), voter("b", "addr-b")}
	p.set(all[0], departed("b", membership.StateLeft, 0))
	check("a follower leaving a two-voter group is removed", "remove b")
	r.servers = []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c")}
	p.set(all[0], departed("b", membership.StateDead, time.Hour), departed("c", membership.StateLeft, 0))
	check("but not when the alive voters would be a minority")
}

// TestRemovalRules: of raft-autopilot's removal candidates, the leader lets
// through a left server at once, a failed or unknown one after the grace
// period and only when raft cannot reach it either, never itself, and never
// a voter whose removal leaves the alive voters short of a majority.
func TestRemovalRules(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c"),
		voter("d", "addr-d"), voter("e", "addr-e")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", DeadServerGrace: time.Hour, Logger: testutil.Logger(t)}, r, p)
	now := time.Now()
	check := func(step string, want ...string) {
		t.Helper()
		got := allowedIDs(ap.allowRemovals(candidates(t, ap, r), now))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: allowed %q; want %q", step, got, want)
		}
	}
	all := []membership.Member{mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true)}
	p.set(append(all, mgr("d", alive, 3, 0, true), mgr("e", alive, 3, 0, true))...)
	check("steady state")

	p.set(append(all, departed("d", membership.StateLeft, 0), departed("e", membership.StateDead, time.Minute))...)
	check("left goes at once; failed waits for the grace period", "d")
	r.RemoveServer("d", 0, 0)
	r.takeCalls()

	ap.cfg.DeadServerGrace = 30 * time.Second
	check("failed past the grace period, but raft still reaches it: kept")
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "e", LastContact: now.Add(-time.Minute)}})
	check("failed past the grace period and unreachable goes", "e")
	r.RemoveServer("e", 0, 0)
	r.takeCalls()

	// 3 voters a (leader), b, c: b and c fail. Removing either would leave
	// one alive voter of two: never.
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "b"}})
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "c"}})
	p.set(all[0], departed("b", membership.StateDead, time.Hour), departed("c", membership.StateDead, time.Hour))
	check("quorum protected")

	// The leader itself is never removed, even if the pool calls it failed.
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "a"}})
	p.set(departed("a", membership.StateDead, time.Hour), all[1], all[2])
	check("leader kept")

	// A voter the pool has never heard of (records lost on a restart) is
	// removed after the grace period, counted from when it was noticed.
	r.servers = append(r.servers, voter("ghost", "addr-ghost"))
	p.set(all...)
	// b and c are back: raft reaches them again (a voter raft fails to
	// reach does not count as alive, whatever the pool says).
	ap.observe(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "b"}})
	ap.observe(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "c"}})
	check("ghost noticed")
	now = now.Add(time.Minute)
	check("ghost past the grace period, but raft reaches it: kept")
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "ghost"}})
	check("ghost removed", "ghost")
	if got := r.takeCalls(); len(got) != 0 {
		t.Fatalf("the filter changed the configuration itself: %q", got)
	}
}

// TestHealth: raft-autopilot's state, computed over this package's
// delegate: a server is healthy while alive in the pool and reached by the
// leader's heartbeats; the failure tolerance counts the healthy voters
// beyond a majority.
func TestHealth(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c"),
		voter("d", "addr-d"), voter("e", "addr-e")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", Logger: testutil.Logger(t)}, r, p)
	p.set(mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true),
		mgr("d", alive, 3, 0, true), departed("e", membership.StateDead, time.Minute))
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "d", LastContact: time.Now().Add(-time.Minute)}})

	st, err := ap.lib.ComputeState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	(*delegate)(ap).NotifyState(st)
	h := ap.Health()
	if h == nil {
		t.Fatal("no health after NotifyState")
	}
	var got []string
	for _, s := range h.Servers {
		got = append(got, fmt.Sprintf("%s:%s:%s:%v", s.ID, s.Status, s.RaftState, s.Healthy))
	}
	want := []string{"a:alive:leader:true", "b:alive:voter:true", "c:alive:voter:true",
		"d:alive:voter:false", "e:failed:voter:false"}
	if !slices.Equal(got, want) {
		t.Fatalf("servers = %q; want %q", got, want)
	}
	if h.Healthy || h.FailureTolerance != 0 {
		t.Fatalf("healthy %v, failure tolerance %d; want false, 0 (3 healthy voters of 5)", h.Healthy, h.FailureTolerance)
	}

	ap.observe(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "d"}})
	if st, err = ap.lib.ComputeState(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st.FailureTolerance != 1 || !st.Servers["d"].Health.Healthy {
		t.Fatalf("after d is reached again: tolerance %d, d healthy %v; want 1, true", st.FailureTolerance, st.Servers["d"].Health.Healthy)
	}
}

// TestUnhealthyNow: raft-autopilot's health is as of its last update; what
// the leader knows at this instant says more. A voter whose heartbeats have
// failed for longer than LastContactThreshold, or that the pool no longer has
// alive and not leaving, is unhealthy now while Health still calls it
// healthy; one whose heartbeats failed within the threshold, or resumed, is
// not, and the leader never is.
func TestUnhealthyNow(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c"),
		voter("d", "addr-d"), voter("e", "addr-e")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", LastContactThreshold: time.Hour, Logger: testutil.Logger(t)}, r, p)
	all := []membership.Member{mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true),
		mgr("d", alive, 3, 0, true), mgr("e", alive, 3, 0, true)}
	p.set(all...)
	st, err := ap.lib.ComputeState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	(*delegate)(ap).NotifyState(st)
	// check compares UnhealthyNow with want, whose reasons are prefixes (a
	// duration goes on counting).
	check := func(step string, want map[raft.ServerID]string) {
		t.Helper()
		got := ap.UnhealthyNow()
		ok := len(got) == len(want)
		for id, reason := range want {
			ok = ok && strings.HasPrefix(got[id], reason)
		}
		if !ok {
			t.Fatalf("%s: unhealthy now %q; want %q", step, got, want)
		}
	}
	check("all alive and reached", map[raft.ServerID]string{})

	now := time.Now()
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "b", LastContact: now}})
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "c", LastContact: now.Add(-2 * time.Hour)}})
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "a", LastContact: now.Add(-2 * time.Hour)}})
	leaving := mgr("e", alive, 3, 0, true)
	leaving.Meta.Leaving = true
	p.set(all[0], all[1], all[2], departed("d", membership.StateDead, 0), leaving)
	r.mu.Lock()
	r.servers = append(r.servers, voter("ghost", "addr-ghost"))
	r.mu.Unlock()
	for _, s := range ap.Health().Servers {
		if !s.Healthy {
			t.Fatalf("the cached health changed without an update: %+v", s)
		}
	}
	check("c unreached past the threshold, d dead, e leaving, ghost unknown to the pool", map[raft.ServerID]string{
		"c": "unreachable for 2h0m", "d": "pool status dead", "e": "leaving the pool", "ghost": "absent from the pool",
	})

	ap.observe(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "c"}})
	p.set(all...)
	r.mu.Lock()
	r.servers = r.servers[:5]
	r.mu.Unlock()
	check("c reached again, d and e alive, ghost gone", map[raft.ServerID]string{})
}

// TestReaddedServerIsHealthy: a server whose heartbeats failed, removed from
// the configuration and added again, starts a new replication. Raft reports a
// resumed heartbeat only after a failure of the same replication, so the new
// one's success says nothing: the failure of the old one must not keep the
// server unhealthy (never promoted to voter).
func TestReaddedServerIsHealthy(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", Logger: testutil.Logger(t)}, r, p)
	p.set(mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true))
	healthy := func() bool {
		t.Helper()
		st, err := ap.lib.ComputeState(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return st.Servers["c"].Health.Healthy
	}

	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "c", LastContact: time.Now().Add(-time.Minute)}})
	if healthy() {
		t.Fatal("c healthy while the heartbeats fail to reach it")
	}
	c := voter("c", "addr-c")
	ap.observe(raft.Observation{Data: raft.PeerObservation{Peer: c, Removed: true}})
	ap.observe(raft.Observation{Data: raft.PeerObservation{Peer: c, Removed: false}})
	if !healthy() {
		t.Fatal("c unhealthy after it was added again, on the failure of its earlier replication")
	}

	// Were the observation of its removal dropped (the observer does not
	// block raft), the removal filter forgets the failure of a server that
	// is no longer in the configuration.
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "c", LastContact: time.Now().Add(-time.Minute)}})
	r.mu.Lock()
	r.servers = r.servers[:2]
	r.mu.Unlock()
	ap.allowRemovals(&raftautopilot.FailedServers{}, time.Now())
	r.mu.Lock()
	r.servers = append(r.servers, c)
	r.mu.Unlock()
	if !healthy() {
		t.Fatal("c unhealthy after it was added again, on a failure before its removal")
	}
}

func TestRunRefusesMismatchedConfig(t *testing.T) {
	p := &fakePool{local: mgr("a", membership.StateAlive, 3, 0, false), joined: make(chan struct{})}
	cases := []Config{
		{DC: "dc1"},
		{DC: "dc1", NodeID: "b"},
		{DC: "dc2", NodeID: "a"},
		{DC: "dc1", NodeID: "a", BootstrapExpect: -1},
	}
	for _, c := range cases {
		err := New(c, &fakeRaft{}, p).Run(t.Context())
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: Run = %v; want ErrInvalidConfig", c, err)
		}
	}
}
