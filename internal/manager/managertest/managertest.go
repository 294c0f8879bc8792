// Package managertest runs real managers in-process for the tests of other
// packages (the gate's): one Raft group of managers on raft's in-memory
// transport, each serving the gates' RPC (rpc.NewServer) on a port of
// 127.0.0.1, stopped when the test ends.
//
// The managers are explicitly insecure, as MANAGER_INSECURE=true: plain TCP,
// no cluster secret. Their ledgers live in t.TempDir. A test that needs a
// manager to fail in a way it would not on its own (slow, answering an error,
// without a leader) wraps the served rpc.Service (Options.Serve): a fault at
// the boundary, never a second implementation of the manager.
package managertest

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// Options configure a Cluster. Zero values take the defaults noted.
type Options struct {
	// Managers is how many managers the Raft group has (default 1).
	Managers int
	// Datacenter names their datacenter (default dc1).
	Datacenter string
	// Now is every manager's clock (manager.Deps.Now; default time.Now).
	Now func() time.Time
	// Config adjusts each manager's configuration (after the test timings
	// below) before it starts.
	Config func(*manager.Config)
	// Serve returns what manager m's RPC server serves (default m itself):
	// a test's fault layer around it.
	Serve func(m *manager.Manager) rpc.Service
	// Federation is the view the managers serve (rpc.Server.SetFederation)
	// (default: their datacenter alone, with their RPC addresses).
	Federation func() *rpcpb.FederationView
	// Knobs are every manager's test knobs (manager.Deps.Knobs).
	Knobs manager.TestingKnobs
}

// Cluster is a running Raft group of managers.
type Cluster struct {
	// Managers and Addrs (their RPC addresses, host:port) are in start
	// order.
	Managers []*manager.Manager
	Addrs    []string
	// Transports are their Raft transports, every pair connected: a test
	// partitions managers with Disconnect and heals with Connect.
	Transports []*raft.InmemTransport
	// Datacenter is their datacenter.
	Datacenter string
}

// Start starts the managers, bootstraps them as one group and waits until
// one of them leads and serves. Everything stops when the test ends.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Managers <= 0 {
		opts.Managers = 1
	}
	opts.Datacenter = cmp.Or(opts.Datacenter, "dc1")
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cluster{Datacenter: opts.Datacenter}
	peers := &manager.PeerTable{}
	cfgs := make([]manager.Config, opts.Managers)
	lns := make([]net.Listener, opts.Managers)
	trans := make([]*raft.InmemTransport, opts.Managers)
	c.Transports = trans
	var servers []raft.Server
	base := tb.TempDir()
	for i := range cfgs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = ln.Close() }) // an error path before Serve
		lns[i] = ln
		addr, tr := raft.NewInmemTransport("")
		trans[i] = tr
		cfg := Config(fmt.Sprintf("m%d", i+1), filepath.Join(base, fmt.Sprintf("m%d", i+1)))
		if opts.Managers == 1 {
			// Alone, a manager elects itself once its first heartbeat
			// timeout passes, and has no follower to lose.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		}
		cfg.Datacenter = opts.Datacenter
		cfg.RaftAddr, cfg.RaftAdvertise = string(addr), string(addr)
		cfg.RPCAddr, cfg.RPCAdvertise = ln.Addr().String(), ln.Addr().String()
		if opts.Config != nil {
			opts.Config(&cfg)
		}
		cfgs[i] = cfg
		c.Addrs = append(c.Addrs, cfg.RPCAdvertise)
		peers.Set(cfg.NodeID, manager.Peer{RPCAddr: cfg.RPCAdvertise})
		servers = append(servers, raft.Server{ID: raft.ServerID(cfg.NodeID), Address: addr})
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	federation := opts.Federation
	if federation == nil {
		federation = func() *rpcpb.FederationView {
			return &rpcpb.FederationView{Datacenter: opts.Datacenter,
				Datacenters: map[string]*rpcpb.Managers{opts.Datacenter: {Addrs: c.Addrs}}}
		}
	}
	// Registered before the servers' Cleanups, this runs after them. The
	// transports are cut first: a manager closing would otherwise hand
	// leadership to one already closed, and raft's in-memory transport waits
	// out its timeout on a peer that no longer reads.
	tb.Cleanup(func() {
		for _, tr := range trans {
			tr.DisconnectAll()
		}
		var wg sync.WaitGroup
		for _, m := range c.Managers {
			wg.Go(func() {
				if err := m.Close(); err != nil {
					tb.Errorf("close manager %s: %v", m.Config().NodeID, err)
				}
			})
		}
		wg.Wait()
	})
	for i, cfg := range cfgs {
		m, err := manager.New(cfg, manager.Deps{Logger: testutil.Logger(tb).With("manager", cfg.NodeID),
			Now: opts.Now, Transport: trans[i], Peers: peers, Knobs: opts.Knobs})
		if err != nil {
			tb.Fatalf("start manager %s: %v", cfg.NodeID, err)
		}
		c.Managers = append(c.Managers, m)
		var svc rpc.Service = m
		if opts.Serve != nil {
			svc = opts.Serve(m)
		}
		serve(tb, svc, lns[i], federation)
	}
	if err := c.Managers[0].Bootstrap(servers); err != nil {
		tb.Fatalf("bootstrap: %v", err)
	}
	c.Leader(tb)
	return c
}

// Config is a manager's configuration for a test: nodeID's, its ledger in
// dataDir, Raft timings short enough for an election in well under a
// second, and everything else the default.
func Config(nodeID, dataDir string) manager.Config {
	cfg := manager.DefaultConfig()
	cfg.NodeID = nodeID
	cfg.DataDir = dataDir
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	return cfg
}

// serve serves svc's RPC on ln until the test ends (the Cleanups registered
// later, the managers' Close among them, run before it stops).
func serve(tb testing.TB, svc rpc.Service, ln net.Listener, federation func() *rpcpb.FederationView) {
	srv := rpc.NewServer(svc, rpc.ServerConfig{Logger: testutil.Logger(tb).With("rpc", ln.Addr().String())})
	srv.SetFederation(federation)
	rpctest.Serve(tb, srv, ln)
}

// Leader waits (15 s at most) until a manager leads and serves, and returns
// it.
func (c *Cluster) Leader(tb testing.TB) *manager.Manager {
	tb.Helper()
	var leader *manager.Manager
	testutil.WaitFor(tb, 15*time.Second, func() (bool, string) {
		for _, m := range c.Managers {
			if st, err := m.Status(context.Background()); err == nil && st.IsLeader {
				leader = m
				return true, ""
			}
		}
		return false, "a serving leader"
	})
	return leader
}
