package autopilot

// Bootstrap: how a datacenter's managers form exactly one Raft cluster.
//
// Consul and Nomad bootstrap when a server sees bootstrap_expect servers; two
// servers that see different sets at that moment can bootstrap two clusters.
// Here a fresh manager (no Raft state) keeps a VIEW: the set of NodeIDs of the
// managers of its datacenter it has ever seen alive in the pool since it
// started. The view only grows. The manager publishes a VOTE in its gossip
// meta: a fingerprint of its view (Meta.Bootstrap.Vote). A manager X calls
// BootstrapCluster, with a configuration of exactly its view S, only when
//
//	(a) X has no Raft state and has seen no manager of its datacenter with
//	    Raft state (alive, failed or left) — once it has, it never votes or
//	    bootstraps again;
//	(b) |S| >= BootstrapExpect, and X has joined the pool through its seeds;
//	(c) every member of S is alive and publishes the vote fingerprint(S);
//	(d) X has the lowest NodeID in S.
//
// Before calling BootstrapCluster, X publishes HasRaftState and withdraws its
// vote, and never votes again.
//
// Claim: two managers X != Y cannot both bootstrap, with sets S and S', if S
// and S' intersect (and the managers did not restart in between; see
// docs/operations.md for restarts).
//
//   - If S = S', X and Y are both its lowest NodeID: X = Y.
//   - If some Z is in both, Z published fingerprint(S) and fingerprint(S');
//     Z's view only grows, so S ⊂ S' or S' ⊂ S. Say S ⊊ S' (the other case
//     is symmetric with X and Y swapped). X is in S', so by (c) Y saw X
//     publish fingerprint(S'). But X's view was S when it decided, so before
//     that it was a subset of S and X never published fingerprint(S'); after
//     it, X publishes no vote at all. Contradiction.
//
// Staleness of gossip does not matter: the argument only uses "Z published
// this vote at some time", which a stale copy still proves. Disjoint S and S'
// need at least 2 × BootstrapExpect fresh managers in one datacenter at once,
// each group never hearing of the other; operators set bootstrap_expect to the
// number of initial managers, which rules that out.
//
// Safety never depends on timing. Liveness does: if a member of a view dies
// before the cluster forms, the others wait (they log what for) until it
// comes back or they are restarted.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
)

type bootstrapState struct {
	view     map[string]string // NodeID -> latest Raft address; never shrinks
	sawState bool              // a manager with Raft state was seen: never vote or bootstrap
	decided  *raft.Configuration
	done     bool // BootstrapCluster succeeded or found state
}

// decision is what decide concludes from one look at the pool.
type decision struct {
	stop      bool                // an existing cluster: stop voting for good
	vote      uint64              // the vote to publish (0 with stop)
	bootstrap *raft.Configuration // set when this manager must bootstrap now
	reason    string              // why it waits or stops
}

// fingerprint of a set of NodeIDs, given sorted; never 0 (0 means "no
// vote").
func fingerprint(ids []string) uint64 {
	h := fnv.New64a()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// decide applies rules (a)-(d) above. It grows view with the alive managers
// of dc; it reads nothing else and does no I/O.
func decide(view map[string]string, self, selfAddr, dc string, expect int, members []membership.Member) decision {
	alive := make(map[string]membership.Member)
	for _, m := range members {
		if m.Meta.Role != membership.RoleManager || m.Meta.Datacenter != dc || m.Meta.NodeID == "" {
			continue
		}
		if m.Meta.NodeID != self && m.Meta.HasRaftState {
			return decision{stop: true, reason: fmt.Sprintf("manager %s (%s) has raft state: the existing cluster adds this manager", m.Meta.NodeID, m.State)}
		}
		if m.State == membership.StateAlive && m.Meta.NodeID != self {
			if _, dup := alive[m.Meta.NodeID]; !dup {
				alive[m.Meta.NodeID] = m
			}
		}
	}
	view[self] = selfAddr
	for id, m := range alive {
		view[id] = m.Meta.RaftAddr
	}
	ids := slices.Sorted(maps.Keys(view))
	d := decision{vote: fingerprint(ids)}
	for _, id := range ids {
		m, ok := alive[id]
		if !ok {
			continue
		}
		if e := m.Meta.Bootstrap.Expect; e != expect {
			if e == 0 {
				d.reason = fmt.Sprintf("manager %s does not take part in bootstrap (its bootstrap_expect is 0)", id)
			} else {
				d.reason = fmt.Sprintf("manager %s has bootstrap_expect %d, this one %d: all must agree", id, e, expect)
			}
			return d
		}
	}
	if len(view) < expect {
		d.reason = fmt.Sprintf("seen %d of %d managers (%s)", len(view), expect, strings.Join(ids, ","))
		return d
	}
	for _, id := range ids {
		if id == self {
			continue
		}
		m, ok := alive[id]
		if !ok {
			d.reason = fmt.Sprintf("manager %s was seen but is not alive now", id)
			return d
		}
		if m.Meta.Bootstrap.Vote != d.vote {
			d.reason = fmt.Sprintf("manager %s has not seen the same managers yet", id)
			return d
		}
	}
	if ids[0] != self {
		d.reason = fmt.Sprintf("all %d managers agree; %s (lowest ID) bootstraps", len(ids), ids[0])
		return d
	}
	cfg := raft.Configuration{}
	for _, id := range ids {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(view[id])})
	}
	d.bootstrap = &cfg
	return d
}

// bootstrapStep runs one round of the bootstrap protocol for a manager
// without Raft state.
func (a *Autopilot) bootstrapStep() {
	if a.cfg.BootstrapExpect == 0 {
		a.setWaiting("bootstrap disabled (bootstrap_expect 0): waiting for a leader to add this manager")
		return
	}
	if a.boot.sawState {
		return
	}
	select {
	case <-a.pool.Joined():
	default:
		a.setWaiting("joining the pool through the seeds")
		return
	}
	if a.boot.view == nil {
		a.boot.view = make(map[string]string)
	}
	d := decide(a.boot.view, a.cfg.NodeID, a.cfg.RaftAddr, a.cfg.DC, a.cfg.BootstrapExpect, a.pool.Members())
	if d.stop {
		a.boot.sawState = true
		a.setWaiting(d.reason)
		a.modifyMeta(func(m *membership.Meta) { m.Bootstrap.Vote = 0 })
		return
	}
	if a.pool.LocalNode().Meta.Bootstrap.Vote != d.vote {
		if !a.modifyMeta(func(m *membership.Meta) { m.Bootstrap.Vote = d.vote }) {
			return
		}
		a.log.Debug("bootstrap vote", logging.KeyCount, len(a.boot.view), logging.KeyVote, d.vote)
	}
	if d.bootstrap == nil {
		a.setWaiting(d.reason)
		return
	}
	// Decided. Withdraw the vote and announce state first, for good: from
	// here on this manager never publishes a vote again (hasState latches).
	if !a.modifyMeta(announceState) {
		return
	}
	a.boot.decided = d.bootstrap
	a.log.Info("bootstrapping the raft cluster", logging.KeyExpect, a.cfg.BootstrapExpect,
		logging.KeyServers, serversString(d.bootstrap.Servers))
	a.tryBootstrap()
}

// tryBootstrap calls BootstrapCluster with the decided configuration; it is
// retried on later steps until Raft accepts it or reports existing state.
func (a *Autopilot) tryBootstrap() {
	err := a.raft.BootstrapCluster(*a.boot.decided).Error()
	switch {
	case err == nil:
		a.boot.done = true
		a.mu.Lock()
		a.st.Bootstrapped = true
		a.mu.Unlock()
		a.log.Info("raft cluster bootstrapped")
	case errors.Is(err, raft.ErrCantBootstrap):
		a.boot.done = true
		a.log.Warn("bootstrap skipped: raft already has state", logging.KeyError, err)
	default:
		a.log.Error("bootstrap failed; will retry", logging.KeyError, err)
	}
}

func serversString(servers []raft.Server) string {
	parts := make([]string, len(servers))
	for i, s := range servers {
		parts[i] = fmt.Sprintf("%s@%s(%s)", s.ID, s.Address, s.Suffrage)
	}
	return strings.Join(parts, ",")
}
