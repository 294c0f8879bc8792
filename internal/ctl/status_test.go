package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
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
