package autopilot

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
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
func (r *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fakeFuture{cfg: raft.Configuration{Servers: slices.Clone(r.servers)}}
}
func (r *fakeRaft) BootstrapCluster(raft.Configuration) raft.Future {
	return fakeFuture{err: raft.ErrCantBootstrap}
}
func (r *fakeRaft) AddVoter(id raft.ServerID, addr raft.ServerAddress, _ uint64, _ time.Duration) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "add "+string(id)+"@"+string(addr))
	for i, s := range r.servers {
		if s.ID == id {
			r.servers[i] = raft.Server{ID: id, Address: addr, Suffrage: raft.Voter}
			return fakeFuture{}
		}
	}
	r.servers = append(r.servers, raft.Server{ID: id, Address: addr, Suffrage: raft.Voter})
	return fakeFuture{}
}
func (r *fakeRaft) RemoveServer(id raft.ServerID, _ uint64, _ time.Duration) raft.IndexFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "remove "+string(id))
	r.servers = slices.DeleteFunc(r.servers, func(s raft.Server) bool { return s.ID == id })
	return fakeFuture{}
}
func (r *fakeRaft) LeadershipTransfer() raft.Future   { return fakeFuture{} }
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

func TestReconcileRules(t *testing.T) {
	alive := membership.StateAlive
	r := &fakeRaft{servers: []raft.Server{voter("a", "addr-a"), voter("b", "addr-b"), voter("c", "addr-c")}}
	p := &fakePool{local: mgr("a", alive, 3, 0, true), joined: make(chan struct{})}
	ap := New(Config{DC: "dc1", NodeID: "a", DeadServerGrace: time.Hour, Logger: logging.TestLogger(t)}, r, p)
	check := func(step string, want ...string) {
		t.Helper()
		ap.reconcile()
		if got := r.takeCalls(); !slices.Equal(got, want) {
			t.Fatalf("%s: calls = %q; want %q", step, got, want)
		}
	}

	all := []membership.Member{mgr("a", alive, 3, 0, true), mgr("b", alive, 3, 0, true), mgr("c", alive, 3, 0, true)}
	p.set(all...)
	check("steady state")

	p.set(append(all, mgr("d", alive, 3, 0, false), mgr("e", alive, 3, 0, false),
		membership.Member{Name: "g", State: alive, Meta: membership.Meta{Role: membership.RoleGate, Datacenter: "dc1", NodeID: "g"}},
		membership.Member{Name: "x", State: alive, Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc2", NodeID: "x", RaftAddr: "addr-x"}},
	)...)
	check("new managers of dc1 become voters; gates and other DCs do not", "add d@addr-d", "add e@addr-e")

	moved := mgr("c", alive, 3, 0, true)
	moved.Meta.RaftAddr = "addr-c2"
	p.set(all[0], all[1], moved, mgr("d", alive, 3, 0, false), mgr("e", alive, 3, 0, false))
	check("a restarted manager's new address is taken", "add c@addr-c2")

	p.set(all[0], all[1], moved, departed("d", membership.StateLeft, 0), departed("e", membership.StateDead, time.Minute))
	check("left goes at once; failed waits for the grace period", "remove d")

	ap.cfg.DeadServerGrace = 30 * time.Second
	check("failed past the grace period, but raft still reaches it: kept")
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "e"}})
	check("failed past the grace period and unreachable goes", "remove e")

	// 3 voters a (leader), b, c: b and c fail. Removing either would leave
	// one alive voter of two: never.
	p.set(all[0], departed("b", membership.StateDead, time.Hour), departed("c", membership.StateDead, time.Hour))
	check("quorum protected")

	// The leader itself is never removed, even if the pool calls it failed.
	p.set(departed("a", membership.StateDead, time.Hour), all[1], moved)
	check("leader kept")

	// A voter the pool has never heard of (records lost on a restart) is
	// removed after the grace period, counted from when it was noticed.
	r.servers = append(r.servers, voter("ghost", "addr-ghost"))
	p.set(all[0], all[1], moved)
	check("ghost noticed")
	ap.absentSince["ghost"] = time.Now().Add(-time.Minute)
	check("ghost past the grace period, but raft reaches it: kept")
	ap.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "ghost"}})
	check("ghost removed", "remove ghost")
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
