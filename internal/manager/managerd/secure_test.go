package managerd

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

const testClusterSecret = "0123456789abcdef0123456789abcdef"

// secretManager runs a one-manager group through Main with
// MANAGER_CLUSTER_SECRET_FILE (and the variables of extra) and no TLS files,
// waits until it leads, and returns it with its Raft and RPC addresses. It
// stops when the test ends.
func secretManager(t *testing.T, extra ...string) (m *manager.Manager, raftAddr, rpcAddr string) {
	t.Helper()
	ports, err := testutil.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(testClusterSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	raftAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	rpcAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	env := []string{
		manager.EnvNodeID + "=m1",
		manager.EnvDataDir + "=" + filepath.Join(dir, "data"),
		manager.EnvRaftAddr + "=" + raftAddr,
		manager.EnvRPCAddr + "=" + rpcAddr,
		manager.EnvGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[2]),
		manager.EnvBootstrapExpect + "=1",
		manager.EnvClusterSecretFile + "=" + secretFile,
	}
	env = append(env, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	built := make(chan *manager.Manager, 1)
	logs := &testutil.Buffer{}
	go func() {
		exit <- MainWith(ctx, nil, env, io.Discard, logs, Options{Mount: func(_ *http.ServeMux, m *manager.Manager) { built <- m }})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exit; code != config.ExitOK {
			t.Errorf("exit %d after shutdown; log:\n%s", code, logs.String())
		}
	})
	select {
	case m = <-built:
	case code := <-exit:
		exit <- code
		t.Fatalf("Main exited %d; log:\n%s", code, logs.String())
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		return m.CheckLeader() == nil && m.Raft().AppliedIndex() > 0, "the manager leads with its first entry applied"
	})
	return m, raftAddr, rpcAddr
}

// raftState is what a forged Raft RPC would change.
type raftState struct {
	term, last, applied uint64
	entries             int
	leader              bool
}

func stateOf(m *manager.Manager) raftState {
	return raftState{term: m.Raft().CurrentTerm(), last: m.Raft().LastIndex(), applied: m.Raft().AppliedIndex(),
		entries: m.FSM().Stats().Entries, leader: m.Raft().State() == raft.Leader}
}

// forge sends every Raft RPC through tr to target, each with a term far
// ahead: AppendEntries with an entry, InstallSnapshot, RequestVote and
// TimeoutNow; it returns each RPC's error.
func forge(tr *raft.NetworkTransport, target string, s raftState) map[string]error {
	addr := raft.ServerAddress(target)
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(tr.LocalAddr())}
	term := s.term + 100
	errs := map[string]error{}
	errs["AppendEntries"] = tr.AppendEntries("m1", addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term,
		PrevLogEntry: s.last, PrevLogTerm: s.term, LeaderCommitIndex: s.last + 1,
		Entries: []*raft.Log{{Index: s.last + 1, Term: term, Type: raft.LogCommand, Data: []byte("forged")}}}, &raft.AppendEntriesResponse{})
	snap := []byte("a forged ledger")
	errs["InstallSnapshot"] = tr.InstallSnapshot("m1", addr, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax,
		Term: term, LastLogIndex: s.last + 1000, LastLogTerm: term, Size: int64(len(snap))}, &raft.InstallSnapshotResponse{}, bytes.NewReader(snap))
	errs["RequestVote"] = tr.RequestVote("m1", addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term,
		LastLogIndex: s.last + 1000, LastLogTerm: term, LeadershipTransfer: true}, &raft.RequestVoteResponse{})
	errs["TimeoutNow"] = tr.TimeoutNow("m1", addr, &raft.TimeoutNowRequest{RPCHeader: hdr}, &raft.TimeoutNowResponse{})
	return errs
}

// A manager secured by the cluster secret alone refuses every Raft RPC from
// a plain TCP client (forged AppendEntries, InstallSnapshot, RequestVote,
// TimeoutNow: its term and ledger stay as they were), and from a TLS client
// holding a gate's certificate of the same secret.
func TestSecretOnlyRaftRefusesRawClients(t *testing.T) {
	m, raftAddr, _ := secretManager(t)
	before := stateOf(m)

	raw, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 2*time.Second, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for rpc, err := range forge(raw, raftAddr, before) {
		if err == nil {
			t.Errorf("plain TCP: a forged %s was answered", rpc)
		}
	}

	gate, err := certs.ClusterFromSecret(testClusterSecret, certs.RoleGate)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gateTr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger(),
		Stream: manager.TLSStreamLayer(plainStream{ln}, gate)})
	defer gateTr.Close()
	for rpc, err := range forge(gateTr, raftAddr, before) {
		if err == nil {
			t.Errorf("a gate's certificate: a forged %s was answered", rpc)
		}
	}

	if after := stateOf(m); after != before {
		t.Fatalf("the forged RPCs changed the manager: before %+v, after %+v", before, after)
	}
}

// The RPC listener of a secret-only manager is TLS: a gate's certificate of
// the secret is served; plain HTTP, a caller without a certificate and one of
// another secret are not.
func TestSecretOnlyRPCIsTLS(t *testing.T) {
	_, _, rpcAddr := secretManager(t)
	get := func(scheme string, cfg *tls.Config) (int, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(scheme + "://" + rpcAddr + "/metrics")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	gate, err := certs.ClusterFromSecret(testClusterSecret, certs.RoleGate)
	if err != nil {
		t.Fatal(err)
	}
	// The secret is still required on top of the certificate.
	gateCfg := gate.ClientConfig()
	tr := &http.Transport{TLSClientConfig: gateCfg}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+rpcAddr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testClusterSecret)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a gate's certificate with the secret: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a gate's certificate with the secret: %d", resp.StatusCode)
	}
	if code, err := get("http", nil); err == nil && code == http.StatusOK {
		t.Fatal("plain HTTP was served")
	}
	noCert := gate.ClientConfig()
	noCert.GetClientCertificate = nil
	if code, err := get("https", noCert); err == nil {
		t.Fatalf("a caller without a certificate was answered %d", code)
	}
	stranger, err := certs.ClusterFromSecret(testClusterSecret+"x", certs.RoleGate)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get("https", stranger.ClientConfig()); err == nil {
		t.Fatalf("a caller of another secret was answered %d", code)
	}
}

// The CA derived from the cluster secret never grants the operator role:
// every gate holds the secret and could sign itself a certificate claiming
// it. On a manager secured by the secret, such a certificate (with the
// cluster secret) is served as a cluster member but is refused forbidden on
// a restore, a peer removal and the members list, and nothing changes; the
// operator secret, with the same certificate, gets through.
func TestSecretOnlyDerivedOperatorCertificateIsNoOperator(t *testing.T) {
	const operatorSecret = "operator-secret-0123456789abcdef"
	opFile := filepath.Join(t.TempDir(), "operator-secret")
	if err := os.WriteFile(opFile, []byte(operatorSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _, rpcAddr := secretManager(t, manager.EnvOperatorSecretFile+"="+opFile)
	forged, err := certs.ClusterFromSecret(testClusterSecret, certs.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	client := func(opSecret string) *rpc.Client {
		c := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{rpcAddr}, Secret: testClusterSecret, TLS: forged.ClientConfig(),
			OperatorSecret: opSecret, AttemptTimeout: 10 * time.Second})
		t.Cleanup(c.Close)
		return c
	}
	// Until the deadline, a call is retried while the manager has no
	// leader or has not joined its pool yet.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The operator calls: a restore of something that is no archive, the
	// removal of the only server, the members list.
	calls := []struct {
		name string
		do   func(*rpc.Client) error
	}{
		{"restore", func(c *rpc.Client) error { return c.Restore(ctx, strings.NewReader("not an archive")) }},
		{"remove peer", func(c *rpc.Client) error { _, err := c.RemovePeer(ctx, "m1"); return err }},
		{"members", func(c *rpc.Client) error { _, err := c.Members(ctx); return err }},
	}
	derived := client("")
	if _, err := derived.StatusOf(ctx, rpcAddr); err != nil {
		t.Fatalf("the status with a derived certificate and the cluster secret: %v", err)
	}
	before := stateOf(m)
	for _, c := range calls {
		if err := c.do(derived); !errors.Is(err, rpc.ErrForbidden) {
			t.Errorf("%s with a derived operator certificate: %v, want %s", c.name, err, rpc.CodeForbidden)
		}
	}
	if after := stateOf(m); after != before {
		t.Fatalf("refused operator calls changed the manager: before %+v, after %+v", before, after)
	}
	f := m.Raft().GetConfiguration()
	if err := f.Error(); err != nil || len(f.Configuration().Servers) != 1 || f.Configuration().Servers[0].ID != "m1" {
		t.Fatalf("the Raft configuration after a refused removal: %+v, %v", f.Configuration().Servers, err)
	}
	// The operator secret reaches the methods: the archive is refused as
	// invalid, an unknown peer is not found, the members are listed.
	op := client(operatorSecret)
	if err := op.Restore(ctx, strings.NewReader("not an archive")); !errors.Is(err, rpc.ErrInvalid) {
		t.Errorf("restore of no archive with the operator secret: %v, want %s", err, rpc.CodeInvalid)
	}
	if _, err := op.RemovePeer(ctx, "no-such-manager"); !errors.Is(err, rpc.ErrNotFound) {
		t.Errorf("remove-peer of an unknown server with the operator secret: %v, want %s", err, rpc.CodeNotFound)
	}
	if _, err := op.Members(ctx); err != nil {
		t.Errorf("members with the operator secret: %v", err)
	}
}

// plainStream is a Raft stream layer on a listener, dialing plain TCP.
type plainStream struct{ net.Listener }

func (plainStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(address), timeout)
}
