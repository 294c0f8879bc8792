package gate

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
)

// startMembership joins the datacenter's LAN pool as a gate, so the gate learns
// the managers (and, through their "not leader" answers, the leader) without a
// static list.
func startMembership(ctx context.Context, cfg Config, log *slog.Logger) (*membership.Pool, error) {
	host, p, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvGossipAddr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvGossipAddr, err)
	}
	var key []byte
	var extra [][]byte
	if cfg.GossipKey != "" {
		// A comma-separated list: the first key encrypts, the others are
		// accepted too (rolling key rotation, docs/operations.md).
		if key, extra, err = membership.ParseSecretKeys(cfg.GossipKey); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvGossipKey, err)
		}
	}
	var advHost string
	var advPort int
	if cfg.GossipAdvertise != "" {
		if advHost, advPort, err = membership.ResolveAdvertise(cfg.GossipAdvertise); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvGossipAdvertise, err)
		}
	}
	pool, err := membership.Start(ctx, membership.Config{
		NodeName:      cfg.NodeName,
		BindAddr:      host,
		BindPort:      port,
		AdvertiseAddr: advHost,
		AdvertisePort: advPort,
		Seeds:         cfg.Join,
		SecretKey:     key,
		ExtraKeys:     extra,
		Profile:       cfg.GossipProfile,
		Logger:        log,
		Meta:          membership.Meta{Role: membership.RoleGate, Datacenter: cfg.Datacenter, NodeID: cfg.NodeName, Version: 1},
	})
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
