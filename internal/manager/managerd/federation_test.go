package managerd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"
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

// TestConfigMismatchesNameTheDatacentersGates: a gate of the manager's
// datacenter whose IDEMPOTENCY_COMMITTED_TTL_SECONDS differs from the
// manager's is reported in GET /rpc/v1/status, under its pool name
// (GATE_NODE_NAME/gate), and counted by once_manager_config_mismatches; a
// gate that agrees is not. Gates are in the LAN pool only: a federated
// manager (a WAN pool) compares them as well as one that is not.
func TestConfigMismatchesNameTheDatacentersGates(t *testing.T) {
	for _, federated := range []bool{false, true} {
		t.Run(fmt.Sprintf("federated=%v", federated), func(t *testing.T) {
			extra := []string{manager.EnvGossipProfile + "=" + membership.ProfileLocal}
			if federated {
				ports, err := testutil.FreePorts(1)
				if err != nil {
					t.Fatal(err)
				}
				extra = append(extra, fmt.Sprintf("%s=127.0.0.1:%d", manager.EnvWANGossipAddr, ports[0]))
			}
			env, rpcAddr := soloManagerEnv(t, t.TempDir(), extra...)
			gossipAddr := envValue(t, env, manager.EnvGossipAddr)
			ctx, cancel := context.WithCancel(context.Background())
			exit := make(chan int, 1)
			logs := &testutil.Buffer{}
			go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()
			defer func() {
				cancel()
				if code := <-exit; code != config.ExitOK {
					t.Errorf("exit %d after shutdown; log:\n%s", code, logs.String())
				}
			}()

			// The agreeing gate has joined (the manager knows it) before
			// the other starts: when the other is reported, the first was
			// compared too.
			same := startGatePool(t, "g-same", config.DefaultIdempotency(), gossipAddr)
			select {
			case <-same.Joined():
			case <-time.After(30 * time.Second):
				t.Fatalf("the agreeing gate did not join; log:\n%s", logs.String())
			}
			other := config.DefaultIdempotency()
			other.CommittedTTL = 90 * time.Second
			startGatePool(t, "g-other", other, gossipAddr)

			want := fmt.Sprint([]rpc.ConfigMismatch{{Datacenter: "dc1", Node: "g-other/gate",
				Setting: config.EnvCommittedTTL, Local: "300", Remote: "90"}})
			rc := rpc.NewClient(rpc.ClientConfig{})
			defer rc.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
				st, err := rc.StatusOf(ctx, rpcAddr)
				if err != nil {
					return false, err.Error()
				}
				if got := fmt.Sprint(st.ConfigMismatches); got != want {
					return false, fmt.Sprintf("status mismatches %s, want %s", got, want)
				}
				metrics, err := scrape(client, rpcAddr)
				if err != nil {
					return false, err.Error()
				}
				return strings.Contains(metrics, "\nonce_manager_config_mismatches 1\n"), "once_manager_config_mismatches to be 1"
			})
		})
	}
}

// startGatePool joins the LAN pool of dc1 through seed as gate name would,
// publishing settings, and leaves it at the end of the test.
func startGatePool(t *testing.T, name string, settings config.Idempotency, seed string) *membership.Pool {
	t.Helper()
	p, err := membership.Start(context.Background(), membership.Config{
		NodeName: membership.GateNodeName(name), BindAddr: "127.0.0.1", Seeds: []string{seed},
		Profile: membership.ProfileTest, Logger: testutil.Logger(t).With("node", name),
		Meta: membership.Meta{Role: membership.RoleGate, Datacenter: "dc1", NodeID: name, Version: 1,
			Settings: settings.Canonical()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// envValue is the value of variable name in env.
func envValue(t *testing.T, env []string, name string) string {
	t.Helper()
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	t.Fatalf("%s is not set in %v", name, env)
	return ""
}

// scrape reads the manager's /metrics page.
func scrape(client *http.Client, rpcAddr string) (string, error) {
	resp, err := client.Get("http://" + rpcAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
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
