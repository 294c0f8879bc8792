package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/tests/localcluster"
)

// The operator role on real managers (docs/security.md, "Operator role"): a
// gate's credential (the cluster secret) is refused forbidden on a
// snapshot restore, a peer removal and the keyring, as is a wrong operator
// secret and a certificate of the derived CA claiming the operator role;
// the operator secret gets through, and oncectl given it works.
func TestOperatorRoleOnRealProcesses(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	c := startCluster(t, 3, 1, func(o *localcluster.Options) { o.ClusterSecret = secret })
	leader := pointOncectlAt(t, c)
	ctx := t.Context()

	forbidden := func(err error) bool {
		var e *rpc.Error
		return errors.As(err, &e) && e.Code == rpc.CodeForbidden
	}
	// The calls: a restore, a peer removal, the keyring list.
	calls := []struct {
		name string
		do   func(*rpc.Client) error
	}{
		{"restore", func(cl *rpc.Client) error { return cl.Restore(ctx, strings.NewReader("not an archive")) }},
		{"remove peer", func(cl *rpc.Client) error { _, err := cl.RemovePeer(ctx, "manager3"); return err }},
		{"keyring", func(cl *rpc.Client) error { _, err := cl.Keyring(ctx, rpc.PoolLAN); return err }},
	}
	for name, opSecret := range map[string]string{"the gate's credential": "", "a wrong operator secret": "wrong-operator-secret-0123456789"} {
		cl := c.ManagerClient(leader, opSecret)
		for _, call := range calls {
			if err := call.do(cl); !forbidden(err) {
				t.Errorf("%s: %s answered %v, want forbidden", name, call.name, err)
			}
		}
		cl.Close()
	}
	// A certificate of the CA derived from the cluster secret that claims
	// the operator role (any holder of the secret, every gate, can issue
	// one) is no operator credential: forbidden too.
	forged, err := certs.ClusterFromSecret(secret, certs.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	fc := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{leader.HTTPAddr}, Secret: secret, TLS: forged.ClientConfig(),
		AttemptTimeout: 10 * time.Second, MaxAttempts: 20})
	defer fc.Close()
	for _, call := range calls[:2] {
		if err := call.do(fc); !forbidden(err) {
			t.Errorf("a derived certificate claiming the operator role: %s answered %v, want forbidden", call.name, err)
		}
	}
	// Nothing was removed.
	st, err := c.Status(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Voters) != 3 {
		t.Fatalf("voters after refused removals: %v", st.Voters)
	}
	// The operator secret gets through: an unknown peer is not_found, not forbidden.
	oc := c.ManagerClient(leader, c.OperatorSecret())
	defer oc.Close()
	if _, err := oc.RemovePeer(ctx, "no-such-manager"); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("remove-peer of an unknown ID with the operator secret: %v, want not_found", err)
	}

	// oncectl with the cluster secret and the operator secret (pointOncectlAt
	// sets ONCE_OPERATOR_SECRET_FILE) works; without the operator secret, it
	// is refused.
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCE_CLUSTER_SECRET_FILE", file)
	// The gate joined through one seed; oncectl may ask any manager, so wait
	// until every manager's view holds all four members.
	waitMembersAlive(t, ctx, c, 4)
	members := &rpcpb.MembersResponse{}
	oncectlJSON(t, members, "cluster", "members")
	if len(members.Members) < 4 {
		t.Fatalf("cluster members with the operator secret: %v", members)
	}
	var peers struct {
		Peers []struct {
			ID string `json:"id"`
		} `json:"peers"`
		Refused []rpc.RefusedServer `json:"refused_servers"`
	}
	oncectlJSON(t, &peers, "raft", "peers")
	if len(peers.Peers) != 3 || len(peers.Refused) != 0 {
		t.Fatalf("raft peers: %+v", peers)
	}
	t.Setenv("ONCE_OPERATOR_SECRET_FILE", "")
	if _, code := oncectl(t, "cluster", "members"); code != 1 {
		t.Fatalf("oncectl cluster members without the operator secret: exit %d, want 1", code)
	}
	if _, code := oncectl(t, "raft", "remove-peer", "manager3"); code != 1 {
		t.Fatalf("oncectl raft remove-peer without the operator secret: exit %d, want 1", code)
	}
}
