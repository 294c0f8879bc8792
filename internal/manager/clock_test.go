package manager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/clockwatch"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// newSkewedCluster starts len(skews) managers, manager i with a clock skews[i]
// off the real one (its Deps.Now), each with a membership pool on loopback
// whose clock is the same skewed one, so the offsets are measured as in
// production: on memberlist's probes.
func newSkewedCluster(t *testing.T, skews []time.Duration, tweak func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	base := t.TempDir()
	for i := range skews {
		c := DefaultConfig()
		c.NodeID = fmt.Sprintf("m%d", i+1)
		c.DataDir = filepath.Join(base, c.NodeID)
		c.RaftAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		c.RaftAdvertise = c.RaftAddr
		c.RPCAddr = "rpc-" + c.NodeID
		c.RPCAdvertise = c.RPCAddr
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.ElectionTimeout = 500 * time.Millisecond
		c.LeaderLeaseTimeout = 250 * time.Millisecond
		if tweak != nil {
			tweak(&c)
		}
		tc.cfgs = append(tc.cfgs, c)
	}
	tc.mgrs = make([]*Manager, len(skews))
	t.Cleanup(tc.closeAll)
	for _, c := range tc.cfgs {
		tc.peers.Set(c.NodeID, Peer{RPCAddr: c.RPCAdvertise})
	}
	var seed string
	for i, skew := range skews {
		sk := new(atomic.Int64)
		sk.Store(int64(skew))
		tc.skew = append(tc.skew, sk)
		now := func() time.Time { return time.Now().Add(time.Duration(sk.Load())) }
		log := testutil.Logger(t).With("m", i+1)
		pcfg := membership.Config{
			NodeName: tc.cfgs[i].NodeID,
			BindAddr: "127.0.0.1",
			Profile:  membership.ProfileTest,
			Logger:   log,
			Now:      now,
			Meta: membership.Meta{Role: membership.RoleManager, Datacenter: tc.cfgs[i].Datacenter,
				NodeID: tc.cfgs[i].NodeID, RPCAddr: "127.0.0.1:1", RaftAddr: tc.cfgs[i].RaftAdvertise, Version: 1},
		}
		if seed != "" {
			pcfg.Seeds = []string{seed}
		}
		ctx, cancel := context.WithCancel(context.Background())
		pool, err := membership.Start(ctx, pcfg)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cancel()
			if err := pool.Shutdown(); err != nil {
				t.Errorf("pool shutdown: %v", err)
			}
		})
		if seed == "" {
			seed = pool.Addr()
		}
		m, err := New(tc.cfgs[i], Deps{Logger: log, Now: now, Clock: pool, Peers: &tc.peers})
		if err != nil {
			t.Fatalf("start %s: %v", tc.cfgs[i].NodeID, err)
		}
		tc.mgrs[i] = m
	}
	var servers []raft.Server
	for _, c := range tc.cfgs {
		servers = append(servers, raft.Server{ID: raft.ServerID(c.NodeID), Address: raft.ServerAddress(c.RaftAdvertise)})
	}
	if err := tc.mgrs[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	tc.leader()
	return tc
}

// lead makes manager i the serving leader (transferring leadership to it as
// often as needed) and runs fn there; fn returning a NotLeader or Unavailable
// error (leadership moved meanwhile) starts over.
func (tc *testCluster) lead(ctx context.Context, i int, fn func() error) {
	tc.t.Helper()
	for {
		testutil.WaitFor(tc.t, 20*time.Second, func() (bool, string) {
			if tc.mgrs[i].CheckLeader() == nil {
				return true, fmt.Sprintf("%s to lead", tc.cfgs[i].NodeID)
			}
			if l := tc.leaderNow(); l >= 0 && l != i {
				// An error (a transfer in flight) is retried on the next poll.
				_ = tc.mgrs[l].raft.LeadershipTransferToServer(raft.ServerID(tc.cfgs[i].NodeID), raft.ServerAddress(tc.cfgs[i].RaftAdvertise)).Error()
			}
			return tc.mgrs[i].CheckLeader() == nil, fmt.Sprintf("%s to lead", tc.cfgs[i].NodeID)
		})
		err := fn()
		if errors.Is(err, rpc.ErrNotLeader) || errors.Is(err, rpc.ErrUnavailable) {
			continue
		}
		if err != nil {
			tc.t.Fatal(err)
		}
		if ctx.Err() != nil {
			tc.t.Fatal(ctx.Err())
		}
		return
	}
}

// TestSkewedClocksCannotExpireEarly runs a group whose managers' clocks are
// right, 10 minutes ahead and 10 minutes behind, and makes each of them lead
// in turn. Before ledger time, the manager ahead expired every committed key
// (IDEMPOTENCY_COMMITTED_TTL_SECONDS is 5 minutes): a retry was committed
// again with a new job ID, and GetJob answered 404.
func TestSkewedClocksCannotExpireEarly(t *testing.T) {
	const ttl = 5 * time.Minute
	skews := []time.Duration{0, 10 * time.Minute, -10 * time.Minute}
	tc := newSkewedCluster(t, skews, func(c *Config) {
		c.Idempotency.CommittedTTL = ttl
		c.JobRetention = ttl
		c.Idempotency.CleanupInterval = time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Every manager measures the others and sees itself as the group does.
	const tolerance = 500 * time.Millisecond
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		for i, m := range tc.mgrs {
			v := m.ClockState().View
			if !v.Known || v.Measured != 3 {
				return false, "every manager to measure its group"
			}
			// The group's clock is the right one: this one's offset is -skew.
			if d := v.Offset + skews[i]; d < -tolerance || d > tolerance {
				return false, "every manager to measure its group"
			}
		}
		return true, "every manager to measure its group"
	})
	if st, _ := tc.mgrs[1].Status(ctx); !st.ClockClamped || st.ClockGroupOffset == nil || *st.ClockGroupOffset < 590 || len(st.ClockOffsets) != 2 {
		t.Fatalf("status of the manager ahead: %+v", st)
	}
	if st, _ := tc.mgrs[0].Status(ctx); st.ClockClamped {
		t.Fatalf("the right clock is clamped: %+v", st)
	}

	// checkNear fails unless a time the ledger stamped is within 2s of the
	// real clock's reading at.
	checkNear := func(what string, stamped, at time.Time) {
		t.Helper()
		if d := stamped.Sub(at); d < -2*time.Second || d > 2*time.Second {
			t.Fatalf("%s: stamped %v, real %v (off by %v)", what, stamped, at, d)
		}
	}
	type sub struct {
		key, job string
		at       time.Time // real time of the first submission
	}
	var subs []sub
	// tried holds when each key was first sent: tc.lead sends it again
	// after a not_leader or unavailable answer, and the first attempt may
	// have committed all the same, so a replay then is the right answer.
	tried := map[string]time.Time{}
	submit := func(i int, key string) error {
		at, retry := tried[key]
		if !retry {
			at = time.Now()
			tried[key] = at
		}
		r, err := tc.submit(ctx, i, "t", key, "fp", "demo", `1`, 0)
		if err != nil {
			return err
		}
		if r.Outcome != rpc.OutcomeCommitted || (r.Replayed && !retry) || r.Job == nil {
			return fmt.Errorf("first submission of %s at %s: %+v", key, tc.cfgs[i].NodeID, r)
		}
		created, err := time.Parse(api.TimeFormat, r.Job.CreatedAt)
		if err != nil {
			return fmt.Errorf("created_at %q: %w", r.Job.CreatedAt, err)
		}
		checkNear(key+" created_at at "+tc.cfgs[i].NodeID, created, at)
		checkNear(key+" expires_at at "+tc.cfgs[i].NodeID, respExpiresAt(r).Add(-ttl), at)
		subs = append(subs, sub{key, r.JobId, at})
		return nil
	}
	l := tc.leader()
	for k := 0; k < 8; k++ {
		tc.lead(ctx, l, func() error { return submit(l, fmt.Sprintf("k%d", k)) })
	}

	var lastLedgerTime int64
	for _, target := range []int{1, 2, 0} {
		name := tc.cfgs[target].NodeID
		tc.lead(ctx, target, func() error {
			// A retry of every key replays its job, at the skewed leader.
			for _, s := range subs {
				r, err := tc.submit(ctx, target, "t", s.key, "fp", "demo", `1`, 0)
				if err != nil {
					return err
				}
				if !r.Replayed || r.JobId != s.job {
					t.Fatalf("retry of %s at %s: job %s (replayed %v), want %s: expired early", s.key, name, r.JobId, r.Replayed, s.job)
				}
				checkNear(s.key+" expires_at replayed at "+name, respExpiresAt(r).Add(-ttl), s.at)
				j, err := tc.mgrs[target].GetJob(ctx, "t", s.job)
				if err != nil {
					return fmt.Errorf("GetJob %s at %s: %w", s.job, name, err)
				}
				if j.IdempotencyKey != s.key {
					t.Fatalf("GetJob %s: %+v", s.job, j)
				}
			}
			// A new key is stamped with the real time.
			return submit(target, "new-at-"+name)
		})
		for i, m := range tc.mgrs {
			if lt := m.FSM().LedgerTime(); i == target && lt < lastLedgerTime {
				t.Fatalf("ledger time went back at %s: %d < %d", name, lt, lastLedgerTime)
			}
		}
		lastLedgerTime = tc.mgrs[target].FSM().LedgerTime()
		checkNear("ledger time after "+name+" led", time.Unix(0, lastLedgerTime), time.Now())
		if skews[target] != 0 {
			// The skewed leader hands leadership to the manager whose clock
			// agrees with the group's (perhaps already while it served the
			// retries above, after which tc.lead took it back).
			testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
				if tc.mgrs[target].ClockState().Handoffs > 0 {
					return true, name + " to hand leadership over"
				}
				// An election on a loaded machine may have taken leadership
				// away before the handoff was due: give it back.
				if l := tc.leaderNow(); l >= 0 && l != target {
					_ = tc.mgrs[l].raft.LeadershipTransferToServer(raft.ServerID(name), raft.ServerAddress(tc.cfgs[target].RaftAdvertise)).Error()
				}
				return false, name + " to hand leadership over"
			})
			if to := tc.mgrs[target].ClockState().HandoffTo; to != "m1" {
				t.Fatalf("%s handed leadership to %s, want m1 (the only clock that agrees with the group's)", name, to)
			}
		}
	}

	// Nothing expired, on any manager, and no key got a second job.
	tc.waitFSMsApplied()
	for _, m := range tc.mgrs {
		if st := m.FSM().Stats(); st.Entries != len(subs) || st.Jobs != len(subs) || st.Committed != len(subs) {
			t.Fatalf("%s: %+v, want %d committed entries and jobs", m.cfg.NodeID, st, len(subs))
		}
		for _, s := range subs {
			if e, ok := m.FSM().Entry("t", s.key); !ok || e.JobID != s.job {
				t.Fatalf("%s: entry %s: %+v %v", m.cfg.NodeID, s.key, e, ok)
			}
		}
	}
}

// fakeClockSource reports fixed offsets.
type fakeClockSource struct {
	mu   sync.Mutex
	offs []membership.PeerOffset
}

func (f *fakeClockSource) ClockOffsets() []membership.PeerOffset {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]membership.PeerOffset(nil), f.offs...)
}

// TestUnmeasuredLeaderCannotPullTimeAhead: a leader whose clock jumps 10
// minutes ahead before it has measured any peer (just after a restart, say)
// does not move ledger time ahead of the last stamp by more than the real time
// elapsed, so it cannot expire anything early either.
func TestUnmeasuredLeaderCannotPullTimeAhead(t *testing.T) {
	var mu sync.Mutex
	skew := time.Duration(0)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Idempotency.CommittedTTL = 5 * time.Minute
		c.JobRetention = 5 * time.Minute
		c.Idempotency.CleanupInterval = time.Second
		c.ApplyTimeout = time.Second // how long an unsure leader waits for the view
	})
	tc.setNow(func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(skew) })
	ctx := ctxT(t)
	l := tc.leader()
	r, err := tc.submit(ctx, l, "t", "k", "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r, err)
	}
	// From now on every manager has a clock source that has measured nobody:
	// its view of the group is unknown.
	for _, m := range tc.mgrs {
		m.setClockSource(&fakeClockSource{})
	}
	mu.Lock()
	skew = 10 * time.Minute
	mu.Unlock()
	// A new term (so the leader anchors on the ledger's time).
	nl := (l + 1) % 3
	tc.lead(ctx, nl, func() error { return nil })
	if v := tc.mgrs[nl].ClockState().View; v.Known || v.Voters != 3 {
		t.Fatalf("%s: view known without samples: %+v", tc.cfgs[nl].NodeID, v)
	}
	start := time.Now()
	r2, err := tc.submit(ctx, nl, "t", "k2", "fp", "demo", `1`, 0)
	if err != nil || r2.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r2, err)
	}
	created, _ := time.Parse(api.TimeFormat, r2.Job.CreatedAt)
	if d := created.Sub(start); d > 5*time.Second {
		t.Fatalf("an unmeasured leader stamped %v ahead of real time", d)
	}
	if r, err := tc.submit(ctx, nl, "t", "k", "fp", "demo", `1`, 0); err != nil || !r.Replayed {
		t.Fatalf("retry of k: %+v %v", r, err)
	}
	if st := tc.mgrs[nl].ClockState(); !st.Last.Capped || !st.Last.Unsure {
		t.Fatalf("the reading was not capped: %+v", st.Last)
	}
	// Once a majority is measured (the leader's clock is 10 minutes ahead of
	// both peers'), it stamps with the group's clock.
	tc.mgrs[nl].setClockSource(&fakeClockSource{offs: []membership.PeerOffset{
		{Name: tc.cfgs[(nl+1)%3].NodeID, NodeID: tc.cfgs[(nl+1)%3].NodeID, Role: membership.RoleManager, Offset: -10 * time.Minute},
		{Name: tc.cfgs[(nl+2)%3].NodeID, NodeID: tc.cfgs[(nl+2)%3].NodeID, Role: membership.RoleManager, Offset: -10 * time.Minute},
	}})
	start = time.Now()
	r3, err := tc.submit(ctx, nl, "t", "k3", "fp", "demo", `1`, 0)
	if err != nil || r3.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r3, err)
	}
	created, _ = time.Parse(api.TimeFormat, r3.Job.CreatedAt)
	if d := created.Sub(start); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("a clamped leader stamped %v off real time", d)
	}
	if st := tc.mgrs[nl].ClockState(); !st.Last.Clamped {
		t.Fatalf("the reading was not clamped: %+v", st.Last)
	}
}

// TestLeaderAfterOutageWaitsForTheGroup: the ledger's last stamps are an hour
// old (as after a whole-group outage) and the new leader has measured nobody.
// It cannot tell an outage from its own clock running an hour ahead, so it
// neither jumps ahead (that could expire entries early) nor stamps new entries
// an hour in the past (they would expire early once time catches up): it
// waits for the group's view, then stamps with the real time.
func TestLeaderAfterOutageWaitsForTheGroup(t *testing.T) {
	var mu sync.Mutex
	skew := -time.Hour
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Idempotency.CleanupInterval = time.Second
		c.ApplyTimeout = 20 * time.Second
	})
	tc.setNow(func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(skew) })
	ctx := ctxT(t)
	l := tc.leader()
	if r, err := tc.submit(ctx, l, "t", "k1", "fp", "demo", `1`, 0); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r, err)
	}
	for _, m := range tc.mgrs {
		m.setClockSource(&fakeClockSource{})
	}
	mu.Lock()
	skew = 0
	mu.Unlock()
	nl := (l + 1) % 3
	tc.lead(ctx, nl, func() error { return nil })

	type result struct {
		r   *rpcpb.SubmitResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := tc.submit(ctx, nl, "t", "k2", "fp", "demo", `1`, 0)
		done <- result{r, err}
	}()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return tc.mgrs[nl].ClockState().Last.Unsure, "the new leader to wait for its view"
	})
	select {
	case res := <-done:
		t.Fatalf("submitted before the view was known: %+v %v", res.r, res.err)
	default:
	}
	var offs []membership.PeerOffset
	for i, c := range tc.cfgs {
		if i != nl {
			offs = append(offs, membership.PeerOffset{Name: c.NodeID, NodeID: c.NodeID, Role: membership.RoleManager})
		}
	}
	tc.mgrs[nl].setClockSource(&fakeClockSource{offs: offs})
	res := <-done
	if res.err != nil || res.r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", res.r, res.err)
	}
	created, _ := time.Parse(api.TimeFormat, res.r.Job.CreatedAt)
	if d := time.Since(created); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("stamped %v off real time after the outage", d)
	}
}

func TestHandoffTarget(t *testing.T) {
	const bound = 500 * time.Millisecond
	peer := func(id string, off time.Duration) membership.PeerOffset {
		return membership.PeerOffset{Name: id, NodeID: id, Role: membership.RoleManager, Offset: off}
	}
	known := func(off time.Duration) clockwatch.View {
		return clockwatch.View{Known: true, Offset: off, Voters: 3, Measured: 3}
	}
	tests := []struct {
		name  string
		st    ClockState
		want  string
		found bool
	}{
		{"ahead: the peer at the group's clock", ClockState{View: known(-10 * time.Minute),
			Peers: []membership.PeerOffset{peer("m1", -10*time.Minute), peer("m3", -20*time.Minute)}}, "m1", true},
		{"the nearest of two agreeing peers", ClockState{View: known(-10 * time.Minute),
			Peers: []membership.PeerOffset{peer("m1", -10*time.Minute+400*time.Millisecond), peer("m3", -10*time.Minute-100*time.Millisecond)}}, "m3", true},
		{"nobody agrees", ClockState{View: known(-10 * time.Minute),
			Peers: []membership.PeerOffset{peer("m1", -5*time.Minute), peer("m3", -20*time.Minute)}}, "", false},
		{"unknown view", ClockState{View: clockwatch.View{Voters: 3, Measured: 1},
			Peers: []membership.PeerOffset{peer("m1", 0)}}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := handoffTarget(tt.st, bound)
			if ok != tt.found || got.NodeID != tt.want {
				t.Fatalf("handoffTarget = %q, %v; want %q, %v", got.NodeID, ok, tt.want, tt.found)
			}
		})
	}
}

// TestRestoredClockDoesNotStampAhead: a manager whose clock was 10 minutes
// behind leads (its stamps are the group's time), then its clock is set
// right while it leads: a step forward of 10 minutes. Its view's offsets
// were measured against the old clock; were they taken as they are, it
// would stamp 10 minutes ahead of real time, and ledger time, which never
// runs back, would expire every key up to 10 minutes early. Its stamps stay
// on real time through the step.
func TestRestoredClockDoesNotStampAhead(t *testing.T) {
	skews := []time.Duration{0, 0, -10 * time.Minute}
	tc := newSkewedCluster(t, skews, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		for i, m := range tc.mgrs {
			v := m.ClockState().View
			if !v.Known || v.Measured != 3 || v.Offset+skews[i] < -time.Second || v.Offset+skews[i] > time.Second {
				return false, "every manager to measure its group"
			}
		}
		return true, "every manager to measure its group"
	})
	submit := func(key string) error {
		at := time.Now()
		r, err := tc.submit(ctx, 2, "t", key, "fp-"+key, "demo", `1`, 0)
		if err != nil {
			return err
		}
		if r.Outcome != rpc.OutcomeCommitted || r.Job == nil {
			return fmt.Errorf("submit %s: %+v", key, r)
		}
		created, err := time.Parse(api.TimeFormat, r.Job.CreatedAt)
		if err != nil {
			return err
		}
		if d := created.Sub(at); d < -2*time.Second || d > 2*time.Second {
			t.Fatalf("%s stamped %v, real %v: off by %v", key, created, at, d)
		}
		return nil
	}
	tc.lead(ctx, 2, func() error { return submit("before") })
	tc.lead(ctx, 2, func() error {
		tc.skew[2].Store(0) // the clock set right: a step of 10 minutes forward
		for i := range 20 {
			if err := submit(fmt.Sprintf("after-%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
}

// setClockSource replaces Deps.Clock and drops the cached view: the clock
// tests change what a running manager has measured.
func (m *Manager) setClockSource(src ClockSource) {
	m.clock.mu.Lock()
	m.clock.src = src
	m.clock.viewAt = time.Time{}
	m.clock.mu.Unlock()
}

// TestClockViewIgnoresMembersClaimingAVotersID: pool members whose metadata
// claims the other voters' node IDs, under names of their own, do not count
// as those voters: two of them an hour ahead do not make a leader of three
// take the group's clock for an hour ahead. The voters themselves, measured
// under their own names, do count.
func TestClockViewIgnoresMembersClaimingAVotersID(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	var impostors, voters []membership.PeerOffset
	for i, c := range tc.cfgs {
		if i == l {
			continue
		}
		impostors = append(impostors, membership.PeerOffset{Name: "not-" + c.NodeID, NodeID: c.NodeID,
			Role: membership.RoleManager, Offset: time.Hour})
		voters = append(voters, membership.PeerOffset{Name: c.NodeID, NodeID: c.NodeID, Role: membership.RoleManager})
	}
	tc.mgrs[l].setClockSource(&fakeClockSource{offs: impostors})
	if v := tc.mgrs[l].ClockState().View; v.Known || v.Measured != 1 {
		t.Fatalf("members claiming the voters' IDs were counted: %+v", v)
	}
	tc.mgrs[l].setClockSource(&fakeClockSource{offs: append(impostors, voters...)})
	if v := tc.mgrs[l].ClockState().View; !v.Known || v.Measured != 3 || v.Offset != 0 {
		t.Fatalf("with the voters measured under their own names: %+v, want known, 3 measured, offset 0", v)
	}
}

// steppingClockSource measures peers whose clocks are right (real time) from
// a manager whose clock is real time plus skew, and steps that clock by step
// (once) as it measures: the step lands between the reading of the
// manager's clock and the measuring of its view.
type steppingClockSource struct {
	peers []string
	skew  *atomic.Int64
	step  atomic.Int64
}

func (s *steppingClockSource) ClockOffsets() []membership.PeerOffset {
	s.skew.Add(s.step.Swap(0))
	var out []membership.PeerOffset
	for _, p := range s.peers {
		out = append(out, membership.PeerOffset{Name: p, NodeID: p, Role: membership.RoleManager,
			Offset: -time.Duration(s.skew.Load())})
	}
	return out
}

// TestClockStepDuringAReadingDoesNotStampAhead: a leader's clock, right, is
// set back 10 minutes while a reading of ledger time measures its group: the
// reading's clock is from before the step, the view (the peers 10 minutes
// ahead) from after it. Taken together they would stamp 10 minutes ahead of
// real time, and ledger time, which never runs back, would expire every key
// up to 10 minutes early.
func TestClockStepDuringAReadingDoesNotStampAhead(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	var skew atomic.Int64
	tc.setNow(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	l := tc.leader()
	src := &steppingClockSource{skew: &skew}
	for i, c := range tc.cfgs {
		if i != l {
			src.peers = append(src.peers, c.NodeID)
		}
	}
	m := tc.mgrs[l]
	m.setClockSource(src)
	if v := m.ClockState().View; !v.Known || v.Offset != 0 {
		t.Fatalf("view before the step: %+v, want known, offset 0", v)
	}
	src.step.Store(int64(-10 * time.Minute))
	m.setClockSource(src) // the next reading measures its view
	start := time.Now()
	got := m.ledgerNow()
	if d := got.Sub(start); d > time.Second {
		t.Fatalf("stamped %v ahead of real time across a step of the clock", d)
	}
	if v := m.ClockState().View; !v.Known || v.Offset != 10*time.Minute {
		t.Fatalf("view after the step: %+v, want known, offset 10m", v)
	}
}
