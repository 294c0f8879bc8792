package manager

import (
	"context"
	"errors"
)

// startAutopilot bootstraps the Raft group and keeps its voters in step with the
// pool. Until the autopilot package is wired in, a single-manager datacenter
// bootstraps itself.
func (c *clusterMembership) startAutopilot(ctx context.Context, cfg Config, m *Manager, hasState bool) error {
	if hasState {
		return nil
	}
	if cfg.BootstrapExpect == 1 {
		return m.BootstrapSelf()
	}
	return errors.New("autopilot not wired yet")
}
