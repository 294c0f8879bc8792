package managerd

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// operatorOf is the Operator service managerd serves on m (main.go), without
// gossip pools: the Raft and snapshot methods need none.
func operatorOf(t *testing.T, m *manager.Manager) operator {
	return operator{m: m, node: m.Config().NodeID, log: testutil.Logger(t), fed: &federation{}, pilot: autopilotOf(m)}
}

func submit(t *testing.T, m *manager.Manager, key string) *rpcpb.SubmitResponse {
	t.Helper()
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key, WaitMillis: 5000,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`)}}
	res, err := m.Submit(t.Context(), req)
	if err != nil || res.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit %s: %+v %v", key, res, err)
	}
	return res
}

// wantCode fails unless err is an *rpc.Error of code.
func wantCode(t *testing.T, what string, err error, code rpc.Code) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("%s: %v; want an error of code %s", what, err, code)
	}
}

// saved starts managers as opts says, admits key on the leader and saves a
// snapshot archive of its ledger: how every restore test begins.
func saved(t *testing.T, opts managertest.Options, key string) (*managertest.Cluster, *manager.Manager, operator, *bytes.Buffer) {
	t.Helper()
	c := managertest.Start(t, opts)
	m := c.Leader(t)
	submit(t, m, key)
	op := operatorOf(t, m)
	var archive bytes.Buffer
	if err := op.Snapshot(t.Context(), &archive); err != nil {
		t.Fatal(err)
	}
	return c, m, op, &archive
}

// TestRestoreRefusesAStateTheLedgerDoesNotRead: an archive whose checksums
// hold but whose state.bin the ledger refuses (another format version, as a
// newer build writes) is refused before raft.Restore, which would have
// stored it as the newest snapshot and then panicked when the ledger refused
// it: the leader stays up, leads, and keeps every acknowledged job.
func TestRestoreRefusesAStateTheLedgerDoesNotRead(t *testing.T) {
	c, m, op, archive := saved(t, managertest.Options{}, "k1")
	meta, state, err := readArchive(bytes.NewReader(archive.Bytes()), maxRestoreBytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		damage    func([]byte)
	}{
		{"a future format version", "k-version", func(b []byte) { b[8]++ }},  // the version byte after the magic
		{"a damaged CRC", "k-crc", func(b []byte) { b[len(b)-1] ^= 0xff }},   // the ledger's own CRC-32C
		{"another magic", "k-magic", func(b []byte) { copy(b, "NOTONCE!") }}, // not a ledger snapshot
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(state)
			tc.damage(bad)
			var forged bytes.Buffer
			if err := writeArchive(&forged, meta, bytes.NewReader(bad)); err != nil {
				t.Fatal(err)
			}
			wantCode(t, "restore", op.Restore(t.Context(), &forged), rpc.CodeInvalid)
			if l := c.Leader(t); l != m {
				t.Fatalf("the leader changed to %s", l.Config().NodeID)
			}
			submit(t, m, tc.key)
			if _, ok := m.FSM().Entry("t", "k1"); !ok {
				t.Fatal("the job admitted before the refused restore is gone")
			}
		})
	}
}

// TestRestoreKeepsTheArchivesJobs: a good archive restores, through the check
// above, every job admitted before it was saved, and none admitted after.
func TestRestoreKeepsTheArchivesJobs(t *testing.T) {
	c, m, op, archive := saved(t, managertest.Options{Managers: 3}, "before")
	submit(t, m, "after")
	// Seekable, as the file oncectl sends. A leader that loses its office
	// while its followers install the state (a loaded machine, these
	// short timings) answers that the restore is not confirmed (internal):
	// the followers hold it all the same, and the next leader keeps it.
	if err := op.Restore(t.Context(), bytes.NewReader(archive.Bytes())); err != nil {
		wantCode(t, "restore", err, rpc.CodeInternal)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, r := range c.Managers {
			_, before := r.FSM().Entry("t", "before")
			_, after := r.FSM().Entry("t", "after")
			if !before || after {
				return false, "every replica to hold the archive's job and not the later one"
			}
		}
		return true, ""
	})
}

// TestRestoreRefusesAnotherDatacentersArchive: an archive records the
// datacenter whose ledger it holds, and another datacenter's leader refuses
// it (its jobs would run a second time there); an archive that records none
// (written before it was recorded) is restored.
func TestRestoreRefusesAnotherDatacentersArchive(t *testing.T) {
	_, m, op, archive := saved(t, managertest.Options{}, "before")
	meta, state, err := readArchive(bytes.NewReader(archive.Bytes()), maxRestoreBytes)
	if err != nil {
		t.Fatal(err)
	}
	if dc := m.Config().Datacenter; meta.Datacenter != dc {
		t.Fatalf("the archive records datacenter %q, want %q", meta.Datacenter, dc)
	}
	submit(t, m, "after")
	rewrite := func(dc string) *bytes.Buffer {
		var b bytes.Buffer
		other := *meta
		other.Datacenter = dc
		if err := writeArchive(&b, &other, bytes.NewReader(state)); err != nil {
			t.Fatal(err)
		}
		return &b
	}
	err = op.Restore(t.Context(), rewrite("dc9"))
	wantCode(t, "restore of another datacenter's archive", err, rpc.CodeInvalid)
	if !strings.Contains(err.Error(), "dc9") {
		t.Fatalf("the refusal does not name the archive's datacenter: %v", err)
	}
	if _, ok := m.FSM().Entry("t", "after"); !ok {
		t.Fatal("the refused restore changed the ledger")
	}
	if err := op.Restore(t.Context(), rewrite("")); err != nil {
		t.Fatalf("restore of an archive that records no datacenter: %v", err)
	}
	if _, ok := m.FSM().Entry("t", "after"); ok {
		t.Fatal("the archive without a datacenter was not restored")
	}
}

// cancelAtEOF is an archive whose caller gives up (its context cancelled)
// as the last byte is read, before the manager has checked it.
type cancelAtEOF struct {
	r      *bytes.Buffer
	cancel context.CancelFunc
}

func (c cancelAtEOF) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.r.Len() == 0 {
		c.cancel()
	}
	return n, err
}

// TestRestoreAfterTheCallerLeftDoesNotHappen: oncectl reports a restore
// whose --timeout passed as failed; if its caller left before raft.Restore
// began, the ledger must be left as it was.
func TestRestoreAfterTheCallerLeftDoesNotHappen(t *testing.T) {
	_, m, op, archive := saved(t, managertest.Options{}, "before")
	submit(t, m, "after")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wantCode(t, "restore", op.Restore(ctx, cancelAtEOF{archive, cancel}), rpc.CodeUnavailable)
	if _, ok := m.FSM().Entry("t", "after"); !ok {
		t.Fatal("the restore happened after its caller left: the later job is gone")
	}
}

// TestRestoreNotConfirmedIsNotAnsweredUnavailable: a restore the leader
// installed but could not confirm (its followers cut off as raft.Restore
// read the state, so the entry after it never commits and the leader steps
// down) is not answered unavailable, which the caller retries by sending the
// archive again: the state may still reach the group, and a second restore
// would erase what was admitted after the first.
func TestRestoreNotConfirmedIsNotAnsweredUnavailable(t *testing.T) {
	var cut atomic.Pointer[func()]
	c, m, op, archive := saved(t, managertest.Options{Managers: 3, Knobs: manager.TestingKnobs{
		RestoreRead: func() {
			if f := cut.Load(); f != nil {
				(*f)()
			}
		},
	}}, "before")
	submit(t, m, "after")
	i := slices.Index(c.Managers, m)
	isolate := func() {
		c.Transports[i].DisconnectAll()
		for j, tr := range c.Transports {
			if j != i {
				tr.Disconnect(c.Transports[i].LocalAddr())
			}
		}
	}
	cut.Store(&isolate)
	err := op.Restore(t.Context(), bytes.NewReader(archive.Bytes()))
	wantCode(t, "restore installed on a leader cut off from its followers", err, rpc.CodeInternal)
	_, before := m.FSM().Entry("t", "before")
	_, after := m.FSM().Entry("t", "after")
	if !before || after {
		t.Fatalf("the leader's ledger holds the archive's job: %v, the later one: %v; want the archive's state installed", before, after)
	}
}

// groupMember is one manager of startGroup, with its membership side.
type groupMember struct {
	m    *manager.Manager
	ap   *autopilot.Autopilot
	stop func() // as on SIGTERM without leaving: the pool and Raft stop
}

// startGroup starts n managers as managerd does (gossip pool, autopilot
// bootstrap with MANAGER_BOOTSTRAP_EXPECT=n, Raft over TCP) and waits for a
// leader whose autopilot finds all n healthy.
func startGroup(t *testing.T, n int) []groupMember {
	t.Helper()
	var out []groupMember
	var seed string
	for i := range n {
		c := localConfig(t, fmt.Sprintf("m%d", i+1), n)
		c.DeadServerGrace = time.Hour // the autopilot removes no one while the test runs
		if seed != "" {
			c.Join = []string{seed}
		}
		seed = c.GossipAddr
		log := testutil.Logger(t).With("manager", c.NodeID)
		lan := &lanView{}
		m, err := manager.New(c, manager.Deps{Logger: log, Peers: lan, Clock: lan})
		if err != nil {
			t.Fatal(err)
		}
		cluster, err := startCluster(t.Context(), c, "", time.Now, m, lan, log)
		if err != nil {
			_ = m.Close()
			t.Fatal(err)
		}
		stop := sync.OnceFunc(func() {
			cluster.stop()
			_ = m.Close()
		})
		t.Cleanup(stop)
		out = append(out, groupMember{m: m, ap: cluster.ap, stop: stop})
	}
	groupLeader(t, out, n)
	return out
}

// groupLeader waits for the leader of g whose autopilot finds want servers
// healthy, and returns it.
func groupLeader(t *testing.T, g []groupMember, want int) *manager.Manager {
	t.Helper()
	var leader *manager.Manager
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		for _, x := range g {
			st, err := x.m.Status(t.Context())
			if err != nil || !st.IsLeader || st.Autopilot == nil {
				continue
			}
			healthy := 0
			for _, s := range st.Autopilot.Servers {
				if s.Healthy {
					healthy++
				}
			}
			if healthy == want {
				leader = x.m
				return true, ""
			}
		}
		return false, fmt.Sprintf("a leader whose autopilot finds %d managers healthy", want)
	})
	return leader
}

// TestRemovePeerKeepsAQuorum: with one of three managers dead, removing a
// live one would leave two voters, one of them dead: Raft could commit
// neither the removal nor anything after it, and nobody could be elected.
// It is refused, nothing changes and the leader still admits; removing the
// dead one is done, and the group keeps its leader.
func TestRemovePeerKeepsAQuorum(t *testing.T) {
	g := startGroup(t, 3)
	leader := groupLeader(t, g, 3)
	var dead, live *manager.Manager
	for _, x := range g {
		switch {
		case x.m == leader:
		case dead == nil:
			dead = x.m
			x.stop()
		default:
			live = x.m
		}
	}
	if l := groupLeader(t, g, 2); l != leader {
		t.Fatalf("the leader changed to %s", l.Config().NodeID)
	}
	op := operatorOf(t, leader)
	_, err := op.RemovePeer(t.Context(), live.Config().NodeID)
	wantCode(t, "remove the live follower", err, rpc.CodeInvalid)
	_, err = op.RemovePeer(t.Context(), leader.Config().NodeID)
	wantCode(t, "remove the leader", err, rpc.CodeInvalid)
	submit(t, leader, "after-refusals")
	if st, err := leader.Status(t.Context()); err != nil || len(st.Voters) != 3 {
		t.Fatalf("voters after the refusals: %+v %v", st, err)
	}

	res, err := op.RemovePeer(t.Context(), dead.Config().NodeID)
	if err != nil {
		t.Fatalf("remove the dead manager: %v", err)
	}
	t.Logf("%s, leader %s", res.Done, res.Leader)
	submit(t, leader, "after-removal")
	if st, err := leader.Status(t.Context()); err != nil || len(st.Voters) != 2 {
		t.Fatalf("voters after removing %s: %+v %v", dead.Config().NodeID, st, err)
	}
}

// TestRemovePeerKeepsAQuorumOfFive: with two of five managers dead, removing
// a live one would leave four voters of which two are healthy, fewer than
// the three a quorum of four needs; removing the leader likewise. Both are
// refused. The dead ones are removed one after the other (four voters, three
// healthy; then three, all healthy), and the group keeps its leader.
func TestRemovePeerKeepsAQuorumOfFive(t *testing.T) {
	g := startGroup(t, 5)
	leader := groupLeader(t, g, 5)
	var dead, live []*manager.Manager
	for _, x := range g {
		switch {
		case x.m == leader:
		case len(dead) < 2:
			dead = append(dead, x.m)
			x.stop()
		default:
			live = append(live, x.m)
		}
	}
	if l := groupLeader(t, g, 3); l != leader {
		t.Fatalf("the leader changed to %s", l.Config().NodeID)
	}
	op := operatorOf(t, leader)
	for _, m := range live {
		_, err := op.RemovePeer(t.Context(), m.Config().NodeID)
		wantCode(t, "remove the live follower "+m.Config().NodeID, err, rpc.CodeInvalid)
	}
	_, err := op.RemovePeer(t.Context(), leader.Config().NodeID)
	wantCode(t, "remove the leader", err, rpc.CodeInvalid)
	submit(t, leader, "after-refusals")
	if st, err := leader.Status(t.Context()); err != nil || len(st.Voters) != 5 {
		t.Fatalf("voters after the refusals: %+v %v", st, err)
	}

	for i, m := range dead {
		res, err := op.RemovePeer(t.Context(), m.Config().NodeID)
		if err != nil {
			t.Fatalf("remove the dead manager %s: %v", m.Config().NodeID, err)
		}
		t.Logf("%s, leader %s", res.Done, res.Leader)
		submit(t, leader, fmt.Sprintf("after-removal-%d", i))
		if st, err := leader.Status(t.Context()); err != nil || len(st.Voters) != 4-i {
			t.Fatalf("voters after removing %s: %+v %v", m.Config().NodeID, st, err)
		}
	}
}

// healthyFor is a voter's health by the leader's autopilot: raft-autopilot's
// last computed view (cached), and at this instant (now).
func healthyFor(t *testing.T, ap *autopilot.Autopilot, id string) (cached, now bool) {
	t.Helper()
	h := ap.Health()
	if h == nil {
		t.Fatal("the leader's autopilot has no health view")
	}
	for _, s := range h.Servers {
		if s.ID == id {
			cached = s.Healthy
		}
	}
	_, unhealthy := ap.UnhealthyNow()[raft.ServerID(id)]
	return cached, !unhealthy
}

// wantVoters fails unless m's configuration has n voters and m still admits.
func wantVoters(t *testing.T, m *manager.Manager, n int, key string) {
	t.Helper()
	submit(t, m, key)
	if st, err := m.Status(t.Context()); err != nil || len(st.Voters) != n {
		t.Fatalf("voters: %+v %v; want %d", st, err, n)
	}
}

// TestRemovePeerRightAfterAKill: a follower is killed and, as soon as the
// leader's heartbeats have failed to reach it past the threshold (well
// before raft-autopilot's next health update, every 2 s, says so), removing
// the other follower is asked for. It would leave two voters, one of them
// dead: refused, and the refusal names the leader alone as healthy. Before
// the check read the leader's view at this instant, raft-autopilot's last
// health still called the dead follower healthy, and the removal went
// through, leaving a group that could elect no leader.
func TestRemovePeerRightAfterAKill(t *testing.T) {
	g := startGroup(t, 3)
	leader := groupLeader(t, g, 3)
	var ap *autopilot.Autopilot
	var dead, live *manager.Manager
	for _, x := range g {
		switch {
		case x.m == leader:
			ap = x.ap
		case dead == nil:
			dead = x.m
		default:
			live = x.m
		}
	}
	for _, x := range g {
		if x.m == dead {
			x.stop()
		}
	}
	deadID := dead.Config().NodeID
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, now := healthyFor(t, ap, deadID)
		return !now, "the leader to find " + deadID + " unhealthy now"
	})
	_, err := operatorOf(t, leader).RemovePeer(t.Context(), live.Config().NodeID)
	cached, _ := healthyFor(t, ap, deadID)
	t.Logf("raft-autopilot's last health calls %s healthy: %v", deadID, cached)
	wantCode(t, "remove the live follower right after the kill", err, rpc.CodeInvalid)
	if want := "(" + leader.Config().NodeID + " healthy; " + deadID + " "; !strings.Contains(err.Error(), want) {
		t.Fatalf("the refusal does not say %q: %v", want, err)
	}
	wantVoters(t, leader, 3, "after-refusal")
}

// freshlyDead is the leader's autopilot, but for one voter that is
// unhealthy at this instant while raft-autopilot's last health still calls
// it healthy: how the leader sees a manager killed a moment ago.
type freshlyDead struct {
	*autopilot.Autopilot
	id string
}

func (f freshlyDead) UnhealthyNow() map[raft.ServerID]string {
	out := f.Autopilot.UnhealthyNow()
	out[raft.ServerID(f.id)] = "unreachable for 1s"
	return out
}

// TestRemovePeerCountsTheHealthNow: the quorum check counts a voter as
// healthy only if raft-autopilot's last health and the leader's view at
// this instant both say so. With all three cached as healthy and one
// follower unhealthy now, removing the other follower, or the leader, is
// refused; nothing changes.
func TestRemovePeerCountsTheHealthNow(t *testing.T) {
	g := startGroup(t, 3)
	leader := groupLeader(t, g, 3)
	var ap *autopilot.Autopilot
	var followers []string
	for _, x := range g {
		if x.m == leader {
			ap = x.ap
		} else {
			followers = append(followers, x.m.Config().NodeID)
		}
	}
	if cached, now := healthyFor(t, ap, followers[0]); !cached || !now {
		t.Fatalf("%s healthy: cached %v, now %v; want both", followers[0], cached, now)
	}
	op := operatorOf(t, leader)
	op.pilot = func() autopilotView { return freshlyDead{ap, followers[0]} }
	_, err := op.RemovePeer(t.Context(), followers[1])
	wantCode(t, "remove a follower while the other is dead now", err, rpc.CodeInvalid)
	if want := "(" + leader.Config().NodeID + " healthy; " + followers[0] + " unreachable for 1s)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("the refusal does not say %q: %v", want, err)
	}
	_, err = op.RemovePeer(t.Context(), leader.Config().NodeID)
	wantCode(t, "remove the leader while a follower is dead now", err, rpc.CodeInvalid)
	// Before raft-autopilot's first view (a new leader's term), the view
	// at this instant still counts.
	op.pilot = func() autopilotView { return noViewYet{freshlyDead{ap, followers[0]}} }
	_, err = op.RemovePeer(t.Context(), followers[1])
	wantCode(t, "remove a follower while the other is dead now, before the first health view", err, rpc.CodeInvalid)
	wantVoters(t, leader, 3, "after-refusals")
}

// noViewYet is an autopilot before raft-autopilot's first health view.
type noViewYet struct{ freshlyDead }

func (noViewYet) Health() *api.AutopilotHealth { return nil }

// A keyring call to a manager whose gossip pool is shut down (the manager
// is stopping) answers unavailable, so the client asks another manager: the
// step was applied nowhere, and the request was fine. (It was answered
// invalid, a definite answer the client returns to the operator as the
// request's fault.)
func TestKeyringOnAShutDownPoolIsUnavailable(t *testing.T) {
	p, err := membership.Start(t.Context(), membership.Config{
		NodeName: "m1", BindAddr: "127.0.0.1", Profile: membership.ProfileTest, Logger: testutil.Logger(t),
		SecretKey: bytes.Repeat([]byte{1}, 32),
		Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc1", NodeID: "m1",
			RPCAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2", Version: manager.ProtocolVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(); err != nil {
		t.Fatal(err)
	}
	fed := &federation{wan: p}
	fed.lan.Store(p)
	op := operator{node: "m1", log: testutil.Logger(t), fed: fed}
	for _, pool := range []string{rpc.PoolLAN, rpc.PoolWAN} {
		_, err := op.Keyring(t.Context(), &rpcpb.KeyringRequest{Op: "list", Pool: pool})
		wantCode(t, pool+" list", err, rpc.CodeUnavailable)
		_, err = op.Keyring(t.Context(), &rpcpb.KeyringRequest{Op: "install", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)), Pool: pool})
		wantCode(t, pool+" install", err, rpc.CodeUnavailable)
	}
}

// TestForgetDatacenterWaitsForItToLeaveTheFederation: dc1's leader owes dc2
// a submission. While dc2's manager is alive in the WAN pool, forgetting dc2
// is refused (invalid, naming it and saying how to take it out), and so is
// forgetting dc1 itself; nothing is recorded. Once dc2's manager has left
// the pool, the submission is forgotten, and the outbox carries nothing. A
// second forget of dc2, still in the federation view, forgets 0; dc9, in
// neither the view nor the outbox (a typo), is refused not_found, naming
// the datacenters of the view.
func TestForgetDatacenterWaitsForItToLeaveTheFederation(t *testing.T) {
	c := managertest.Start(t, managertest.Options{})
	m := c.Leader(t)
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "both", Fingerprint: "fp",
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}}
	if r, err := m.Submit(t.Context(), req); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit: %+v %v", r, err)
	}
	f1 := startWAN(t, "dc1", func(*manager.Config) {})
	f2 := startWAN(t, "dc2", func(c *manager.Config) { c.RPCAdvertise = "127.0.0.1:7201" }, f1.wan.Addr())
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		return len(f1.wan.Managers("dc2")) == 1, "dc1 to see dc2's manager alive"
	})
	op := operatorOf(t, m)
	op.fed = f1
	_, err := op.ForgetDatacenter(t.Context(), "dc2")
	wantCode(t, "forget dc2 with its manager alive", err, rpc.CodeInvalid)
	if !strings.Contains(err.Error(), "alive") || !strings.Contains(err.Error(), "stop its managers") {
		t.Fatalf("forget dc2 with its manager alive: %v; want it to say so, and how to take dc2 out", err)
	}
	_, err = op.ForgetDatacenter(t.Context(), "dc1")
	wantCode(t, "forget dc1 at dc1", err, rpc.CodeInvalid)
	if !strings.Contains(err.Error(), "this datacenter") {
		t.Fatalf("forget dc1 at dc1: %v; want it refused as this datacenter", err)
	}
	if n := m.FSM().OutboxLen(); n != 1 {
		t.Fatalf("the outbox carries %d entries after the refusals, want 1", n)
	}

	f2.stop() // dc2's manager stops: it leaves the WAN pool
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		return len(f1.wan.Managers("dc2")) == 0, "dc1 to see dc2's manager gone"
	})
	res, err := op.ForgetDatacenter(t.Context(), "dc2")
	if err != nil || res.Pairs != 1 || res.Datacenter != "dc2" {
		t.Fatalf("forget dc2 gone: %+v, %v; want 1 pair", res, err)
	}
	if n := m.FSM().OutboxLen(); n != 0 {
		t.Fatalf("the outbox carries %d entries after dc2 was forgotten, want 0", n)
	}
	if res, err := op.ForgetDatacenter(t.Context(), "dc2"); err != nil || res.Pairs != 0 {
		t.Fatalf("forget dc2 again: %+v, %v; want 0 pairs", res, err)
	}
	_, err = op.ForgetDatacenter(t.Context(), "dc9")
	wantCode(t, "forget dc9, unknown", err, rpc.CodeNotFound)
	if !strings.Contains(err.Error(), "(dc1, dc2)") {
		t.Fatalf("forget dc9, unknown: %v; want it to name dc1 and dc2", err)
	}
}
