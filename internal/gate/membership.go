package gate

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// startMembership joins the datacenter's LAN pool as a gate, so the gate learns
// the managers (and, through their "not leader" answers, the leader) without a
// static list. It publishes its IDEMPOTENCY_* settings that must agree with
// the managers' (config.Idempotency.Canonical), which the managers compare
// with theirs and report when they differ.
// Without GATE_GOSSIP_KEY the pool's key is derived from the cluster secret
// (empty: plaintext, insecure mode).
func startMembership(ctx context.Context, cfg Config, secret string, log *slog.Logger) (*membership.Pool, error) {
	mcfg, err := membership.Settings{Addr: cfg.GossipAddr, Advertise: cfg.GossipAdvertise, Keys: cfg.GossipKey,
		Profile: cfg.GossipProfile, Seeds: cfg.Join, Secret: secret, Label: membership.KeyLAN}.Config("GATE", membership.GateNodeName(cfg.NodeName),
		membership.Meta{Role: membership.RoleGate, Datacenter: cfg.Datacenter, NodeID: cfg.NodeName, Version: 1,
			Settings: cfg.Idempotency.Canonical()}, log)
	if err != nil {
		return nil, err
	}
	pool, err := membership.Start(ctx, mcfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return pool, nil
}

// poolResolver lists the RPC addresses of the datacenter's alive managers from
// the pool, falling back to the static list while the pool knows none.
func poolResolver(pool *membership.Pool, dc string, static []string) rpc.Resolver {
	static = append([]string(nil), static...)
	return rpc.ResolverFunc(func() []string {
		var out []string
		for _, m := range pool.Managers(dc) {
			if m.Meta.RPCAddr != "" {
				out = append(out, m.Meta.RPCAddr)
			}
		}
		if len(out) == 0 {
			return static
		}
		return out
	})
}

// poolGates lists the gates of the pool, alive or departed, for GET
// /v1/cluster.
func poolGates(pool *membership.Pool) func() []api.ClusterGate {
	return func() []api.ClusterGate {
		var out []api.ClusterGate
		for _, m := range pool.Members() {
			if m.Meta.Role == membership.RoleGate {
				out = append(out, api.ClusterGate{Name: m.Meta.NodeID, Datacenter: m.Meta.Datacenter, Addr: m.Addr, State: m.State.String()})
			}
		}
		return out
	}
}
