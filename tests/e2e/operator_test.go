package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/localcluster"
)

// The operator role on real managers (docs/security.md, "Operator role"): a
// gate's credential (the cluster secret) is refused with 403 forbidden on a
// snapshot restore and a peer removal, as is a wrong operator secret and a
// certificate of the derived CA claiming the operator role; the operator
// secret gets through, and oncectl given it works.
func TestOperatorRoleOnRealProcesses(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	c := startCluster(t, 3, 1, func(o *localcluster.Options) { o.ClusterSecret = secret })
	leader := pointOncectlAt(t, c)
	ctx := t.Context()

	forbidden := func(a localcluster.ManagerAnswer) bool {
		var e rpc.Error
		return a.Status == http.StatusForbidden && json.Unmarshal(a.Body, &e) == nil && e.Code == rpc.CodeForbidden
	}
	for name, opSecret := range map[string]string{"the gate's credential": "", "a wrong operator secret": "wrong-operator-secret-0123456789"} {
		for _, call := range []struct{ method, path, body string }{
			{http.MethodPut, rpc.OperatorSnapshotPath, "not an archive"},
			{http.MethodPost, rpc.OperatorRemovePeerPath, `{"id":"manager3"}`},
			{http.MethodGet, rpc.OperatorKeyringPath, ""},
		} {
			a, err := c.CallManager(ctx, leader, call.method, call.path, []byte(call.body), opSecret)
			if err != nil {
				t.Fatal(err)
			}
			if !forbidden(a) {
				t.Errorf("%s: %s %s answered %d %s, want 403 forbidden", name, call.method, call.path, a.Status, a.Body)
			}
		}
	}
	// A certificate of the CA derived from the cluster secret that claims
	// the operator role (any holder of the secret, every gate, can issue
	// one) is no operator credential: 403 too.
	forged, err := certs.ClusterFromSecret(secret, certs.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: forged.ClientConfig()}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: rpc.WithSecret(tr, secret), Timeout: 10 * time.Second}
	for _, call := range []struct{ method, path, body string }{
		{http.MethodPut, rpc.OperatorSnapshotPath, "not an archive"},
		{http.MethodPost, rpc.OperatorRemovePeerPath, `{"id":"manager3"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, call.method, c.ManagerURL(leader, call.path), strings.NewReader(call.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if a := (localcluster.ManagerAnswer{Status: resp.StatusCode, Body: b}); !forbidden(a) {
			t.Errorf("a derived certificate claiming the operator role: %s %s answered %d %s, want 403 forbidden", call.method, call.path, a.Status, a.Body)
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
	a, err := c.CallManager(ctx, leader, http.MethodPost, rpc.OperatorRemovePeerPath, []byte(`{"id":"no-such-manager"}`), c.OperatorSecret())
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusNotFound {
		t.Fatalf("remove-peer of an unknown ID with the operator secret: %d %s, want 404", a.Status, a.Body)
	}

	// oncectl with the cluster secret and the operator secret (pointOncectlAt
	// sets ONCE_OPERATOR_SECRET_FILE) works; without the operator secret, it
	// is refused.
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCE_CLUSTER_SECRET_FILE", file)
	var members rpc.Members
	oncectlJSON(t, &members, "cluster", "members")
	if len(members.Members) < 4 {
		t.Fatalf("cluster members with the operator secret: %+v", members)
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
