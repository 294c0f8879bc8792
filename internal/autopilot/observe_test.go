package autopilot

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// inmemRaft starts a raft server id on an in-memory transport at "addr-"+id
// (the address mgr gives its pool member), shut down at the test's end.
func inmemRaft(t *testing.T, id string) (*raft.Raft, *raft.InmemTransport) {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress("addr-" + id))
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 200 * time.Millisecond
	rc.CommitTimeout = 10 * time.Millisecond
	rc.Logger = logging.HCLog(testutil.Logger(t).With(logging.KeyNode, id), "raft")
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(rc, &counter{}, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("%s: shutdown: %v", id, err)
		}
		_ = trans.Close()
	})
	return r, trans
}

// TestDroppedResumedHeartbeatDoesNotKeepServerUnhealthy: raft's observer
// does not block, so raft drops the observations that do not fit in Run's
// channel while Run's loop is busy. When the dropped one is the only
// ResumedHeartbeatObservation of a server whose heartbeats failed, the
// server must still become healthy again, and be promoted: Run resyncs on
// the observer's dropped count instead of waiting for a notice that never
// comes.
func TestDroppedResumedHeartbeatDoesNotKeepServerUnhealthy(t *testing.T) {
	ra, ta, tb := leaderAUnreachingB(t)
	// a's heartbeats to b fail from the start (a never connects to b yet).

	// The test's own observer sees every heartbeat notice about b; flush
	// waits for the notices being delivered to end (RegisterObserver takes
	// the lock every delivery holds), so after it each notice the test has
	// seen has been offered to the autopilot's observer too.
	seen := make(chan raft.Observation, 4096)
	mine := raft.NewObserver(seen, false, func(o *raft.Observation) bool {
		switch d := o.Data.(type) {
		case raft.FailedHeartbeatObservation:
			return d.PeerID == "b"
		case raft.ResumedHeartbeatObservation:
			return d.PeerID == "b"
		}
		return false
	})
	ra.RegisterObserver(mine)
	t.Cleanup(func() { ra.DeregisterObserver(mine) })
	flush := func() {
		o := raft.NewObserver(nil, false, nil)
		ra.RegisterObserver(o)
		ra.DeregisterObserver(o)
	}
	next := func(what string) raft.Observation {
		t.Helper()
		select {
		case o := <-seen:
			return o
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s from raft", what)
			return raft.Observation{}
		}
	}

	// The knob holds Run's loop up once it has taken in its first failed
	// heartbeat of b, as a slow AddServer would, with room for one
	// observation in its channel.
	blocked, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	hold := func(o raft.Observation) {
		if f, ok := o.Data.(raft.FailedHeartbeatObservation); ok && f.PeerID == "b" {
			holdOnce.Do(func() { close(blocked); <-release })
		}
	}
	alive := membership.StateAlive
	pool := &fakePool{local: mgr("a", alive, 1, 0, true), joined: make(chan struct{}),
		members: []membership.Member{mgr("a", alive, 1, 0, true)}}
	const stabilization = 500 * time.Millisecond
	ap := New(Config{
		DC: "dc1", NodeID: "a", DeadServerGrace: time.Hour, ReconcileInterval: 50 * time.Millisecond,
		UpdateInterval: 50 * time.Millisecond, ServerStabilizationTime: stabilization,
		LastContactThreshold: 200 * time.Millisecond, ChangeTimeout: 5 * time.Second, Logger: testutil.Logger(t),
		Knobs: TestingKnobs{ObservationBuffer: 1, AfterObservation: hold},
	}, ra, pool)
	runAutopilot(t, ap, unblock)

	// b joins at once: the promoter requires ServerStabilizationTime of
	// health from a leader's start too (TestNewLeaderDoesNotPromoteUnprovenServer),
	// so b is not promoted before its heartbeats fail.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) { return ap.Health() != nil, "no health yet" })
	pool.set(mgr("a", alive, 1, 0, true), mgr("b", alive, 1, 0, false))

	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("b was not added, or its heartbeats never failed")
	}
	// Two more failures while the loop is held: the channel is full.
	flush()
	for len(seen) > 0 {
		<-seen
	}
	for i := 0; i < 2; i++ {
		if _, ok := next("failed heartbeat").Data.(raft.FailedHeartbeatObservation); !ok {
			t.Fatal("b's heartbeats resumed while a cannot reach it")
		}
	}
	// b is reached again; raft says so once, and drops it.
	ta.Connect("addr-b", tb)
	for {
		if _, ok := next("resumed heartbeat").Data.(raft.ResumedHeartbeatObservation); ok {
			break
		}
	}
	flush()
	unblock()

	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		if why, bad := ap.UnhealthyNow()["b"]; bad {
			return false, "b unhealthy: " + why
		}
		f := ra.GetConfiguration()
		if err := f.Error(); err != nil {
			return false, err.Error()
		}
		c := configString(f.Configuration(), false)
		return c == voters("a", "b"), "configuration " + c
	})
}

// TestNewLeaderDoesNotPromoteUnprovenServer: raft-autopilot's own promoter
// skips the stabilization time during a leader's first
// ServerStabilizationTime, so a manager added then was promoted as soon as
// it looked healthy, that is before its heartbeats had failed for
// LastContactThreshold. A manager raft cannot reach (alive in the pool, its
// Raft port unreachable) joining a one-manager datacenter then made a
// second voter the leader cannot reach: the leader lost its quorum and
// stepped down. A non-voter is promoted only once healthy for
// ServerStabilizationTime, whenever the leader was elected.
func TestNewLeaderDoesNotPromoteUnprovenServer(t *testing.T) {
	ra, ta, tb := leaderAUnreachingB(t)
	// a cannot reach b; b looks healthy to a for LastContactThreshold after
	// it is added, well within the leader's first stabilization time.
	alive := membership.StateAlive
	pool := &fakePool{local: mgr("a", alive, 1, 0, true), joined: make(chan struct{}),
		members: []membership.Member{mgr("a", alive, 1, 0, true), mgr("b", alive, 1, 0, false)}}
	ap := New(Config{
		DC: "dc1", NodeID: "a", DeadServerGrace: time.Hour, ReconcileInterval: 50 * time.Millisecond,
		UpdateInterval: 50 * time.Millisecond, ServerStabilizationTime: 3 * time.Second,
		LastContactThreshold: time.Second, ChangeTimeout: 5 * time.Second, Logger: testutil.Logger(t),
	}, ra, pool)
	runAutopilot(t, ap, func() {})

	config := func() string {
		f := ra.GetConfiguration()
		if err := f.Error(); err != nil {
			return "error: " + err.Error()
		}
		return configString(f.Configuration(), false)
	}
	const added = "a(Voter) b(Nonvoter)"
	// Wait until raft-autopilot finds b unhealthy: b must still be a
	// non-voter, and a the leader.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		if c := config(); c != added {
			return c == voters("a", "b"), "configuration " + c
		}
		h := ap.Health()
		if h == nil {
			return false, "no health"
		}
		i := slices.IndexFunc(h.Servers, func(s api.ServerHealth) bool { return s.ID == "b" })
		return i >= 0 && !h.Servers[i].Healthy, fmt.Sprintf("health %+v", h.Servers)
	})
	if c := config(); c != added || ra.State() != raft.Leader {
		t.Fatalf("b, unreachable, was promoted: configuration %s, a %s", c, ra.State())
	}

	// Once a reaches b, b is promoted after the stabilization time.
	ta.Connect("addr-b", tb)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		c := config()
		return c == voters("a", "b"), "configuration " + c
	})
}

// leaderAUnreachingB starts raft servers a and b on in-memory transports,
// bootstraps a alone and waits for it to lead: b reaches a, a does not
// reach b yet (the test connects ta to tb when it wants).
func leaderAUnreachingB(t *testing.T) (*raft.Raft, *raft.InmemTransport, *raft.InmemTransport) {
	t.Helper()
	ra, ta := inmemRaft(t, "a")
	_, tb := inmemRaft(t, "b")
	tb.Connect("addr-a", ta)
	if err := ra.BootstrapCluster(raft.Configuration{Servers: []raft.Server{voter("a", "addr-a")}}).Error(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return ra.State() == raft.Leader, "a is not the leader"
	})
	return ra, ta, tb
}

// runAutopilot runs ap until the test ends; then it cancels Run, calls
// release (which lets a loop a test holds go on) and checks Run's error.
func runAutopilot(t *testing.T, ap *Autopilot, release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ap.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		release()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
