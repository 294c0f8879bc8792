package autopilot

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
)

// managersByID returns, per NodeID, the pool's best record of each manager of
// dc: an alive record if there is one, else the most recently departed.
func managersByID(members []membership.Member, dc string) map[raft.ServerID]membership.Member {
	out := make(map[raft.ServerID]membership.Member)
	for _, m := range members {
		if m.Meta.Role != membership.RoleManager || m.Meta.Datacenter != dc || m.Meta.NodeID == "" {
			continue
		}
		id := raft.ServerID(m.Meta.NodeID)
		cur, ok := out[id]
		switch {
		case !ok:
		case cur.State == membership.StateAlive && m.State != membership.StateAlive:
			continue
		case cur.State != membership.StateAlive && m.State == membership.StateAlive:
		case cur.State == membership.StateAlive: // two alive records: keep the first by name
			continue
		case !m.LastSeen.After(cur.LastSeen):
			continue
		}
		out[id] = m
	}
	return out
}

// removal is a server the leader wants out of the configuration.
type removal struct {
	id     raft.ServerID
	reason string // "left", "failed", "absent"
	since  time.Time
}

// removals lists the servers to remove now: those that left, and those that
// failed (or that the pool does not know) for at least grace. absentSince
// keeps, across calls, when an unknown server was first noticed. Left ones
// come first, then the longest gone.
func removals(servers []raft.Server, self raft.ServerID, byID map[raft.ServerID]membership.Member,
	absentSince map[raft.ServerID]time.Time, now time.Time, grace time.Duration) []removal {
	var out []removal
	for _, s := range servers {
		if s.ID == self {
			continue // the leader never removes itself here (see Leave)
		}
		m, known := byID[s.ID]
		if known && m.State == membership.StateAlive {
			delete(absentSince, s.ID)
			continue
		}
		switch {
		case known && m.State == membership.StateLeft:
			out = append(out, removal{s.ID, "left", m.LastSeen})
		case known:
			if now.Sub(m.LastSeen) >= grace {
				out = append(out, removal{s.ID, "failed", m.LastSeen})
			}
		default:
			since, ok := absentSince[s.ID]
			if !ok {
				since = now
				absentSince[s.ID] = now
			}
			if now.Sub(since) >= grace {
				out = append(out, removal{s.ID, "absent", since})
			}
		}
	}
	for id := range absentSince {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) {
			delete(absentSince, id)
		}
	}
	slices.SortFunc(out, func(a, b removal) int {
		if (a.reason == "left") != (b.reason == "left") {
			if a.reason == "left" {
				return -1
			}
			return 1
		}
		return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.id, b.id))
	})
	return out
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

// reconcile makes the Raft configuration follow the pool. Leader only.
func (a *Autopilot) reconcile() {
	f := a.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		a.log.Warn("reconcile: reading the configuration", logging.KeyError, err)
		return
	}
	// Clone: raft hands every caller the same backing array.
	servers := slices.Clone(f.Configuration().Servers)
	self := raft.ServerID(a.cfg.NodeID)
	byID := managersByID(a.pool.Members(), a.cfg.DC)
	defer func() {
		a.mu.Lock()
		a.st.lastReconcile = time.Now()
		a.mu.Unlock()
	}()

	// Alive managers that are missing, non-voters, or at a new address.
	ids := make([]raft.ServerID, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := byID[id]
		if m.State != membership.StateAlive || m.Meta.Leaving || id == self || m.Meta.RaftAddr == "" {
			continue
		}
		addr := raft.ServerAddress(m.Meta.RaftAddr)
		i := slices.IndexFunc(servers, func(s raft.Server) bool { return s.ID == id })
		what := "adding voter"
		if i >= 0 {
			s := servers[i]
			switch {
			case s.Suffrage == raft.Voter && s.Address == addr:
				continue
			case s.Suffrage == raft.Voter:
				what = "updating voter address"
			default:
				what = "promoting to voter"
			}
		}
		a.log.Info(what, logging.KeyPeer, string(id), logging.KeyAddr, string(addr))
		if err := a.raft.AddVoter(id, addr, 0, a.cfg.ChangeTimeout).Error(); err != nil {
			a.log.Warn(what+" failed", logging.KeyPeer, string(id), logging.KeyError, err)
			return // leadership lost or raft busy: next round
		}
		if i >= 0 {
			servers[i] = raft.Server{Suffrage: raft.Voter, ID: id, Address: addr}
		} else {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: id, Address: addr})
		}
	}

	// A voter that failed or that the pool does not know is removed only if
	// this leader's heartbeats fail to reach it too: the pool may be a
	// fragment (managers restarted with only each other as seeds), and Raft
	// is the better witness of its own peers.
	reachable := func(id raft.ServerID) bool {
		_, failing := a.unreachable[id]
		return !failing
	}
	alive := func(id raft.ServerID) bool {
		m, ok := byID[id]
		return id == self || (ok && m.State == membership.StateAlive)
	}
	now := time.Now()
	for _, r := range removals(servers, self, byID, a.absentSince, now, a.cfg.DeadServerGrace) {
		if r.reason != "left" && reachable(r.id) {
			if !a.held[r.id] {
				a.held[r.id] = true
				a.log.Warn("not removing server: raft still reaches it", logging.KeyPeer, string(r.id), logging.KeyReason, r.reason)
			}
			continue
		}
		delete(a.held, r.id)
		ok, av, v := quorumSafe(servers, r.id, alive)
		if !ok {
			if !a.refused[r.id] {
				a.refused[r.id] = true
				a.log.Warn("not removing server: quorum would be at risk", logging.KeyPeer, string(r.id),
					logging.KeyReason, r.reason, logging.KeyAlive, av, logging.KeyVoters, v)
			}
			continue
		}
		delete(a.refused, r.id)
		a.log.Info("removing server", logging.KeyPeer, string(r.id), logging.KeyReason, r.reason,
			logging.KeyDuration, now.Sub(r.since).Round(time.Millisecond))
		if err := a.raft.RemoveServer(r.id, 0, a.cfg.ChangeTimeout).Error(); err != nil {
			a.log.Warn("removing server failed", logging.KeyPeer, string(r.id), logging.KeyError, err)
			return
		}
		servers = slices.DeleteFunc(servers, func(s raft.Server) bool { return s.ID == r.id })
	}
	for id := range a.held {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) || !reachable(id) {
			delete(a.held, id)
		}
	}
	for id := range a.refused {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) || alive(id) {
			delete(a.refused, id)
		}
	}
}
