package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// hungStatus is a manager whose Status never answers (a manager stuck, or
// behind a network that drops its packets): a fault at the RPC boundary.
type hungStatus struct{ rpc.Service }

func (hungStatus) Status(ctx context.Context) (*rpc.Status, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestClusterStatusAroundAHungManager: cluster status asks every manager of
// --managers; one that never answers is shown as such, and does not take
// the whole --timeout from the others, which answer with their state.
func TestClusterStatusAroundAHungManager(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	var hung *manager.Manager
	c := managertest.Start(t, managertest.Options{Managers: 3, Serve: func(m *manager.Manager) rpc.Service {
		if hung == nil {
			hung = m
			return hungStatus{m}
		}
		return m
	}})
	var stdout, stderr bytes.Buffer
	args := []string{"--managers", strings.Join(c.Addrs, ","), "--insecure", "--timeout", "2s", "-o", "json", "cluster", "status"}
	code := Main(context.Background(), args, &stdout, &stderr)
	var rows []struct {
		Addr   string      `json:"addr"`
		Status *rpc.Status `json:"status"`
		Error  string      `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("cluster status: exit %d, %v: %s%s", code, err, stdout.String(), stderr.String())
	}
	if code != ExitOK {
		t.Errorf("exit %d with two managers answering; want %d", code, ExitOK)
	}
	for i, r := range rows {
		switch {
		case r.Addr != c.Addrs[i]:
			t.Errorf("row %d is %s; want %s (the order of --managers)", i, r.Addr, c.Addrs[i])
		case i == 0 && (r.Status != nil || r.Error == ""):
			t.Errorf("the hung manager's row: %+v; want an error", r)
		case i > 0 && (r.Status == nil || r.Status.NodeID != c.Managers[i].Config().NodeID):
			t.Errorf("manager %s's row: %+v; want its status", c.Addrs[i], r)
		}
	}
}

// TestClusterStatusWithoutLeaderExits1: every manager answers, none knows a
// leader (their Raft links are cut): cluster status and raft peers print
// their tables, and the exit code says the datacenter has no leader, as for
// cluster view.
func TestClusterStatusWithoutLeaderExits1(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	c := managertest.Start(t, managertest.Options{Managers: 3})
	for _, tr := range c.Transports {
		tr.DisconnectAll()
	}
	testutil.WaitFor(t, 15*time.Second, func() (bool, string) {
		for _, m := range c.Managers {
			if st, err := m.Status(t.Context()); err != nil || st.LeaderID != "" {
				return false, "every manager to have lost its leader"
			}
		}
		return true, ""
	})
	for _, cmd := range [][]string{{"cluster", "status"}, {"raft", "peers"}} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--managers", strings.Join(c.Addrs, ","), "--insecure"}, cmd...), &stdout, &stderr)
		if code != ExitFailure || !strings.Contains(stderr.String(), ErrNoManagerLeader.Error()) {
			t.Fatalf("%s: exit %d; want %d naming the missing leader: %s", cmd, code, ExitFailure, stderr.String())
		}
		for _, m := range c.Managers {
			if !strings.Contains(stdout.String(), m.Config().NodeID) {
				t.Errorf("%s: the table does not show %s:\n%s", cmd, m.Config().NodeID, stdout.String())
			}
		}
	}
}

// TestRaftChangesRefuseManagersOfTwoDatacenters: server IDs are unique only
// within a datacenter, so remove-peer or transfer-leader given the managers
// of two datacenters could change the wrong group: refused (exit 2) before
// anything is sent, naming both; nothing is removed. Given one datacenter's
// managers, the change reaches its leader.
func TestRaftChangesRefuseManagersOfTwoDatacenters(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	dc1 := managertest.Start(t, managertest.Options{Managers: 2, Datacenter: "dc1"})
	dc2 := managertest.Start(t, managertest.Options{Managers: 1, Datacenter: "dc2"})
	both := strings.Join(append(slices.Clone(dc2.Addrs), dc1.Addrs...), ",")
	for _, cmd := range [][]string{{"raft", "remove-peer", "m2"}, {"raft", "transfer-leader"}} {
		code, _, errOut := oncectl(t, append([]string{"--managers", both, "--insecure"}, cmd...)...)
		if code != ExitUsage || !strings.Contains(errOut, "dc1 (") || !strings.Contains(errOut, "dc2 (") {
			t.Fatalf("%s over two datacenters: exit %d, want %d naming both; %s", cmd, code, ExitUsage, errOut)
		}
	}
	for _, m := range dc1.Managers {
		if st, err := m.Status(t.Context()); err != nil || len(st.Voters) != 2 {
			t.Fatalf("dc1's voters after the refused removal: %+v %v", st, err)
		}
	}
	// One datacenter's managers: the change is sent (these in-process
	// managers serve no Operator service, so it fails there, exit 1).
	code, _, errOut := oncectl(t, "--managers", strings.Join(dc1.Addrs, ","), "--insecure", "raft", "remove-peer", "m2")
	if code != ExitFailure || strings.Contains(errOut, "datacenters") {
		t.Fatalf("remove-peer m2 in dc1: exit %d, want %d from the managers; %s", code, ExitFailure, errOut)
	}
}

// hungOperator is an Operator service whose Raft changes never answer.
type hungOperator struct{ *fakeOperator }

func (hungOperator) RemovePeer(ctx context.Context, _ string) (*rpcpb.PeerResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungOperator) TransferLeader(ctx context.Context, _ string) (*rpcpb.PeerResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRaftChangeAroundAHungManager: a manager of --managers that accepts
// calls and never answers them (stuck) neither takes the whole --timeout
// from a Raft change, in the check that the managers are of one datacenter,
// nor is sent the change: remove-peer and transfer-leader reach the leader
// that answered, once each, and exit 0.
func TestRaftChangeAroundAHungManager(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	leader := &fakeOperator{leader: true}
	hung := rpctest.Listen(t, rpc.NewServer(hungStatus{noService{}}, rpc.ServerConfig{
		Operator: hungOperator{&fakeOperator{leader: true}}, OperatorAuth: rpc.OperatorAuth{Insecure: true}}))
	managers := hung + "," + serveOperator(t, leader)
	for i, cmd := range [][]string{{"raft", "remove-peer", "m3"}, {"raft", "transfer-leader"}} {
		code, out, errOut := oncectl(t, append([]string{"--managers", managers, "--insecure", "--timeout", "4s"}, cmd...)...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", cmd, code, ExitOK, out, errOut)
		}
		leader.mu.Lock()
		calls := leader.calls
		leader.mu.Unlock()
		if calls != i+1 {
			t.Fatalf("%s: the leader served %d calls, want %d", cmd, calls, i+1)
		}
	}
}

// leaderService is a Manager service whose status is a leader's.
type leaderService struct{ noService }

func (leaderService) Status(context.Context) (*rpc.Status, error) {
	return &rpc.Status{NodeID: "m1", IsLeader: true, LeaderID: "m1", Voters: []string{"m1", "m2"}}, nil
}

// TestRaftPeersAroundAHungManager: raft peers asks the managers in turn; a
// stuck one (it accepts calls and never answers) takes a share of
// --timeout, not all of it, and the leader's answer is printed, exit 0,
// whichever of --managers' order is asked first.
func TestRaftPeersAroundAHungManager(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	hung := rpctest.Listen(t, rpc.NewServer(hungStatus{noService{}}, rpc.ServerConfig{}))
	leader := rpctest.Listen(t, rpc.NewServer(leaderService{}, rpc.ServerConfig{}))
	for _, managers := range []string{hung + "," + leader, leader + "," + hung} {
		code, out, errOut := oncectl(t, "--managers", managers, "--insecure", "--timeout", "3s", "raft", "peers")
		if code != ExitOK || !strings.Contains(out, "m2") {
			t.Fatalf("raft peers --managers %s: exit %d, want %d\nstdout: %s\nstderr: %s", managers, code, ExitOK, out, errOut)
		}
	}
}

// TestOneDatacenterReturnsTheManagersThatAnswered: the check that --managers
// are of one datacenter returns those that answered it, for the change to
// go to, and leaves --managers as given (earlier builds narrowed them in
// place, under the resolver that read them); when none answers, every
// entry is returned.
func TestOneDatacenterReturnsTheManagersThatAnswered(t *testing.T) {
	hung := rpctest.Listen(t, rpc.NewServer(hungStatus{noService{}}, rpc.ServerConfig{}))
	leader := rpctest.Listen(t, rpc.NewServer(leaderService{}, rpc.ServerConfig{}))
	given := []string{hung, leader}
	g := &globals{managers: slices.Clone(given), insecure: true, timeout: 2 * time.Second}
	mc, err := g.managerClient(rpc.StaticResolver(g.managers))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), g.timeout)
	defer cancel()
	answered, err := g.oneDatacenter(ctx, mc)
	if err != nil || !slices.Equal(answered, []string{leader}) {
		t.Fatalf("oneDatacenter: %v, %v; want [%s]", answered, err, leader)
	}
	if !slices.Equal(g.managers, given) {
		t.Fatalf("--managers after the check: %v; want them as given, %v", g.managers, given)
	}

	g.managers = []string{hung, hung}
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if answered, err := g.oneDatacenter(ctx, mc); err != nil || !slices.Equal(answered, g.managers) {
		t.Fatalf("oneDatacenter without an answer: %v, %v; want every entry, %v", answered, err, g.managers)
	}
}
