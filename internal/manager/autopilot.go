package manager

import (
	"context"
	"errors"

	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/logging"
)

// startAutopilot runs the autopilot: it bootstraps the Raft group once
// MANAGER_BOOTSTRAP_EXPECT managers of the datacenter see each other (never
// twice), and, on the leader, adds joining managers as voters and removes those
// that left or stayed dead past MANAGER_DEAD_SERVER_GRACE_SECONDS.
func (c *clusterMembership) startAutopilot(ctx context.Context, cfg Config, m *Manager, hasState bool) error {
	c.ap = autopilot.New(autopilot.Config{
		DC:               cfg.Datacenter,
		NodeID:           cfg.NodeID,
		RaftAddr:         cfg.RaftAdvertise,
		BootstrapExpect:  cfg.BootstrapExpect,
		HasExistingState: hasState,
		DeadServerGrace:  cfg.DeadServerGrace,
		Logger:           c.log,
	}, m.Raft(), c.pool)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := c.ap.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Error("autopilot stopped", logging.KeyError, err)
		}
	}()
	return nil
}
