package autopilot

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	raftautopilot "github.com/hashicorp/raft-autopilot"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/pkg/api"
)

// Health returns raft-autopilot's last computed state while this manager is
// the leader, nil otherwise. A server's Status is the pool's, "failed" also
// for one the pool does not know; it is Healthy when alive in the pool,
// reached by this leader's heartbeats within LastContactThreshold, and on
// the leader's term.
func (a *Autopilot) Health() *api.AutopilotHealth {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	if a.health == nil {
		return nil
	}
	h := *a.health
	h.Servers = slices.Clone(h.Servers)
	return &h
}

// UnhealthyNow returns the servers of the Raft configuration that are
// unhealthy by what this manager knows at this instant, each with why: the
// pool does not have it alive and not leaving ("pool status dead", "pool
// status left", "leaving the pool", "absent from the pool"), or this
// leader's heartbeats have failed to reach it for longer than
// LastContactThreshold ("unreachable for 1.2s"). These are Health's
// criteria, but Health is raft-autopilot's state as of its last update
// (every UpdateInterval), while UnhealthyNow reads the pool and the heartbeat
// failures raft has reported so far: a manager killed a moment ago is in it
// before Health calls it unhealthy. This manager is never in it; on a
// follower, which sends no heartbeats, only the pool counts. It does not
// wait for anything.
func (a *Autopilot) UnhealthyNow() map[raft.ServerID]string {
	f := a.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	byID, _ := resolveIdentities(servers, a.pool.Members(), a.cfg.DC)
	now := time.Now()
	a.dmu.Lock()
	defer a.dmu.Unlock()
	out := make(map[raft.ServerID]string)
	for _, s := range servers {
		if string(s.ID) == a.cfg.NodeID {
			continue
		}
		m, known := byID[s.ID]
		last, failing := a.unreachable[s.ID]
		switch {
		case !known:
			out[s.ID] = "absent from the pool"
		case m.State != membership.StateAlive:
			out[s.ID] = "pool status " + m.State.String()
		case m.Meta.Leaving:
			out[s.ID] = "leaving the pool"
		case failing && now.Sub(last) > a.cfg.LastContactThreshold:
			out[s.ID] = "unreachable for " + now.Sub(last).Round(time.Millisecond).String()
		}
	}
	return out
}

// delegate is the Autopilot seen as raft-autopilot's ApplicationIntegration.
// Its methods run on raft-autopilot's goroutines.
type delegate Autopilot

var _ raftautopilot.ApplicationIntegration = (*delegate)(nil)

// AutopilotConfig maps our settings onto raft-autopilot's. Dead-server
// cleanup is on; its grace period and quorum rule are applied by
// promoter.FilterFailedServerRemovals, since raft-autopilot removes a failed
// server as soon as it is reported.
func (d *delegate) AutopilotConfig() *raftautopilot.Config {
	return &raftautopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    d.cfg.LastContactThreshold,
		MaxTrailingLogs:         0, // see FetchServerStats
		MinQuorum:               0,
		ServerStabilizationTime: d.cfg.ServerStabilizationTime,
	}
}

// NotifyState keeps raft-autopilot's new state for Health and logs the
// servers whose health changed.
func (d *delegate) NotifyState(s *raftautopilot.State) {
	h := &api.AutopilotHealth{Healthy: s.Healthy, FailureTolerance: s.FailureTolerance}
	for id, srv := range s.Servers {
		h.Servers = append(h.Servers, api.ServerHealth{
			ID: string(id), Address: string(srv.Server.Address), Status: string(srv.Server.NodeStatus),
			RaftState: string(srv.State), Healthy: srv.Health.Healthy, StableSince: srv.Health.StableSince,
		})
	}
	slices.SortFunc(h.Servers, func(x, y api.ServerHealth) int { return cmp.Compare(x.ID, y.ID) })
	d.dmu.Lock()
	prev := d.health
	d.health = h
	d.dmu.Unlock()
	if prev == nil {
		return // a new leader's first view: nothing changed yet
	}
	for id, srv := range s.Servers {
		i := slices.IndexFunc(prev.Servers, func(p api.ServerHealth) bool { return p.ID == string(id) })
		switch {
		case i < 0 && srv.Health.Healthy:
		case i >= 0 && prev.Servers[i].Healthy == srv.Health.Healthy:
		case srv.Health.Healthy:
			d.log.Info("server healthy", logging.KeyPeer, string(id), logging.KeyState, string(srv.State))
		default:
			reason := "behind the leader's term"
			switch {
			case srv.Server.NodeStatus != raftautopilot.NodeAlive:
				reason = "pool status " + string(srv.Server.NodeStatus)
			case srv.Stats.LastContact > d.cfg.LastContactThreshold || srv.Stats.LastContact < 0:
				reason = "heartbeats fail"
			}
			d.log.Warn("server unhealthy", logging.KeyPeer, string(id), logging.KeyState, string(srv.State),
				logging.KeyReason, reason, logging.KeyDuration, srv.Stats.LastContact.Round(time.Millisecond))
		}
	}
}

// FetchServerStats reports, for each server, what this leader knows of it.
// hashicorp/raft exposes no follower's match index, so LastIndex and
// LastTerm are the leader's own for every server, and health comes down to
// the pool status and LastContact: 0 for a server the heartbeats reach, the
// time since the last contact for one they fail to reach (raft's
// FailedHeartbeatObservation). MaxTrailingLogs is therefore moot.
func (d *delegate) FetchServerStats(_ context.Context, servers map[raft.ServerID]*raftautopilot.Server) map[raft.ServerID]*raftautopilot.ServerStats {
	term, _ := strconv.ParseUint(d.raft.Stats()["last_log_term"], 10, 64)
	index := d.raft.LastIndex()
	now := time.Now()
	d.dmu.Lock()
	defer d.dmu.Unlock()
	out := make(map[raft.ServerID]*raftautopilot.ServerStats, len(servers))
	for id := range servers {
		st := &raftautopilot.ServerStats{LastTerm: term, LastIndex: index}
		if last, failing := d.unreachable[id]; failing {
			st.LastContact = now.Sub(last)
		}
		out[id] = st
	}
	return out
}

// KnownServers lists the managers of the datacenter the pool knows (the
// best record of each ID: an alive one, else the most recent departure),
// and, as failed, the servers of the Raft configuration it does not know.
// raft-autopilot would remove the latter ("stale") at once and without
// counting them as voters; we give them the failed servers' grace period
// and quorum rule (allowRemovals).
func (d *delegate) KnownServers() map[raft.ServerID]*raftautopilot.Server {
	isLeader := d.raft.State() == raft.Leader
	out := make(map[raft.ServerID]*raftautopilot.Server)
	if f := d.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			out[s.ID] = &raftautopilot.Server{ID: s.ID, Address: s.Address, NodeStatus: raftautopilot.NodeFailed,
				NodeType: raftautopilot.NodeVoter, IsLeader: isLeader && string(s.ID) == d.cfg.NodeID}
		}
	}
	for id, m := range (*Autopilot)(d).managers() {
		status := raftautopilot.NodeFailed
		switch {
		case m.State == membership.StateLeft:
			status = raftautopilot.NodeLeft
		case serving(m):
			status = raftautopilot.NodeAlive
		}
		out[id] = &raftautopilot.Server{
			ID: id, Name: m.Name, Address: raft.ServerAddress(m.Meta.RaftAddr), NodeStatus: status,
			Version: strconv.Itoa(int(m.Meta.Version)), NodeType: raftautopilot.NodeVoter,
			IsLeader: isLeader && string(id) == d.cfg.NodeID,
		}
	}
	return out
}

// RemoveFailedServer removes a failed or departed server that
// promoter.FilterFailedServerRemovals let through from the configuration.
func (d *delegate) RemoveFailedServer(srv *raftautopilot.Server) {
	reason := "failed"
	if srv.NodeStatus == raftautopilot.NodeLeft {
		reason = "left"
	} else if _, known := (*Autopilot)(d).managers()[srv.ID]; !known {
		reason = "absent"
	}
	d.log.Info("removing server", logging.KeyPeer, string(srv.ID), logging.KeyReason, reason)
	if err := d.raft.RemoveServer(srv.ID, 0, d.cfg.ChangeTimeout).Error(); err != nil {
		d.log.Warn("removing server failed", logging.KeyPeer, string(srv.ID), logging.KeyError, err)
	}
}

// promoter is raft-autopilot's StablePromoter (every server a voter, healthy
// non-voters promoted after ServerStabilizationTime, no demotions or
// leadership transfers) with our removal rules, and the stabilization time
// applied from a leader's start too.
type promoter struct {
	raftautopilot.StablePromoter
	a *Autopilot
}

// CalculatePromotionsAndDemotions promotes the non-voters healthy for
// ServerStabilizationTime. StablePromoter's would waive that time during
// the leader's first ServerStabilizationTime (State.ServerStabilizationTime)
// and promote a server added then at once: health is only known to fail
// LastContactThreshold after raft starts replicating to a server, so a
// manager raft cannot reach, joining a one-voter datacenter, became a voter
// the leader cannot reach, and the leader lost its quorum.
func (p *promoter) CalculatePromotionsAndDemotions(c *raftautopilot.Config, s *raftautopilot.State) raftautopilot.RaftChanges {
	var changes raftautopilot.RaftChanges
	now := time.Now()
	for id, srv := range s.Servers {
		if srv.State == raftautopilot.RaftNonVoter && srv.Health.IsStable(now, c.ServerStabilizationTime) {
			changes.Promotions = append(changes.Promotions, id)
		}
	}
	return changes
}

// FilterFailedServerRemovals keeps of raft-autopilot's removal candidates
// only those allowed now (see allowRemovals).
func (p *promoter) FilterFailedServerRemovals(_ *raftautopilot.Config, _ *raftautopilot.State, f *raftautopilot.FailedServers) *raftautopilot.FailedServers {
	return p.a.allowRemovals(f, time.Now())
}

// allowRemovals applies, to raft-autopilot's candidates, the rules it lacks:
//
//   - the leader never removes itself here (see Leave);
//   - a server that left goes at once; one that failed, or that the pool does
//     not know ("stale" to raft-autopilot, "absent" here, counted from when
//     this leader first noticed it), only after DeadServerGrace, and only if
//     this leader's heartbeats fail to reach it too: the pool may be a
//     fragment (managers restarted with only each other as seeds), and Raft
//     is the better witness of its own peers;
//   - a voter goes only if, in the configuration without it (and without the
//     voters already let through), the alive voters are still a majority.
//
// raft-autopilot then caps the voter removals of one round at what keeps a
// majority of the voters ((voters-1)/2).
func (a *Autopilot) allowRemovals(f *raftautopilot.FailedServers, now time.Time) *raftautopilot.FailedServers {
	cf := a.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return &raftautopilot.FailedServers{}
	}
	servers := slices.Clone(cf.Configuration().Servers)
	byID, _ := resolveIdentities(servers, a.pool.Members(), a.cfg.DC)
	self := raft.ServerID(a.cfg.NodeID)
	a.dmu.Lock()
	defer a.dmu.Unlock()

	for _, s := range servers {
		if _, known := byID[s.ID]; !known {
			if _, ok := a.absentSince[s.ID]; !ok {
				a.absentSince[s.ID] = now
			}
		}
	}
	maps.DeleteFunc(a.absentSince, func(id raft.ServerID, _ time.Time) bool {
		_, known := byID[id]
		return known || serverIndex(servers, id) < 0
	})
	// A server out of the configuration has no replication, so its failed
	// heartbeats are moot (observe drops them when raft stops it; this covers
	// an observation the non-blocking observer dropped).
	maps.DeleteFunc(a.unreachable, func(id raft.ServerID, _ time.Time) bool { return serverIndex(servers, id) < 0 })
	alive := a.reachedIn(a.aliveIn(byID), a.unreachable, now)
	allow := func(id raft.ServerID, reason string, since time.Time) bool {
		if id == self {
			return false
		}
		if reason != "left" {
			if now.Sub(since) < a.cfg.DeadServerGrace {
				return false
			}
			if _, failing := a.unreachable[id]; !failing {
				if !a.held[id] {
					a.held[id] = true
					a.log.Warn("not removing server: raft still reaches it", logging.KeyPeer, string(id), logging.KeyReason, reason)
				}
				return false
			}
		}
		delete(a.held, id)
		if ok, av, v := quorumSafe(servers, id, alive); !ok {
			if !a.refused[id] {
				a.refused[id] = true
				a.log.Warn("not removing server: quorum would be at risk", logging.KeyPeer, string(id),
					logging.KeyReason, reason, logging.KeyAlive, av, logging.KeyVoters, v)
			}
			return false
		}
		delete(a.refused, id)
		a.log.Info("server removal allowed", logging.KeyPeer, string(id), logging.KeyReason, reason,
			logging.KeyDuration, now.Sub(since).Round(time.Millisecond))
		servers = slices.DeleteFunc(servers, func(s raft.Server) bool { return s.ID == id })
		return true
	}
	staleOK := func(ids []raft.ServerID) []raft.ServerID {
		return slices.DeleteFunc(slices.Clone(ids), func(id raft.ServerID) bool { // none: KnownServers lists every server
			return !allow(id, "absent", cmp.Or(a.absentSince[id], now))
		})
	}
	failedOK := func(srvs []*raftautopilot.Server) []*raftautopilot.Server {
		return slices.DeleteFunc(slices.Clone(srvs), func(s *raftautopilot.Server) bool {
			reason, since := "absent", a.absentSince[s.ID]
			if m, ok := byID[s.ID]; ok {
				reason, since = "failed", m.LastSeen
				if m.State == membership.StateLeft {
					reason = "left"
				}
			}
			if since.IsZero() {
				since = now
			}
			return !allow(s.ID, reason, since)
		})
	}
	out := &raftautopilot.FailedServers{
		StaleNonVoters:  staleOK(f.StaleNonVoters),
		StaleVoters:     staleOK(f.StaleVoters),
		FailedNonVoters: failedOK(f.FailedNonVoters),
		FailedVoters:    failedOK(f.FailedVoters),
	}
	maps.DeleteFunc(a.held, func(id raft.ServerID, _ bool) bool {
		_, failing := a.unreachable[id]
		return failing || serverIndex(servers, id) < 0
	})
	maps.DeleteFunc(a.refused, func(id raft.ServerID, _ bool) bool { return alive(id) || serverIndex(servers, id) < 0 })
	return out
}

// serving reports whether m is alive in the pool and not leaving it.
func serving(m membership.Member) bool { return m.State == membership.StateAlive && !m.Meta.Leaving }

// aliveIn returns whether a server is serving by byID's record; this
// manager always is.
func (a *Autopilot) aliveIn(byID map[raft.ServerID]membership.Member) func(raft.ServerID) bool {
	return func(id raft.ServerID) bool {
		m, ok := byID[id]
		return string(id) == a.cfg.NodeID || ok && serving(m)
	}
}

// reachedIn narrows alive to the servers this leader's heartbeats have not
// failed to reach for longer than LastContactThreshold (unreachable, as
// observe keeps it): a voter killed a moment ago may be alive in the pool
// still, and counting it would let a removal leave a configuration without
// a quorum of live voters.
func (a *Autopilot) reachedIn(alive func(raft.ServerID) bool, unreachable map[raft.ServerID]time.Time, now time.Time) func(raft.ServerID) bool {
	return func(id raft.ServerID) bool {
		last, failing := unreachable[id]
		return alive(id) && (string(id) == a.cfg.NodeID || !failing || now.Sub(last) <= a.cfg.LastContactThreshold)
	}
}

// serverIndex is the index of id in servers, or -1.
func serverIndex(servers []raft.Server, id raft.ServerID) int {
	return slices.IndexFunc(servers, func(s raft.Server) bool { return s.ID == id })
}

// quorumSafe reports whether removing id from servers leaves a configuration
// whose alive voters are a majority of its voters. Removing a non-voter is
// always safe.
func quorumSafe(servers []raft.Server, id raft.ServerID, alive func(raft.ServerID) bool) (ok bool, aliveVoters, voters int) {
	for _, s := range servers {
		if s.ID == id {
			if s.Suffrage != raft.Voter {
				return true, 0, 0
			}
			continue
		}
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if alive(s.ID) {
			aliveVoters++
		}
	}
	return aliveVoters >= voters/2+1, aliveVoters, voters
}

// addServers does what Consul's leader does on a server's join and leave,
// which raft-autopilot leaves to the application: every alive manager of the
// datacenter missing from the configuration is added (raft-autopilot's
// AddServer: as a non-voter, promoted once healthy for
// ServerStabilizationTime), one back at a new Raft address takes it at once
// (a voter stays a voter) unless its old address is still live in the pool,
// and one that left is removed at once (raft-autopilot's RemoveServer) if
// the alive voters stay a majority. The pool's claims resolveIdentities
// refuses are left out, and recorded (identity.go).
// raft-autopilot's own pruning would remove a departed voter too, but never
// one of two voters, while a follower leaving a two-voter group can still
// acknowledge its removal. Leader only.
func (a *Autopilot) addServers() {
	f := a.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		a.log.Warn("reading the configuration", logging.KeyError, err)
		return
	}
	servers := f.Configuration().Servers
	byID, refusals := resolveIdentities(servers, a.pool.Members(), a.cfg.DC)
	a.recordRefusals(refusals, time.Now())
	a.dmu.Lock()
	unreachable := maps.Clone(a.unreachable)
	a.dmu.Unlock()
	alive := a.reachedIn(a.aliveIn(byID), unreachable, time.Now())
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		m := byID[id]
		if m.State == membership.StateLeft && string(id) != a.cfg.NodeID &&
			serverIndex(servers, id) >= 0 {
			if ok, _, _ := quorumSafe(servers, id, alive); !ok {
				continue // allowRemovals logs the refusal
			}
			a.log.Info("removing server", logging.KeyPeer, string(id), logging.KeyReason, "left")
			if err := a.lib.RemoveServer(id); err != nil {
				a.log.Warn("removing server failed", logging.KeyPeer, string(id), logging.KeyError, err)
				return
			}
			servers = slices.DeleteFunc(slices.Clone(servers), func(s raft.Server) bool { return s.ID == id })
			continue
		}
		if !serving(m) || string(id) == a.cfg.NodeID || m.Meta.RaftAddr == "" {
			continue
		}
		addr := raft.ServerAddress(m.Meta.RaftAddr)
		what, as := "adding voter", "non-voter until healthy"
		if i := serverIndex(servers, id); i >= 0 {
			if servers[i].Address == addr {
				continue
			}
			what, as = "updating voter address", servers[i].Suffrage.String()
		}
		a.log.Info(what, logging.KeyPeer, string(id), logging.KeyAddr, string(addr), logging.KeyState, as)
		if err := a.lib.AddServer(&raftautopilot.Server{ID: id, Name: m.Name, Address: addr,
			NodeStatus: raftautopilot.NodeAlive, NodeType: raftautopilot.NodeVoter}); err != nil {
			a.log.Warn(what+" failed", logging.KeyPeer, string(id), logging.KeyError, err)
			return // leadership lost or raft busy: next round
		}
	}
}
