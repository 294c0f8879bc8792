package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/testutil"
)

// TestGateAndManagerOfOneHostShareThePool: a gate and a manager on one host
// both default to the host name (GATE_NODE_NAME, MANAGER_NODE_ID). In the
// datacenter's pool, which they share, each is a member all the same: the
// other managers see both, the manager sees the gate, and the gate sees the
// manager and lists itself under its own name in GET /v1/cluster.
func TestGateAndManagerOfOneHostShareThePool(t *testing.T) {
	startManagerPool := func(id, rpcAddr string, seeds ...string) *membership.Pool {
		t.Helper()
		p, err := membership.Start(context.Background(), membership.Config{
			NodeName: id, BindAddr: "127.0.0.1", Seeds: seeds, Profile: membership.ProfileTest,
			Logger: testutil.Logger(t).With("node", id),
			Meta: membership.Meta{Role: membership.RoleManager, Datacenter: "dc1", NodeID: id,
				RPCAddr: rpcAddr, RaftAddr: "127.0.0.1:1", Version: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown() })
		return p
	}
	mgr := startManagerPool("host", "127.0.0.1:7101")
	cfg := DefaultConfig()
	cfg.NodeName, cfg.GossipAddr, cfg.GossipProfile = "host", "127.0.0.1:0", membership.ProfileTest
	cfg.Join = []string{mgr.Addr()}
	gate, err := startMembership(context.Background(), cfg, "", testutil.Logger(t).With("node", "gate"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Shutdown() })
	m2 := startManagerPool("m2", "127.0.0.1:7102", gate.Addr())

	// alive lists a pool's alive members as role/node ID.
	alive := func(p *membership.Pool) []string {
		var out []string
		for _, m := range p.Members() {
			if m.State == membership.StateAlive {
				out = append(out, fmt.Sprintf("%s/%s", m.Meta.Role, m.Meta.NodeID))
			}
		}
		slices.Sort(out)
		return out
	}
	want := fmt.Sprint([]string{"gate/host", "manager/host", "manager/m2"})
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		a, b, c := fmt.Sprint(alive(mgr)), fmt.Sprint(alive(gate)), fmt.Sprint(alive(m2))
		return a == want && b == want && c == want,
			fmt.Sprintf("every pool to list %s (manager host lists %s, the gate %s, m2 %s)", want, a, b, c)
	})
	if got := fmt.Sprint(poolResolver(gate, "dc1", nil).Managers()); got != "[127.0.0.1:7101 127.0.0.1:7102]" {
		t.Fatalf("the gate routes to %s, want both managers", got)
	}
	if gs := poolGates(gate)(); len(gs) != 1 || gs[0].Name != "host" {
		t.Fatalf("GET /v1/cluster's gates: %+v, want one named host", gs)
	}
}

// TestGatePublishesItsIdempotencySettings: the gate publishes the
// IDEMPOTENCY_* settings that must agree with its managers' in its pool
// metadata (config.Idempotency.Canonical), where its managers compare them
// with theirs and report a difference.
func TestGatePublishesItsIdempotencySettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.GossipAddr, cfg.GossipProfile = "g1", "127.0.0.1:0", membership.ProfileTest
	cfg.Idempotency.CommittedTTL = 90 * time.Second
	gate, err := startMembership(context.Background(), cfg, "", testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gate.Shutdown() })
	got, want := gate.LocalNode().Meta.Settings, cfg.Idempotency.Canonical()
	if got != want || !strings.Contains(got, "committed_ttl=90") {
		t.Fatalf("the gate publishes settings %q, want %q", got, want)
	}
}
