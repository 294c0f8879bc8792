package managerd

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"

	"github.com/once-dev/once/internal/testutil"
)

// freeGossipAddr is a loopback address free for both TCP and UDP.
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

// TestAutopilotHealthInStatusAndMetrics: a one-manager datacenter
// bootstraps through the autopilot, and the leader reports raft-autopilot's
// server health in its status and metrics.
func TestAutopilotHealthInStatusAndMetrics(t *testing.T) {
	m, _ := startLoneManager(t)

	reg := prometheus.NewRegistry()
	reg.MustRegister(m.AutopilotCollector())
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		st, err := m.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		a := st.Autopilot
		return a != nil && a.Healthy && len(a.Servers) == 1 && a.Servers[0].ID == "m1" &&
			a.Servers[0].RaftState == "leader" && a.Servers[0].Status == "alive" && a.Servers[0].Healthy, "the leader's status to carry a healthy autopilot state"
	})
	st, _ := m.Status(t.Context())
	if st.Autopilot.FailureTolerance != 0 {
		t.Fatalf("one voter tolerates %d failures; want 0", st.Autopilot.FailureTolerance)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range s.GetLabel() {
				name += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			got[name] = fmt.Sprint(s.GetGauge().GetValue())
		}
	}
	want := map[string]string{
		"once_manager_autopilot_healthy":                      "1",
		"once_manager_autopilot_failure_tolerance":            "0",
		"once_manager_autopilot_server_healthy{server_id=m1}": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("metric %s = %q; want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// localConfig is the configuration of manager id of a group of expect on
// 127.0.0.1: free ports, its own data directory, the test gossip profile and
// Raft timeouts short enough for a test.
func localConfig(t *testing.T, id string, expect int) manager.Config {
	c := manager.DefaultConfig()
	c.NodeID = id
	c.DataDir = filepath.Join(t.TempDir(), c.NodeID)
	c.RaftAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	c.RaftAdvertise = c.RaftAddr
	c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	c.RPCAdvertise = c.RPCAddr
	c.GossipAddr = freeGossipAddr(t)
	c.GossipProfile = membership.ProfileTest
	c.BootstrapExpect = expect
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	return c
}

// startLoneManager starts a manager that bootstraps a Raft group of its own
// with its LAN pool and autopilot (startCluster), stopped at the test's end.
// Its RPC address is not served: the tests call the Manager directly. c is
// its configuration.
func startLoneManager(t *testing.T) (m *manager.Manager, c manager.Config) {
	t.Helper()
	c = localConfig(t, "m1", 1)
	log := testutil.Logger(t)
	lan := &lanView{}
	m, err := manager.New(c, manager.Deps{Logger: log, Peers: lan, Clock: lan})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	cluster, err := startCluster(t.Context(), c, "", time.Now, m, lan, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.stop)
	return m, c
}
