package ctl

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
)

// forgetOperator is the Operator service of a real manager for outbox
// forget (its other methods the fake's); known stands for the daemon's
// federation view.
type forgetOperator struct {
	*fakeOperator
	m     *manager.Manager
	known []string
}

func (o forgetOperator) ForgetDatacenter(ctx context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	n, err := o.m.ForgetDatacenter(ctx, dc, o.known)
	if err != nil {
		return nil, err
	}
	return &rpcpb.ForgetDatacenterResult{Datacenter: dc, Pairs: int32(n)}, nil
}

// TestOutboxForget: outbox forget dc2, through the RPC server of a real dc1
// manager that owes dc2 two submissions, prints the two pairs forgotten and
// empties the outbox; run again, it forgets 0, as for dc3, a datacenter of
// the federation owed nothing. Forgetting dc1 itself, or dc9, a name the
// federation does not know and the outbox owes nothing (a typo), is refused
// by the manager (exit 1), dc9 naming the datacenters it knows; an empty or
// invalid name is a bad command line (exit 2), sent nowhere.
func TestOutboxForget(t *testing.T) {
	t.Setenv(EnvOperatorSecretFile, "")
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	c := managertest.Start(t, managertest.Options{})
	m := c.Leader(t)
	for _, key := range []string{"a", "b"} {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}}
		if r, err := m.Submit(t.Context(), req); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("submit %s: %+v %v", key, r, err)
		}
	}
	fake := &fakeOperator{leader: true}
	addr := rpctest.Listen(t, rpc.NewServer(m, rpc.ServerConfig{Operator: forgetOperator{fake, m, []string{"dc1", "dc2", "dc3"}}, OperatorAuth: rpc.OperatorAuth{Insecure: true}}))
	run := func(args ...string) (int, string, string) {
		return oncectl(t, append([]string{"--managers", addr, "--insecure"}, args...)...)
	}

	code, out, errOut := run("-o", "json", "outbox", "forget", "dc2")
	var res rpcpb.ForgetDatacenterResult
	if code != ExitOK || protojson.Unmarshal([]byte(out), &res) != nil || res.Datacenter != "dc2" || res.Pairs != 2 {
		t.Fatalf("outbox forget dc2: exit %d, %s%s; want 2 pairs", code, out, errOut)
	}
	if n := m.FSM().OutboxLen(); n != 0 {
		t.Fatalf("the outbox carries %d entries after dc2 was forgotten, want 0", n)
	}
	if code, out, errOut := run("outbox", "forget", "dc2"); code != ExitOK || out != "forgot 0 submission(s) carried to dc2\n" {
		t.Fatalf("outbox forget dc2 again: exit %d, %q%s; want 0 forgotten", code, out, errOut)
	}
	if code, out, errOut := run("outbox", "forget", "dc3"); code != ExitOK || out != "forgot 0 submission(s) carried to dc3\n" {
		t.Fatalf("outbox forget dc3, owed nothing: exit %d, %q%s; want 0 forgotten", code, out, errOut)
	}
	if code, out, errOut := run("outbox", "forget", "dc9"); code != ExitFailure || out != "" ||
		!strings.Contains(errOut, "not_found") || !strings.Contains(errOut, "(dc1, dc2, dc3)") {
		t.Fatalf("outbox forget dc9, unknown: exit %d, %q%s; want %d, refused naming dc1, dc2, dc3", code, out, errOut, ExitFailure)
	}
	if code, _, errOut := run("outbox", "forget", "dc1"); code != ExitFailure || !strings.Contains(errOut, "this datacenter") {
		t.Fatalf("outbox forget dc1 at dc1: exit %d, %s; want %d, refused as this datacenter", code, errOut, ExitFailure)
	}
	for _, dc := range []string{"", "dc 2", strings.Repeat("d", 65)} {
		if code, _, errOut := run("outbox", "forget", dc); code != ExitUsage {
			t.Fatalf("outbox forget %q: exit %d, %s; want %d", dc, code, errOut, ExitUsage)
		}
	}
	if code, _, errOut := run("outbox", "forget"); code != ExitUsage {
		t.Fatalf("outbox forget without a datacenter: exit %d, %s; want %d", code, errOut, ExitUsage)
	}
	if fake.calls != 0 {
		t.Fatalf("the fake served %d calls; every one is the manager's", fake.calls)
	}
}
