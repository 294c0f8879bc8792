package managerd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// startWAN starts the federation of manager m1 of dc (local gossip timings,
// RPC advertised as 127.0.0.1:7101 unless tweak says otherwise) joining the
// WAN pool through seeds, and stops it at the end of the test.
func startWAN(t *testing.T, dc string, tweak func(*manager.Config), seeds ...string) *federation {
	t.Helper()
	cfg := manager.DefaultConfig()
	cfg.NodeID, cfg.Datacenter, cfg.RPCAdvertise = "m1", dc, "127.0.0.1:7101"
	cfg.GossipProfile = "local"
	cfg.WANGossipAddr, cfg.WANJoin = "127.0.0.1:0", seeds
	cfg.DataDir = t.TempDir()
	tweak(&cfg)
	f, err := startFederation(context.Background(), cfg, "", testutil.Logger(t), nil)
	if err != nil {
		t.Fatalf("startFederation %s: %v", dc, err)
	}
	t.Cleanup(f.stop)
	return f
}

// TestFederationViewSpansDatacenters: managers of dc1 and dc2 that join the
// WAN pool each see the other's datacenter with its manager's RPC address; a
// manager without WAN settings knows only its own datacenter.
func TestFederationViewSpansDatacenters(t *testing.T) {
	start := func(dc, rpcAddr string, seeds ...string) *federation {
		return startWAN(t, dc, func(c *manager.Config) { c.RPCAdvertise = rpcAddr }, seeds...)
	}
	f1 := start("dc1", "127.0.0.1:7101")
	f2 := start("dc2", "127.0.0.1:7201", f1.wan.Addr())
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		v1, v2 := f1.datacenters(), f2.datacenters()
		ok := fmt.Sprint(v1["dc2"]) == "[127.0.0.1:7201]" && fmt.Sprint(v2["dc1"]) == "[127.0.0.1:7101]"
		return ok, fmt.Sprintf("each to see the other datacenter (dc1 sees %v, dc2 sees %v)", v1, v2)
	})
	// What a gate reads (rpc.Client.FederationOf) from a Server given the view.
	srv := rpc.NewServer(nil, rpc.ServerConfig{})
	srv.SetFederation(f1.view)
	addr := rpctest.Listen(t, srv)
	rc := rpc.NewClient(rpc.ClientConfig{})
	defer rc.Close()
	v, err := rc.FederationOf(context.Background(), addr)
	if err != nil || v.Datacenter != "dc1" || len(v.Datacenters) != 2 || fmt.Sprint(v.Datacenters["dc2"].GetAddrs()) != "[127.0.0.1:7201]" {
		t.Fatalf("fetched %v, %v", v, err)
	}

	single, err := startFederation(context.Background(), manager.DefaultConfig(), "", testutil.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer single.stop()
	if v := single.view(); len(v.Datacenters) != 1 || v.Datacenters[v.Datacenter] == nil {
		t.Fatalf("single-datacenter view %v", v)
	}
}

// TestFederationTellsDottedNamesApart: node IDs and datacenter names may
// both hold dots, so node "a.b" of datacenter "c" and node "a" of datacenter
// "b.c" must not share a WAN pool name: each manager sees the other's
// datacenter.
func TestFederationTellsDottedNamesApart(t *testing.T) {
	f1 := startWAN(t, "c", func(c *manager.Config) { c.NodeID = "a.b" })
	f2 := startWAN(t, "b.c", func(c *manager.Config) { c.NodeID, c.RPCAdvertise = "a", "127.0.0.1:7201" }, f1.wan.Addr())
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		v1, v2 := f1.datacenters(), f2.datacenters()
		ok := fmt.Sprint(v1["b.c"]) == "[127.0.0.1:7201]" && fmt.Sprint(v2["c"]) == "[127.0.0.1:7101]"
		return ok, fmt.Sprintf("each to see the other datacenter (c sees %v, b.c sees %v)", v1, v2)
	})
}

// TestFederationReportsConfigMismatches: managers publish their IDEMPOTENCY_*
// lifetimes and waiting rule in the WAN pool; one whose settings differ is
// reported, per node and setting, by the others (GET /rpc/v1/status); equal
// settings report nothing.
func TestFederationReportsConfigMismatches(t *testing.T) {
	start := func(dc string, committed time.Duration, seeds ...string) *federation {
		return startWAN(t, dc, func(c *manager.Config) { c.Idempotency.CommittedTTL = committed }, seeds...)
	}
	f1 := start("dc1", 300*time.Second)
	f2 := start("dc2", 300*time.Second, f1.wan.Addr())
	f3 := start("dc3", 90*time.Second, f1.wan.Addr())
	want1 := fmt.Sprint([]rpc.ConfigMismatch{{Datacenter: "dc3", Node: "m1", Setting: config.EnvCommittedTTL, Local: "300", Remote: "90"}})
	want3 := fmt.Sprint([]rpc.ConfigMismatch{
		{Datacenter: "dc1", Node: "m1", Setting: config.EnvCommittedTTL, Local: "90", Remote: "300"},
		{Datacenter: "dc2", Node: "m1", Setting: config.EnvCommittedTTL, Local: "90", Remote: "300"}})
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		g1, g2, g3 := fmt.Sprint(f1.mismatches()), fmt.Sprint(f2.mismatches()), fmt.Sprint(f3.mismatches())
		return g1 == want1 && g2 == want1 && g3 == want3, fmt.Sprintf("dc1 %s, dc2 %s, dc3 %s", g1, g2, g3)
	})
	single, err := startFederation(context.Background(), manager.DefaultConfig(), "", testutil.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer single.stop()
	if got := single.mismatches(); len(got) != 0 {
		t.Fatalf("a manager alone reports %+v", got)
	}
}

// TestFederationViewSurvivesARestart: a manager restarted while the other
// datacenter is cut off (its WAN pool cannot rejoin anyone) still names that
// datacenter in its view, with the addresses it last had, so gates answer
// 503 for its jobs, not 400.
func TestFederationViewSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	f1 := startWAN(t, "dc1", func(c *manager.Config) { c.DataDir = dir })
	f2 := startWAN(t, "dc2", func(c *manager.Config) { c.RPCAdvertise = "127.0.0.1:7201" }, f1.wan.Addr())
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		v := f1.datacenters()
		return fmt.Sprint(v["dc2"]) == "[127.0.0.1:7201]", fmt.Sprintf("dc1 to see dc2 (sees %v)", v)
	})
	f2.stop()
	f1.stop()

	restarted := startWAN(t, "dc1", func(c *manager.Config) { c.DataDir = dir })
	v := restarted.datacenters()
	if got := fmt.Sprint(v["dc2"]); got != "[127.0.0.1:7201]" {
		t.Fatalf("restarted manager's view %v: dc2 is %s, want [127.0.0.1:7201]", v, got)
	}
}
