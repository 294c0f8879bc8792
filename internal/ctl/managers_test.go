package ctl

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
)

// fakeOperator answers the leader-only calls only when leader (elsewhere
// not_leader naming leaderRPC).
type fakeOperator struct {
	leader    bool
	leaderRPC string

	mu    sync.Mutex
	calls int
}

func (f *fakeOperator) enter(leaderOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if leaderOnly && !f.leader {
		return &rpc.Error{Code: rpc.CodeNotLeader, Message: "follower", Leader: f.leaderRPC}
	}
	return nil
}

func (f *fakeOperator) Members(context.Context) (*rpcpb.MembersResponse, error) {
	return &rpcpb.MembersResponse{Node: "m1", Members: []*rpcpb.Member{{Name: "manager1", Role: "manager", Status: "alive"}}}, f.enter(false)
}

func (f *fakeOperator) RemovePeer(_ context.Context, id string) (*rpcpb.PeerResult, error) {
	if err := f.enter(true); err != nil {
		return nil, err
	}
	if id != "m3" {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no server %s", id)
	}
	return &rpcpb.PeerResult{Done: "removed " + id, Leader: "m1"}, nil
}

func (f *fakeOperator) TransferLeader(context.Context, string) (*rpcpb.PeerResult, error) {
	return &rpcpb.PeerResult{Done: "transferred"}, f.enter(true)
}

func (f *fakeOperator) Snapshot(_ context.Context, w io.Writer) error {
	if err := f.enter(true); err != nil {
		return err
	}
	_, err := w.Write([]byte("archive"))
	return err
}

func (f *fakeOperator) Restore(_ context.Context, r io.Reader) error {
	if err := f.enter(true); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, r)
	return err
}

// Keyring answers two members that both hold and use one key, with empty
// lists of nodes and of members that did not answer.
func (f *fakeOperator) Keyring(_ context.Context, req *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	return &rpcpb.KeyringResponse{Node: "m1", Pool: req.GetPool(), Op: req.GetOp(), Members: 2,
		Keys: []*rpcpb.KeyringKey{{Key: "a2V5", Installed: 2, Primary: 2}}, Complete: true}, f.enter(false)
}

func (f *fakeOperator) ForgetDatacenter(_ context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	return &rpcpb.ForgetDatacenterResult{Datacenter: dc}, f.enter(true)
}

// serveOperator serves op as the Operator service of a manager in
// insecure mode (the Manager service of an empty status).
func serveOperator(t *testing.T, op rpc.Operator) string {
	t.Helper()
	return rpctest.Listen(t, rpc.NewServer(noService{}, rpc.ServerConfig{Operator: op, OperatorAuth: rpc.OperatorAuth{Insecure: true}}))
}

// noService is a Manager service that serves nothing.
type noService struct{}

func (noService) Submit(context.Context, *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	return nil, rpc.ErrInternal
}
func (noService) GetJob(context.Context, string, string) (*rpcpb.Job, error) {
	return nil, rpc.ErrInternal
}
func (noService) ListJobs(context.Context, *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	return nil, rpc.ErrInternal
}
func (noService) GetKey(context.Context, string, string) (*rpcpb.KeyInfo, error) {
	return nil, rpc.ErrInternal
}
func (noService) Status(context.Context) (*rpc.Status, error) { return &rpc.Status{}, nil }

// The operator commands reach the leader through a follower's hint, print
// the leader's answer, and exit 1 on an error answer.
func TestOperatorCommandsFollowTheLeader(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	leader := &fakeOperator{leader: true}
	follower := &fakeOperator{leaderRPC: serveOperator(t, leader)}
	faddr := serveOperator(t, follower)
	run := func(args ...string) (string, int) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--managers", faddr, "--insecure", "-o", "json"}, args...), &stdout, &stderr)
		return stdout.String() + stderr.String(), code
	}

	out, code := run("raft", "remove-peer", "m3")
	var res rpcpb.PeerResult
	if code != ExitOK || protojson.Unmarshal([]byte(out), &res) != nil || res.Done != "removed m3" {
		t.Fatalf("remove-peer m3: exit %d, %s", code, out)
	}
	if out, code := run("raft", "remove-peer", "m9"); code != ExitFailure {
		t.Fatalf("remove-peer of an unknown server: exit %d, want %d; %s", code, ExitFailure, out)
	}
	if out, code := run("cluster", "members"); code != ExitOK || !strings.Contains(out, "manager1") {
		t.Fatalf("cluster members: exit %d, %s", code, out)
	}
	file := filepath.Join(t.TempDir(), "snap.tar")
	if out, code := run("snapshot", "save", file); code != ExitOK {
		t.Fatalf("snapshot save: exit %d, %s", code, out)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "archive" {
		t.Fatalf("snapshot file: %q, %v", b, err)
	}
	if _, err := os.Stat(file + atomicfile.Suffix); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	if out, code := run("snapshot", "restore", file); code != ExitOK {
		t.Fatalf("snapshot restore: exit %d, %s", code, out)
	}
	// remove-peer m3, m9; snapshot save, restore: each at the leader once.
	if leader.calls != 4 {
		t.Fatalf("the leader served %d calls, want 4", leader.calls)
	}
}

// -o json prints an Operator answer with the .proto's field names, its
// counts as numbers and its empty lists as [], indented as every other
// answer.
func TestOperatorAnswerJSON(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	addr := serveOperator(t, &fakeOperator{leader: true})
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--managers", addr, "--insecure", "-o", "json", "gossip", "keyring", "list"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("gossip keyring list: exit %d, %s", code, stderr.String())
	}
	want := `{
  "node": "m1",
  "pool": "lan",
  "op": "list",
  "members": 2,
  "keys": [
    {
      "key": "a2V5",
      "installed": 2,
      "primary": 2
    }
  ],
  "nodes": [],
  "no_answer": [],
  "complete": true
}
`
	if got := stdout.String(); got != want {
		t.Fatalf("gossip keyring list -o json:\n%s\nwant\n%s", got, want)
	}
}
