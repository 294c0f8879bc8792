// Package autopilot runs a manager's Raft membership from the gossip pool:
// it bootstraps the datacenter's Raft group once bootstrap_expect managers see
// each other (Consul's and Nomad's bootstrap_expect, made race-free by a vote
// carried in the gossip meta), and on the leader it runs
// github.com/hashicorp/raft-autopilot, as Consul and Nomad do, to keep the
// Raft configuration in line with the pool: server health, promotion of
// healthy non-voters, dead-server cleanup. This package is that library's
// delegate (delegate.go) plus what the library does not do: the bootstrap
// vote (bootstrap.go), adding alive managers to the configuration and taking
// their new address (Consul's join handling), the grace period and quorum
// rule for dead servers, and a leaving leader's self-removal (Leave).
//
// docs/operations.md explains the procedure and why it cannot form two
// clusters; bootstrap.go holds the argument next to the code.
package autopilot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftautopilot "github.com/hashicorp/raft-autopilot"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/pkg/api"
)

// RaftAPI is the part of *raft.Raft the autopilot uses: what raft-autopilot
// needs (raftautopilot.Raft) and what bootstrap and Leave need (tests may
// wrap a real raft to watch or fail calls).
type RaftAPI interface {
	raftautopilot.Raft
	CurrentTerm() uint64
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	BootstrapCluster(raft.Configuration) raft.Future
	LeadershipTransfer() raft.Future
	RegisterObserver(*raft.Observer)
	DeregisterObserver(*raft.Observer)
}

var _ RaftAPI = (*raft.Raft)(nil)

// PoolAPI is the part of *membership.Pool the autopilot uses.
type PoolAPI interface {
	LocalNode() membership.Member
	Members() []membership.Member
	Joined() <-chan struct{}
	Subscribe() (<-chan membership.Event, func())
	ModifyMeta(func(*membership.Meta)) error
	Leave(timeout time.Duration) error
}

var _ PoolAPI = (*membership.Pool)(nil)

// Defaults for zero Config durations.
const (
	DefaultDeadServerGrace   = 2 * time.Minute
	DefaultReconcileInterval = 5 * time.Second
	DefaultChangeTimeout     = 10 * time.Second
	// DefaultUpdateInterval: how often the leader recomputes server health
	// (raft-autopilot's and Consul's default).
	DefaultUpdateInterval = raftautopilot.DefaultUpdateInterval
	// DefaultServerStabilizationTime: how long a new server must stay
	// healthy before it is promoted to voter (Consul's default).
	DefaultServerStabilizationTime = 10 * time.Second
	// DefaultLastContactThreshold: a server the leader has not reached for
	// longer is unhealthy (Consul's default).
	DefaultLastContactThreshold = 200 * time.Millisecond
)

// Config of an Autopilot.
type Config struct {
	// DC is this manager's datacenter; only managers of DC are considered.
	DC string
	// NodeID is this manager's Raft server ID (= its Meta.NodeID).
	NodeID string
	// RaftAddr is this manager's Raft address (= its Meta.RaftAddr); default:
	// the pool's local Meta.RaftAddr.
	RaftAddr string
	// BootstrapExpect is how many managers form the initial cluster
	// (MANAGER_BOOTSTRAP_EXPECT). 0: this manager never bootstraps; it waits
	// for a leader to add it.
	BootstrapExpect int
	// HasExistingState is raft.HasExistingState(logs, stable, snaps) as read
	// before raft.NewRaft. The autopilot also checks Raft itself (last index,
	// term, configuration), so false is never unsafe, only slower to notice.
	HasExistingState bool
	// DeadServerGrace is how long a failed manager stays in the Raft
	// configuration before the leader removes it
	// (0: DefaultDeadServerGrace; the manager passes
	// MANAGER_DEAD_SERVER_GRACE_SECONDS, whose default is 30 s).
	DeadServerGrace time.Duration
	// ReconcileInterval is how often the leader reconciles without a pool
	// event: adds alive managers, and raft-autopilot promotes healthy
	// non-voters and removes dead servers (default DefaultReconcileInterval).
	ReconcileInterval time.Duration
	// UpdateInterval is how often raft-autopilot recomputes server health
	// (default DefaultUpdateInterval).
	UpdateInterval time.Duration
	// ServerStabilizationTime is how long a server added as a non-voter must
	// stay healthy before raft-autopilot promotes it (default
	// DefaultServerStabilizationTime, capped at DeadServerGrace).
	ServerStabilizationTime time.Duration
	// LastContactThreshold: a server this leader's heartbeats have failed to
	// reach for longer is unhealthy (default DefaultLastContactThreshold).
	LastContactThreshold time.Duration
	// ChangeTimeout bounds each AddVoter/RemoveServer enqueue (default
	// DefaultChangeTimeout).
	ChangeTimeout time.Duration
	// Logger (nil discards).
	Logger *slog.Logger
	// Knobs are for tests only (TestingKnobs).
	Knobs TestingKnobs
}

// TestingKnobs are hooks for tests only (CockroachDB's TestingKnobs
// pattern: passed in Config, zero in production).
type TestingKnobs struct {
	// ObservationBuffer, when > 0, replaces the capacity of the channel Run
	// receives raft's observations on (observationBuffer), so that a test
	// fills it and raft drops observations.
	ObservationBuffer int
	// AfterObservation, when set, is called by Run's loop after it has
	// taken in each raft observation (a test blocks it to hold the loop up,
	// as a slow AddServer does).
	AfterObservation func(raft.Observation)
}

// observationBuffer is the capacity of the channel raft's observations
// arrive on.
const observationBuffer = 64

// Errors.
var (
	// ErrInvalidConfig: see *ConfigError.
	ErrInvalidConfig = errors.New("autopilot: invalid config")
	// ErrLeaveTimeout: Leave gave up waiting for this manager's removal.
	ErrLeaveTimeout = errors.New("autopilot: not removed from the raft configuration in time")
)

// ConfigError names the Config field Validate refused; it matches
// ErrInvalidConfig.
type ConfigError struct {
	Field, Value, Reason string
}

func (e *ConfigError) Error() string {
	s := "autopilot: invalid config " + e.Field
	if e.Value != "" {
		s += "=" + strconv.Quote(e.Value)
	}
	return s + ": " + e.Reason
}

func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks c.
func (c *Config) Validate() error {
	switch {
	case c.DC == "":
		return &ConfigError{Field: "DC", Reason: "required"}
	case c.NodeID == "":
		return &ConfigError{Field: "NodeID", Reason: "required"}
	case c.BootstrapExpect < 0:
		return &ConfigError{Field: "BootstrapExpect", Value: strconv.Itoa(c.BootstrapExpect), Reason: "must be >= 0"}
	}
	for _, f := range c.durations() {
		if *f.d < 0 {
			return &ConfigError{Field: f.name, Value: f.d.String(), Reason: "must be >= 0"}
		}
	}
	return nil
}

// configDuration is a duration field of Config and its default.
type configDuration struct {
	name string
	d    *time.Duration
	def  time.Duration
}

// durations are c's durations; ServerStabilizationTime's default is capped
// at DeadServerGrace.
func (c *Config) durations() []configDuration {
	return []configDuration{
		{"DeadServerGrace", &c.DeadServerGrace, DefaultDeadServerGrace},
		{"ReconcileInterval", &c.ReconcileInterval, DefaultReconcileInterval},
		{"ChangeTimeout", &c.ChangeTimeout, DefaultChangeTimeout},
		{"UpdateInterval", &c.UpdateInterval, DefaultUpdateInterval},
		{"ServerStabilizationTime", &c.ServerStabilizationTime,
			min(DefaultServerStabilizationTime, cmp.Or(c.DeadServerGrace, DefaultDeadServerGrace))},
		{"LastContactThreshold", &c.LastContactThreshold, DefaultLastContactThreshold},
	}
}

func (c *Config) withDefaults() Config {
	d := *c
	for _, f := range d.durations() {
		if *f.d == 0 {
			*f.d = f.def
		}
	}
	return d
}

// Autopilot drives one manager's Raft membership. Create it with New and run
// it with Run; Leave is the graceful way out.
type Autopilot struct {
	cfg  Config
	raft RaftAPI
	pool PoolAPI
	log  *slog.Logger

	// lib is raft-autopilot; it runs (Start) while this manager is the
	// leader, and is stopped when leadership is lost and when Run returns.
	lib        *raftautopilot.Autopilot
	libRunning bool // only the Run goroutine touches it

	mu sync.Mutex
	st Status // HasState, Bootstrapped, LastReconcile, Waiting
	// bootstrap state (only the Run goroutine touches it)
	boot bootstrapState

	// dmu guards what the delegate shares between the Run goroutine and
	// raft-autopilot's goroutines.
	dmu sync.Mutex
	// absentSince: when the leader first found a server unknown to the pool.
	absentSince map[raft.ServerID]time.Time
	// refused: removals held back for quorum, to log each once.
	refused map[raft.ServerID]bool
	// unreachable: servers this leader's heartbeats currently fail to reach
	// (raft FailedHeartbeatObservation, until ResumedHeartbeatObservation),
	// and their last contact. Reset on leader change, and when raft has
	// dropped an observation (resync).
	unreachable map[raft.ServerID]time.Time
	// dropped: the observer's dropped count resync last acted on (only the
	// Run goroutine touches it).
	dropped uint64
	// held: removals held back because raft still reaches the server, to log
	// each once.
	held map[raft.ServerID]bool
	// health: raft-autopilot's last state (NotifyState); nil when not leader.
	health *api.AutopilotHealth

	// rmu guards the identity claims refused (identity.go).
	rmu sync.Mutex
	// refusals: the claims this leader currently refuses, by Refusal.key.
	refusals map[string]Refusal
	// refusalCounts: refusals made since start, by reason.
	refusalCounts map[string]uint64
}

// Status is a snapshot of what the autopilot has done and is waiting for.
type Status struct {
	// HasState: this manager holds Raft state (it will never bootstrap).
	HasState bool
	// Bootstrapped: this manager called BootstrapCluster (at most one
	// manager of a datacenter ever does).
	Bootstrapped bool
	// Leader: Raft is leader here.
	Leader bool
	// LastReconcile is when this node last reconciled as leader.
	LastReconcile time.Time
	// Waiting says what bootstrap waits for ("" once there is state).
	Waiting string
	// Health is raft-autopilot's view of the servers, on the leader once it
	// has computed one (nil elsewhere).
	Health *api.AutopilotHealth
	// Refused: the pool members' identity claims this leader refuses
	// (identity.go); empty elsewhere.
	Refused []Refusal
}

// New returns an Autopilot for the manager cfg describes, acting on r and
// reading pool. Nothing happens until Run.
func New(cfg Config, r RaftAPI, pool PoolAPI) *Autopilot {
	c := cfg.withDefaults()
	a := &Autopilot{
		cfg:         c,
		raft:        r,
		pool:        pool,
		log:         logging.OrDiscard(c.Logger).With(logging.KeyComponent, "autopilot", logging.KeyNodeID, c.NodeID),
		absentSince: make(map[raft.ServerID]time.Time),
		refused:     make(map[raft.ServerID]bool),
		unreachable: make(map[raft.ServerID]time.Time),
		held:        make(map[raft.ServerID]bool),

		refusals:      make(map[string]Refusal),
		refusalCounts: make(map[string]uint64),
	}
	a.lib = raftautopilot.New(r, (*delegate)(a),
		raftautopilot.WithLogger(logging.HCLog(logging.OrDiscard(c.Logger).With(logging.KeyNodeID, c.NodeID), "raft-autopilot")),
		raftautopilot.WithPromoter(&promoter{a: a}),
		raftautopilot.WithReconcileInterval(c.ReconcileInterval),
		raftautopilot.WithUpdateInterval(c.UpdateInterval))
	return a
}

// Status returns what the autopilot has done so far.
func (a *Autopilot) Status() Status {
	a.mu.Lock()
	st := a.st
	a.mu.Unlock()
	st.Leader, st.Health, st.Refused = a.raft.State() == raft.Leader, a.Health(), a.Refused()
	return st
}

// Run bootstraps (if this manager is fresh and the conditions hold) and,
// while this manager is the leader, reconciles the Raft configuration with
// the pool, on every pool event, leadership change and ReconcileInterval. It
// returns nil when ctx is done, or at once a *ConfigError (also when the
// pool's local Meta is not this manager's). Call it once. It starts no
// goroutine that outlives it.
func (a *Autopilot) Run(ctx context.Context) error {
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	local := a.pool.LocalNode().Meta
	switch {
	case local.Role != membership.RoleManager:
		return &ConfigError{Field: "pool", Value: string(local.Role), Reason: "the pool's local node must be a manager"}
	case local.NodeID != a.cfg.NodeID:
		return &ConfigError{Field: "NodeID", Value: a.cfg.NodeID, Reason: "differs from the pool's Meta.NodeID " + strconv.Quote(local.NodeID)}
	case local.Datacenter != a.cfg.DC:
		return &ConfigError{Field: "DC", Value: a.cfg.DC, Reason: "differs from the pool's Meta.Datacenter " + strconv.Quote(local.Datacenter)}
	}
	if a.cfg.RaftAddr == "" {
		a.cfg.RaftAddr = local.RaftAddr
	}
	events, cancel := a.pool.Subscribe()
	defer cancel()
	obsCh := make(chan raft.Observation, cmp.Or(max(a.cfg.Knobs.ObservationBuffer, 0), observationBuffer))
	// The observer does not block raft (a blocking one would stall raft's
	// loop, and so the AddServer this loop may be waiting on): raft drops
	// what does not fit in obsCh, and resync repairs what a drop lost.
	obs := raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.PeerObservation,
			raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	a.raft.RegisterObserver(obs)
	defer a.raft.DeregisterObserver(obs)
	defer a.stopLib()
	tick := time.NewTicker(a.cfg.ReconcileInterval)
	defer tick.Stop()
	joined := a.pool.Joined()

	a.publishExpect()
	for {
		a.step(ctx)
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				events = nil // the pool shut down; keep serving until ctx
			}
		case o := <-obsCh:
			a.handle(o)
		case <-tick.C:
		case <-joined:
			joined = nil
		}
		// One step covers a burst of events.
		for drained := false; !drained; {
			select {
			case _, ok := <-events:
				if !ok {
					events = nil
				}
			case o := <-obsCh:
				a.handle(o)
			default:
				drained = true
			}
		}
		a.resync(obs.GetNumDropped())
	}
}

// handle is observe, then the AfterObservation knob.
func (a *Autopilot) handle(o raft.Observation) {
	a.observe(o)
	if k := a.cfg.Knobs.AfterObservation; k != nil {
		k(o)
	}
}

// resync forgets every heartbeat failure observed so far once raft has
// dropped an observation (dropped is the observer's count): the dropped one
// may be a ResumedHeartbeatObservation, raft's only notice that a server is
// reached again, and without it the server would stay unhealthy, never
// promoted, for good. Forgetting is safe the other way: raft reports a
// failure on every failed heartbeat (retried HeartbeatTimeout/2 at most after
// the last one failed), each
// with the follower's real last contact, so a server still unreachable is
// back in unreachable, with its true duration, at its next failed heartbeat.
func (a *Autopilot) resync(dropped uint64) {
	if dropped == a.dropped {
		return
	}
	lost := dropped - a.dropped
	a.dropped = dropped
	a.dmu.Lock()
	clear(a.unreachable)
	a.dmu.Unlock()
	a.log.Warn("raft observations dropped; heartbeat failures forgotten until raft reports them again",
		logging.KeyCount, lost)
}

// observe tracks which followers this leader's heartbeats reach, and when
// they were last reached.
func (a *Autopilot) observe(o raft.Observation) {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	switch d := o.Data.(type) {
	case raft.LeaderObservation:
		clear(a.unreachable)
	case raft.FailedHeartbeatObservation:
		last := d.LastContact
		if last.IsZero() {
			last = time.Now()
		}
		if prev, ok := a.unreachable[d.PeerID]; !ok || last.Before(prev) {
			a.unreachable[d.PeerID] = last
		}
	case raft.ResumedHeartbeatObservation:
		delete(a.unreachable, d.PeerID)
	case raft.PeerObservation:
		// Raft starts or stops a peer's replication. A new one reports its
		// own failures, and only its own: raft reports a resumed heartbeat
		// only after a failure of the same replication, so a failure of a
		// server's earlier replication (before it was removed and added
		// again) would otherwise keep it unhealthy, a non-voter, for good.
		delete(a.unreachable, d.Peer.ID)
	}
}

func (a *Autopilot) step(ctx context.Context) {
	if a.boot.decided != nil && !a.boot.done {
		a.tryBootstrap()
	}
	if a.hasState() {
		a.publishState()
	} else {
		a.bootstrapStep()
	}
	if a.raft.State() != raft.Leader {
		a.stopLib()
		return
	}
	if !a.libRunning {
		a.log.Info("leader: starting raft-autopilot")
		a.lib.Start(ctx)
		a.libRunning = true
	}
	a.addServers()
	a.lib.RemoveDeadServers() // a signal: raft-autopilot prunes in its own goroutine
	a.mu.Lock()
	a.st.LastReconcile = time.Now()
	a.mu.Unlock()
}

// stopLib stops raft-autopilot and waits for its goroutines.
func (a *Autopilot) stopLib() {
	if !a.libRunning {
		return
	}
	<-a.lib.Stop()
	a.libRunning = false
	a.dmu.Lock()
	a.health = nil
	a.dmu.Unlock()
	a.clearRefusals()
}

// hasState reports whether this manager holds Raft state, latching true.
func (a *Autopilot) hasState() bool {
	a.mu.Lock()
	has := a.st.HasState
	a.mu.Unlock()
	if has {
		return true
	}
	has = a.cfg.HasExistingState || a.boot.decided != nil || a.raft.LastIndex() > 0 || a.raft.CurrentTerm() > 0
	if !has {
		f := a.raft.GetConfiguration()
		has = f.Error() == nil && len(f.Configuration().Servers) > 0
	}
	if has {
		a.mu.Lock()
		a.st.HasState = true
		a.st.Waiting = ""
		a.mu.Unlock()
		a.log.Info("raft state present; this manager will not bootstrap")
	}
	return has
}

// publishState makes the pool meta say HasRaftState and carry no vote.
func (a *Autopilot) publishState() {
	m := a.pool.LocalNode().Meta
	if m.HasRaftState && m.Bootstrap.Vote == 0 {
		return
	}
	a.modifyMeta(announceState)
}

// announceState makes a meta say HasRaftState and carry no vote, for good.
func announceState(m *membership.Meta) {
	m.HasRaftState = true
	m.Bootstrap.Vote = 0
}

func (a *Autopilot) publishExpect() {
	if a.pool.LocalNode().Meta.Bootstrap.Expect == a.cfg.BootstrapExpect {
		return
	}
	a.modifyMeta(func(m *membership.Meta) { m.Bootstrap.Expect = a.cfg.BootstrapExpect })
}

// modifyMeta publishes a meta change. A broadcast timeout is not a failure:
// the meta is in effect locally and spreads by push/pull.
func (a *Autopilot) modifyMeta(fn func(*membership.Meta)) bool {
	err := a.pool.ModifyMeta(fn)
	switch {
	case err == nil, errors.Is(err, membership.ErrBroadcastTimeout):
		return true
	case errors.Is(err, membership.ErrLeft), errors.Is(err, membership.ErrShutdown):
		a.log.Debug("meta not published", logging.KeyError, err)
	default:
		a.log.Warn("meta not published", logging.KeyError, err)
	}
	return false
}

func (a *Autopilot) setWaiting(why string) {
	a.mu.Lock()
	changed := a.st.Waiting != why
	a.st.Waiting = why
	a.mu.Unlock()
	if changed && why != "" {
		a.log.Info("bootstrap waiting", logging.KeyReason, why)
	}
}

// Leave is what a manager calls on a graceful shutdown, before stopping Run,
// Raft and the pool:
//
//  1. if this manager is the leader, it removes itself from the
//     configuration (raft steps it down once the change commits; the others
//     elect a new leader) if the alive voters left are a majority of the
//     configuration without it; if they are not, or the removal fails, it
//     hands leadership over;
//  2. it leaves the pool (membership.Pool.Leave), so the leader sees it left
//     and removes it from the configuration at once;
//  3. it waits, until ctx is done, for its own Raft configuration to no longer
//     list it (the leader replicates the removal to the removed server).
//
// It returns ErrLeaveTimeout if ctx ends first; the manager shuts down anyway
// and the leader removes it later (as left, or after DeadServerGrace).
func (a *Autopilot) Leave(ctx context.Context, timeout time.Duration) error {
	self := raft.ServerID(a.cfg.NodeID)
	removed := false
	if a.raft.State() == raft.Leader && a.otherVoters(self) > 0 {
		// A leaving leader removes itself, as Consul's servers do: it commits
		// the configuration without itself, so it knows it is out, then steps
		// down and the others elect a leader. Handing leadership over first
		// and letting the new leader remove us is faster by an election, but
		// raft delivers a removal to the removed server at most once (the
		// leader stops replicating to it at once), so the leaving node could
		// wait forever to learn of it.
		//
		// Not when the configuration without it would have no quorum (another
		// voter is dead): the others would hold a configuration in which
		// they can elect no leader, not even once this manager is back on
		// its data, as it is no voter of it. Then it hands leadership over,
		// and the configuration keeps it until it comes back or quorum
		// allows its removal.
		var err error
		if ok, av, v := a.selfRemovalSafe(self); ok {
			a.log.Info("removing server", logging.KeyPeer, string(self), logging.KeyReason, "left")
			err = a.raft.RemoveServer(self, 0, a.cfg.ChangeTimeout).Error()
		} else {
			err = fmt.Errorf("%w: %d alive of %d voters without this one", errQuorumAtRisk, av, v)
		}
		if err != nil {
			a.log.Warn("self removal failed; transferring leadership instead", logging.KeyError, err)
			if err := a.raft.LeadershipTransfer().Error(); err != nil {
				a.log.Warn("leadership transfer failed", logging.KeyError, err)
			}
		} else {
			removed = true // committed by this node itself: it is out of the configuration
		}
	}
	if err := a.pool.Leave(timeout); err != nil {
		a.log.Warn("pool leave incomplete", logging.KeyError, err)
	}
	if removed {
		a.log.Info("removed from the raft configuration")
		return nil
	}
	if a.otherVoters(self) == 0 {
		return nil // alone: nobody to remove us
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		f := a.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return fmt.Errorf("autopilot: leave: %w", err)
		}
		if serverIndex(f.Configuration().Servers, self) < 0 {
			a.log.Info("removed from the raft configuration")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrLeaveTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// errQuorumAtRisk: a leaving leader does not remove itself (Leave).
var errQuorumAtRisk = errors.New("autopilot: not removing this server: quorum would be at risk")

// selfRemovalSafe is quorumSafe for this manager's removal of itself, a
// voter counting as alive unless UnhealthyNow says otherwise: a voter killed
// a moment ago, which the pool has not found dead yet, is not counted once
// this leader's heartbeats fail to reach it.
func (a *Autopilot) selfRemovalSafe(self raft.ServerID) (ok bool, aliveVoters, voters int) {
	f := a.raft.GetConfiguration()
	if f.Error() != nil {
		return false, 0, 0
	}
	unhealthy := a.UnhealthyNow()
	return quorumSafe(f.Configuration().Servers, self, func(id raft.ServerID) bool {
		_, bad := unhealthy[id]
		return !bad
	})
}

func (a *Autopilot) otherVoters(self raft.ServerID) int {
	f := a.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.ID != self && s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}
