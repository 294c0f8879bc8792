package autopilot

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/pkg/api"
)

// Gossip is not trusted for identity. The pool is how managers find each
// other, but anyone who can join it can claim any NodeID and Raft address in
// its meta; taking those claims at face value would let one pool member
// re-address a voter (keeping its vote) or, by claiming a live server's Raft
// address under a new ID, get that server removed (raft-autopilot's
// AddServer removes a server whose address a newcomer takes). So before the
// leader acts on the pool, resolveIdentities checks every claim against the
// Raft configuration and the rest of the pool, and refuses:
//
//   - RefusedDuplicateID: two or more live members claim one NodeID. Neither
//     identity changes: the claimant at the configuration's address (if any)
//     stands for the ID, the others are ignored.
//   - RefusedOldAddressAlive: a member claims a server's ID with another Raft
//     address while a live member still advertises the configuration's
//     address. A real move (a container back with a new IP) is taken once
//     the old member is dead or left.
//   - RefusedAddressInUse: a member claims the Raft address of a server of
//     the configuration with another ID while that server is live (a live
//     member claims its ID, at that address or another), or, for an address
//     the configuration does not hold, while a live member of another ID
//     claims it too (every such claimant is refused).
//   - RefusedOldProtocol: a server not in the configuration advertises a
//     protocol version older than the lowest the configuration's servers
//     advertise; it would not read the entries the group writes.
//
// A member is live while the pool has not found it dead or left (a suspect
// or leaving member still holds its identity).

// Refusal reasons (the reason label of once_manager_autopilot_refusals_total).
const (
	RefusedDuplicateID     = "duplicate_id"
	RefusedOldAddressAlive = "old_address_alive"
	RefusedAddressInUse    = "address_in_use"
	RefusedOldProtocol     = "old_protocol"
)

// Refusal is a pool member's claim the leader refused to act on, as the
// status reports it: Reason is one of the Refused* constants; Holder is the
// pool name of the other claimant, or the Raft server ID whose address is
// claimed, or for RefusedOldProtocol the group's version; Since is when this
// leader first refused the claim.
type Refusal = api.RefusedServer

func refusalKey(r Refusal) string {
	return r.Reason + "\x00" + r.Node + "\x00" + r.ID + "\x00" + r.RaftAddr
}

// live reports whether m still holds what it claims.
func live(m membership.Member) bool {
	return m.State == membership.StateAlive || m.State == membership.StateSuspect
}

// memberVersion is what m advertises; 0 is a build before gating (1).
func memberVersion(m membership.Member) int { return max(m.Meta.Version, 1) }

// resolveIdentities returns, per NodeID, the pool record the leader may act
// on for each manager of dc (the accepted live claimant; without one, the
// most recently departed record), and the claims it refuses. servers is the
// Raft configuration.
func resolveIdentities(servers []raft.Server, members []membership.Member, dc string) (map[raft.ServerID]membership.Member, []Refusal) {
	cfgAddr := make(map[raft.ServerID]raft.ServerAddress, len(servers))
	cfgByAddr := make(map[string]raft.ServerID, len(servers))
	for _, s := range servers {
		cfgAddr[s.ID] = s.Address
		cfgByAddr[string(s.Address)] = s.ID
	}
	var mgrs []membership.Member
	for _, m := range members {
		if m.Meta.Role == membership.RoleManager && m.Meta.Datacenter == dc && m.Meta.NodeID != "" {
			mgrs = append(mgrs, m)
		}
	}
	slices.SortFunc(mgrs, func(x, y membership.Member) int { return cmp.Compare(x.Name, y.Name) })
	// Live members by Raft address, of every ID.
	holders := make(map[string][]membership.Member)
	for _, m := range mgrs {
		if live(m) && m.Meta.RaftAddr != "" {
			holders[m.Meta.RaftAddr] = append(holders[m.Meta.RaftAddr], m)
		}
	}
	// The group's version: the lowest its servers advertise, as seen through
	// the claimants at the configuration's addresses (0: none known).
	group := 0
	for _, s := range servers {
		for _, h := range holders[string(s.Address)] {
			if raft.ServerID(h.Meta.NodeID) == s.ID {
				if v := memberVersion(h); group == 0 || v < group {
					group = v
				}
			}
		}
	}

	var refusals []Refusal
	refuse := func(m membership.Member, reason, holder string) {
		refusals = append(refusals, Refusal{Reason: reason, Node: m.Name, ID: m.Meta.NodeID,
			RaftAddr: m.Meta.RaftAddr, Version: m.Meta.Version, Holder: holder})
	}
	// addrOK: m may use its Raft address (no live member of another ID holds
	// it by right).
	addrOK := func(m membership.Member) bool {
		id := raft.ServerID(m.Meta.NodeID)
		if m.Meta.RaftAddr == "" {
			return true
		}
		if owner, ok := cfgByAddr[m.Meta.RaftAddr]; ok {
			// Another server's address is in use while any live member
			// claims that server's ID (at that address or, moving, at
			// another); once it is dead, its replacement may take it.
			if owner != id && slices.ContainsFunc(mgrs, func(h membership.Member) bool {
				return live(h) && raft.ServerID(h.Meta.NodeID) == owner
			}) {
				refuse(m, RefusedAddressInUse, string(owner))
				return false
			}
			return true
		}
		for _, h := range holders[m.Meta.RaftAddr] {
			if h.Meta.NodeID != m.Meta.NodeID {
				refuse(m, RefusedAddressInUse, h.Name)
				return false
			}
		}
		return true
	}

	byID := make(map[raft.ServerID][]membership.Member)
	for _, m := range mgrs {
		byID[raft.ServerID(m.Meta.NodeID)] = append(byID[raft.ServerID(m.Meta.NodeID)], m)
	}
	out := make(map[raft.ServerID]membership.Member, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		var claimants, departed []membership.Member
		for _, m := range byID[id] {
			if live(m) {
				claimants = append(claimants, m)
			} else {
				departed = append(departed, m)
			}
		}
		addr, inConfig := cfgAddr[id]
		accepted := false
		switch {
		case len(claimants) > 1:
			i := -1
			if inConfig {
				i = slices.IndexFunc(claimants, func(m membership.Member) bool { return m.Meta.RaftAddr == string(addr) })
			}
			for j, m := range claimants {
				if j == i {
					continue
				}
				holder := claimants[0].Name
				if i >= 0 {
					holder = claimants[i].Name
				} else if j == 0 {
					holder = claimants[1].Name
				}
				refuse(m, RefusedDuplicateID, holder)
			}
			if i >= 0 {
				out[id], accepted = claimants[i], true
			}
		case len(claimants) == 1:
			m := claimants[0]
			if !addrOK(m) {
				break
			}
			if inConfig && m.Meta.RaftAddr != string(addr) {
				if hs := holders[string(addr)]; len(hs) > 0 {
					refuse(m, RefusedOldAddressAlive, hs[0].Name)
					break
				}
			}
			if !inConfig && group > 0 && memberVersion(m) < group {
				refuse(m, RefusedOldProtocol, "version "+strconv.Itoa(group))
				break
			}
			out[id], accepted = m, true
		}
		if accepted || len(departed) == 0 {
			continue
		}
		out[id] = slices.MaxFunc(departed, func(x, y membership.Member) int { return x.LastSeen.Compare(y.LastSeen) })
	}
	return out, refusals
}

// managers is resolveIdentities on the current configuration and pool,
// without recording the refusals (recordRefusals does, on the Run
// goroutine).
func (a *Autopilot) managers() map[raft.ServerID]membership.Member {
	var servers []raft.Server
	if f := a.raft.GetConfiguration(); f.Error() == nil {
		servers = f.Configuration().Servers
	}
	byID, _ := resolveIdentities(servers, a.pool.Members(), a.cfg.DC)
	return byID
}

// recordRefusals keeps refusals as the current set, logging and counting
// each one that is new. Leader only; stopLib clears the set.
func (a *Autopilot) recordRefusals(refusals []Refusal, now time.Time) {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	next := make(map[string]Refusal, len(refusals))
	for _, r := range refusals {
		k := refusalKey(r)
		if prev, ok := a.refusals[k]; ok {
			r.Since = prev.Since
		} else {
			r.Since = now
			a.refusalCounts[r.Reason]++
			a.log.Warn("refusing a pool member's identity claim", logging.KeyReason, r.Reason,
				logging.KeyNode, r.Node, logging.KeyPeer, r.ID, logging.KeyRaftAddr, r.RaftAddr,
				logging.KeyHolder, r.Holder, logging.KeyVersion, r.Version)
		}
		next[k] = r
	}
	for k, r := range a.refusals {
		if _, ok := next[k]; !ok {
			a.log.Info("identity claim no longer refused", logging.KeyReason, r.Reason,
				logging.KeyNode, r.Node, logging.KeyPeer, r.ID, logging.KeyRaftAddr, r.RaftAddr)
		}
	}
	a.refusals = next
}

func (a *Autopilot) clearRefusals() {
	a.rmu.Lock()
	a.refusals = map[string]Refusal{}
	a.rmu.Unlock()
}

// Refused returns the claims this leader currently refuses, sorted by
// reason, ID and name (empty on a follower).
func (a *Autopilot) Refused() []Refusal {
	a.rmu.Lock()
	out := slices.Collect(maps.Values(a.refusals))
	a.rmu.Unlock()
	slices.SortFunc(out, func(x, y Refusal) int {
		return cmp.Or(cmp.Compare(x.Reason, y.Reason), cmp.Compare(x.ID, y.ID), cmp.Compare(x.Node, y.Node), cmp.Compare(x.RaftAddr, y.RaftAddr))
	})
	return out
}

// RefusalCounts returns how many claims this manager refused since it
// started, by reason (each refusal counted once, when first made).
func (a *Autopilot) RefusalCounts() map[string]uint64 {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	return maps.Clone(a.refusalCounts)
}
