package managerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"
)

// clusterMembership is the manager's membership side: its place in the
// datacenter's LAN pool, the RPC addresses of its peers (for "not leader"
// hints), and the autopilot that bootstraps Raft and manages voters.
type clusterMembership struct {
	pool             *membership.Pool
	ap               *autopilot.Autopilot
	leaveOnTerminate bool
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	log              *slog.Logger
}

// lanView is the manager's window on its datacenter's LAN pool
// (manager.Deps.Peers and manager.Deps.Clock). The pool starts after the
// manager, whose metadata says whether the node has Raft state: until then
// the view knows no peer and has measured nobody, so a manager that may lead
// does not take its own clock on trust.
type lanView struct {
	manager.PeerTable
	pool atomic.Pointer[membership.Pool]
}

// ClockOffsets implements manager.ClockSource.
func (v *lanView) ClockOffsets() []membership.PeerOffset {
	if p := v.pool.Load(); p != nil {
		return p.ClockOffsets()
	}
	return nil
}

// refresh records the datacenter's managers as the pool sees them; an
// address a member stopped advertising is kept.
func (v *lanView) refresh(pool *membership.Pool, dc string) {
	for _, mem := range pool.Managers(dc) {
		p := manager.Peer{RPCAddr: mem.Meta.RPCAddr}
		if old, ok := v.Peer(mem.Meta.NodeID); ok && p.RPCAddr == "" {
			p.RPCAddr = old.RPCAddr
		}
		v.Set(mem.Meta.NodeID, p)
	}
}

// memberMeta is what the manager publishes about itself in both gossip
// pools.
func memberMeta(cfg manager.Config) membership.Meta {
	return membership.Meta{
		Role:       membership.RoleManager,
		Datacenter: cfg.Datacenter,
		NodeID:     cfg.NodeID,
		RPCAddr:    cfg.RPCAdvertise,
		RaftAddr:   cfg.RaftAdvertise,
		Version:    manager.ProtocolVersion,
		Settings:   cfg.Idempotency.Canonical(),
	}
}

// startCluster joins the LAN pool, feeds view from it and starts the
// autopilot. secret is the cluster secret ("" for none), from which the pool
// derives its keys when none is set; now is the clock m stamps with.
func startCluster(ctx context.Context, cfg manager.Config, secret string, now func() time.Time, m *manager.Manager,
	view *lanView, log *slog.Logger) (*clusterMembership, error) {
	hasState, err := m.HasState()
	if err != nil {
		return nil, fmt.Errorf("read raft state: %w", err)
	}
	meta := memberMeta(cfg)
	meta.HasRaftState = hasState
	mcfg, err := membership.Settings{Addr: cfg.GossipAddr, Advertise: cfg.GossipAdvertise, Keys: cfg.GossipKey,
		Profile: cfg.GossipProfile, Seeds: cfg.Join, Secret: secret, Label: membership.KeyLAN}.Config("MANAGER", cfg.NodeID, meta, log)
	if err != nil {
		return nil, err
	}
	mcfg.Now = now // offsets are measured against the clock the manager stamps with
	pool, err := membership.Start(ctx, mcfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	view.pool.Store(pool)
	cctx, cancel := context.WithCancel(context.Background())
	c := &clusterMembership{pool: pool, cancel: cancel, log: log, leaveOnTerminate: cfg.LeaveOnTerminate}

	// Peer RPC addresses for leader hints.
	events, unsubscribe := pool.Subscribe()
	c.wg.Go(func() {
		defer unsubscribe()
		refresh := func() { view.refresh(pool, cfg.Datacenter) }
		refresh()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case _, ok := <-events:
				if !ok {
					return
				}
				refresh()
			case <-tick.C:
				refresh()
			}
		}
	})

	c.startAutopilot(cctx, cfg, m, hasState)
	return c, nil
}

// startAutopilot runs the autopilot: it bootstraps the Raft group once
// MANAGER_BOOTSTRAP_EXPECT managers of the datacenter see each other (never
// twice), and, on the leader, runs hashicorp/raft-autopilot: joining managers
// are added and promoted to voter once healthy, and those that left or stayed
// dead past MANAGER_DEAD_SERVER_GRACE_SECONDS are removed (see
// docs/operations.md for how the settings map onto raft-autopilot's).
func (c *clusterMembership) startAutopilot(ctx context.Context, cfg manager.Config, m *manager.Manager, hasState bool) {
	c.ap = autopilot.New(autopilot.Config{
		DC:               cfg.Datacenter,
		NodeID:           cfg.NodeID,
		RaftAddr:         cfg.RaftAdvertise,
		BootstrapExpect:  cfg.BootstrapExpect,
		HasExistingState: hasState,
		DeadServerGrace:  cfg.DeadServerGrace,
		Logger:           c.log,
	}, m.Raft(), c.pool)
	m.SetAutopilot(c.ap)
	c.wg.Go(func() {
		if err := c.ap.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Error("autopilot stopped", logging.KeyError, err)
		}
	})
}

// leave runs on shutdown. With MANAGER_LEAVE_ON_TERMINATE the manager leaves
// the datacenter for good: it hands leadership over, announces the departure,
// and waits until the leader has removed it from the Raft configuration.
// Without it (the default, as for Consul servers) a stop is a restart-to-be:
// the manager stays a voter, and is removed only if it stays dead past the
// grace period.
func (c *clusterMembership) leave(ctx context.Context) {
	if !c.leaveOnTerminate || c.ap == nil {
		return
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d) / 2
	}
	if err := c.ap.Leave(ctx, timeout); err != nil {
		c.log.Warn("leaving the datacenter incomplete", logging.KeyError, err)
	}
}

// halt stops the autopilot and the peer watch, leaving the pool up. The
// autopilot waits on Raft futures, so it stops before the manager's Close
// shuts Raft down (a future asked for across the shutdown may never return).
func (c *clusterMembership) halt() {
	c.cancel()
	c.wg.Wait()
}

func (c *clusterMembership) stop() {
	c.halt()
	if err := c.pool.Shutdown(); err != nil {
		c.log.Warn("membership shutdown", logging.KeyError, err)
	}
}
