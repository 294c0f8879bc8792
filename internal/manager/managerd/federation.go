package managerd

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// federation is the manager's view of every datacenter: its own datacenter's
// managers from the LAN pool, the others' from the WAN pool that the managers
// of every datacenter join (as Consul's servers do). Gates read it (the RPC
// service's Federation method, rpc.Server.SetFederation) and forward to other datacenters' leaders directly.
type federation struct {
	dc string
	// settings is this manager's config.Idempotency.Canonical, which every
	// manager publishes in both pools' metadata (mismatches).
	settings string
	lan      atomic.Pointer[membership.Pool]
	wan      *membership.Pool // nil: a single-datacenter manager
	log      *slog.Logger
	// known remembers the other datacenters across restarts (knownDatacenters).
	known *knownDatacenters
}

// startFederation joins the WAN pool when MANAGER_WAN_GOSSIP_ADDR is set.
// The pool's node name is membership.WANNodeName, unique across datacenters.
// secret is the cluster secret ("" for none), from which the pool derives
// its keys when none is set; wrap, when not nil, wraps the pool's network
// transport (Options).
func startFederation(ctx context.Context, cfg manager.Config, secret string, log *slog.Logger,
	wrap func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport) (*federation, error) {
	f := &federation{dc: cfg.Datacenter, settings: cfg.Idempotency.Canonical(), log: log}
	if cfg.WANGossipAddr == "" {
		return f, nil
	}
	profile := membership.ProfileWAN
	if cfg.GossipProfile == membership.ProfileLocal {
		profile = membership.ProfileLocal // one host: the local timings serve both pools
	}
	mcfg, err := membership.Settings{Addr: cfg.WANGossipAddr, Advertise: cfg.WANGossipAdvertise, Keys: cfg.WANGossipKey,
		Profile: profile, Seeds: cfg.WANJoin, Secret: secret, Label: membership.KeyWAN}.Config("MANAGER_WAN", membership.WANNodeName(cfg.NodeID, cfg.Datacenter), memberMeta(cfg),
		log.With(logging.KeyComponent, "wan"))
	if err != nil {
		return nil, err
	}
	mcfg.WAN = true
	mcfg.WrapTransport = wrap
	pool, err := membership.Start(ctx, mcfg)
	if err != nil {
		return nil, fmt.Errorf("wan membership: %w", err)
	}
	f.wan = pool
	path := "" // no data directory (tests): remembered in memory only
	if cfg.DataDir != "" {
		path = filepath.Join(cfg.DataDir, knownDatacentersFile)
	}
	if f.known, err = loadKnownDatacenters(path, log); err != nil {
		_ = pool.Shutdown()
		return nil, err
	}
	log.Info("joined the federation's WAN pool", logging.KeyAddr, pool.Addr())
	return f, nil
}

// view is the federation view this manager serves (rpc.Server.SetFederation):
// its datacenter and datacenters.
func (f *federation) view() *rpcpb.FederationView {
	dcs := f.datacenters()
	out := &rpcpb.FederationView{Datacenter: f.dc, Datacenters: make(map[string]*rpcpb.Managers, len(dcs))}
	for dc, addrs := range dcs {
		out.Datacenters[dc] = &rpcpb.Managers{Addrs: addrs}
	}
	return out
}

// datacenters is the federation as this manager knows it: every datacenter
// with a manager in the WAN pool (alive or not: a datacenter whose managers
// are all down is still a datacenter of the federation, unreachable for now),
// mapped to its alive managers' RPC addresses, sorted and never nil; its own
// datacenter from the LAN pool. A datacenter the pool does not name (yet) that
// this manager knew within rpc.FederationMemory, even before a restart, is
// kept with the addresses it last had (knownDatacenters).
func (f *federation) datacenters() map[string][]string {
	out := map[string][]string{}
	if f.wan != nil {
		for _, m := range f.wan.Members() {
			if m.Meta.Role != membership.RoleManager || m.Meta.Datacenter == f.dc {
				continue
			}
			addrs := out[m.Meta.Datacenter]
			if m.State == membership.StateAlive && m.Meta.RPCAddr != "" {
				addrs = append(addrs, m.Meta.RPCAddr)
			}
			out[m.Meta.Datacenter] = addrs
		}
	}
	if f.known != nil {
		f.known.merge(out, f.dc, time.Now())
	}
	own := []string{}
	if lan := f.lan.Load(); lan != nil {
		for _, m := range lan.Managers(f.dc) {
			if m.Meta.RPCAddr != "" {
				own = append(own, m.Meta.RPCAddr)
			}
		}
	}
	out[f.dc] = own
	for dc, addrs := range out {
		if addrs == nil {
			addrs = []string{}
		}
		slices.Sort(addrs)
		out[dc] = addrs
	}
	return out
}

// mismatches lists the settings that must agree across the federation
// (config.DiffCanonical) where another node's differ from this manager's: the
// managers of every datacenter from the WAN pool, or this datacenter's from
// the LAN pool when the manager is not federated, and this datacenter's gates
// from the LAN pool (other datacenters' gates are their leaders' to report).
// A gate uses every setting DiffCanonical compares (its cache's lifetimes and
// the waiting rule), so a gate is compared as a manager is; it is named by
// its pool name (GATE_NODE_NAME/gate). Alive members only, by datacenter,
// node and setting.
func (f *federation) mismatches() []rpc.ConfigMismatch {
	members := f.comparedMembers()
	out := []rpc.ConfigMismatch{}
	for _, m := range members {
		if m.State != membership.StateAlive {
			continue
		}
		node := m.Meta.NodeID
		if m.Meta.Role == membership.RoleGate {
			// Its pool name (host/gate): a gate and a manager on one host
			// may share the node name.
			node = membership.GateNodeName(node)
		}
		for _, d := range config.DiffCanonical(f.settings, m.Meta.Settings) {
			out = append(out, rpc.ConfigMismatch{Datacenter: m.Meta.Datacenter, Node: node,
				Setting: d.Setting, Local: d.Local, Remote: d.Remote})
		}
	}
	slices.SortFunc(out, func(a, b rpc.ConfigMismatch) int {
		return cmp.Or(cmp.Compare(a.Datacenter, b.Datacenter), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Setting, b.Setting))
	})
	return out
}

// comparedMembers is the members mismatches compares with this manager: the
// WAN pool's managers when federated, else the LAN pool's, and the LAN pool's
// gates of this datacenter either way.
func (f *federation) comparedMembers() []membership.Member {
	var lan []membership.Member
	if p := f.lan.Load(); p != nil {
		lan = p.Members()
	}
	managers := lan
	if f.wan != nil {
		managers = f.wan.Members()
	}
	var out []membership.Member
	for _, m := range managers {
		if m.Meta.Role == membership.RoleManager {
			out = append(out, m)
		}
	}
	for _, m := range lan {
		if m.Meta.Role == membership.RoleGate && m.Meta.Datacenter == f.dc {
			out = append(out, m)
		}
	}
	return out
}

// stop leaves the WAN pool and shuts it down.
func (f *federation) stop() {
	if f.wan == nil {
		return
	}
	if err := f.wan.Leave(2 * time.Second); err != nil {
		f.log.Warn("leaving the WAN pool", logging.KeyError, err)
	}
	if err := f.wan.Shutdown(); err != nil {
		f.log.Warn("WAN membership shutdown", logging.KeyError, err)
	}
}
