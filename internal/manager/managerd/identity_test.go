package managerd

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/testutil"
)

// TestRefusedIdentityInStatusAndMetrics: a pool member claiming the leader's
// NodeID at another Raft address is refused, and the leader reports it in
// its status (refused_servers) and in once_manager_autopilot_refusals_total.
func TestRefusedIdentityInStatusAndMetrics(t *testing.T) {
	m, c := startLoneManager(t)
	log := testutil.Logger(t)
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		st, err := m.Status(t.Context())
		return err == nil && st.Autopilot != nil, "the leader's autopilot state"
	})

	host, port, _ := net.SplitHostPort(freeGossipAddr(t))
	p, _ := strconv.Atoi(port)
	impostorRaft := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	impostor, err := membership.Start(context.Background(), membership.Config{
		NodeName: "impostor", BindAddr: host, BindPort: p, Seeds: []string{c.GossipAddr},
		Profile: membership.ProfileTest, Logger: log,
		Meta: membership.Meta{Role: membership.RoleManager, Datacenter: c.Datacenter, NodeID: "m1",
			RPCAddr: "127.0.0.1:1", RaftAddr: impostorRaft, HasRaftState: true, Version: manager.ProtocolVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = impostor.Shutdown() }()

	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		st, err := m.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r := st.RefusedServers
		return len(r) == 1 && r[0].Reason == autopilot.RefusedDuplicateID && r[0].Node == "impostor" &&
			r[0].ID == "m1" && r[0].RaftAddr == impostorRaft, fmt.Sprintf("the leader's status to list the impostor: %+v", r)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.AutopilotCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "once_manager_autopilot_refusals_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{autopilot.RefusedDuplicateID: 1, autopilot.RefusedOldAddressAlive: 0,
		autopilot.RefusedAddressInUse: 0, autopilot.RefusedOldProtocol: 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("once_manager_autopilot_refusals_total = %v, want %v", got, want)
	}
	if st, _ := m.Status(t.Context()); len(st.Voters) != 1 || st.Voters[0] != "m1" {
		t.Fatalf("voters %v", st.Voters)
	}
}
