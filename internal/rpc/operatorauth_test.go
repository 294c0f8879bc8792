package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc/credentials"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// fakeOperator answers every operator call; calls counts those that reached it.
type fakeOperator struct{ calls atomic.Int32 }

func (f *fakeOperator) Members(context.Context) (*rpcpb.MembersResponse, error) {
	f.calls.Add(1)
	return &rpcpb.MembersResponse{}, nil
}
func (f *fakeOperator) RemovePeer(_ context.Context, id string) (*rpcpb.PeerResult, error) {
	f.calls.Add(1)
	return &rpcpb.PeerResult{Done: "removed " + id}, nil
}
func (f *fakeOperator) TransferLeader(context.Context, string) (*rpcpb.PeerResult, error) {
	f.calls.Add(1)
	return &rpcpb.PeerResult{Done: "transferred"}, nil
}
func (f *fakeOperator) Snapshot(_ context.Context, w io.Writer) error {
	f.calls.Add(1)
	_, err := w.Write([]byte("archive"))
	return err
}
func (f *fakeOperator) Restore(_ context.Context, r io.Reader) error {
	f.calls.Add(1)
	_, err := io.Copy(io.Discard, r)
	return err
}
func (f *fakeOperator) Keyring(context.Context, *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	f.calls.Add(1)
	return &rpcpb.KeyringResponse{}, nil
}
func (f *fakeOperator) ForgetDatacenter(_ context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	f.calls.Add(1)
	return &rpcpb.ForgetDatacenterResult{Datacenter: dc}, nil
}

// operatorCalls are a restore (client stream), a peer removal (unary) and a
// snapshot (server stream): the two most destructive operator methods, and
// what reveals every tenant's entries; plus the keyring list (what it
// reveals) and a datacenter forgotten (what the outbox stops carrying).
var operatorCalls = []struct {
	name string
	call func(context.Context, *Client) error
}{
	{"restore", func(ctx context.Context, c *Client) error { return c.Restore(ctx, strings.NewReader("archive")) }},
	{"remove peer", func(ctx context.Context, c *Client) error { _, err := c.RemovePeer(ctx, "m2"); return err }},
	{"snapshot", func(ctx context.Context, c *Client) error { return c.Snapshot(ctx, io.Discard) }},
	{"keyring", func(ctx context.Context, c *Client) error { _, err := c.Keyring(ctx, ""); return err }},
	{"forget datacenter", func(ctx context.Context, c *Client) error { _, err := c.ForgetDatacenter(ctx, "dc2"); return err }},
}

// callOperator makes every operatorCalls call through a client of cfg to
// addr and returns the code of each answer ("" for a success).
func callOperator(t *testing.T, addr string, cfg ClientConfig) []Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Resolver, cfg.AttemptTimeout, cfg.MaxAttempts = StaticResolver{addr}, time.Minute, 2
	c := NewClient(cfg)
	defer c.Close()
	var codes []Code
	for _, oc := range operatorCalls {
		var code Code
		if err := oc.call(ctx, c); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%s: %v, want an *Error", oc.name, err)
			}
			code = e.Code
		}
		codes = append(codes, code)
	}
	return codes
}

func allCode(codes []Code, want Code) bool {
	for _, c := range codes {
		if c != want {
			return false
		}
	}
	return len(codes) == len(operatorCalls)
}

// A gate's credential (the cluster secret) is refused forbidden on the
// Operator service; the operator secret gets through, a wrong one (of its
// length, longer, or a prefix) does not.
func TestOperatorMethodsNeedTheOperatorSecret(t *testing.T) {
	const cluster, operator = "cluster-secret-0123456789", "operator-secret-0123456789"
	op := &fakeOperator{}
	addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: cluster, Operator: op, OperatorAuth: OperatorAuth{Secret: operator}})

	for name, secret := range map[string]string{"the gate's credential": "", "a wrong operator secret": "operator-secret-0123456788",
		"a longer operator secret": operator + "0", "a prefix of the operator secret": operator[:len(operator)-1]} {
		if codes := callOperator(t, addr, ClientConfig{Secret: cluster, OperatorSecret: secret}); !allCode(codes, CodeForbidden) {
			t.Errorf("%s: %v, want %s for every call", name, codes, CodeForbidden)
		}
	}
	if n := op.calls.Load(); n != 0 {
		t.Fatalf("%d operator calls reached the manager without the operator secret", n)
	}
	// The refusal says what would open the service.
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, Secret: cluster, MaxAttempts: 1})
	defer c.Close()
	_, err := c.Members(context.Background())
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrForbidden) || !strings.Contains(e.Message, OperatorSecretMetadata) || !strings.Contains(e.Message, OperatorRoleURI) {
		t.Fatalf("members without the operator secret: %v, want forbidden naming %s and %s", err, OperatorSecretMetadata, OperatorRoleURI)
	}
	// The status (HTTP) and the Manager service stay open to the gate's
	// credential.
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("status with the gate's credential: %v", err)
	}
	if _, err := c.GetJob(context.Background(), "t1", "j-1"); err != nil {
		t.Fatalf("a read with the gate's credential: %v", err)
	}
	if codes := callOperator(t, addr, ClientConfig{Secret: cluster, OperatorSecret: operator}); !allCode(codes, "") || op.calls.Load() != int32(len(operatorCalls)) {
		t.Fatalf("with the operator secret: %v, %d calls served", codes, op.calls.Load())
	}
	// The operator secret does not replace the cluster secret.
	if codes := callOperator(t, addr, ClientConfig{OperatorSecret: operator}); !allCode(codes, CodeUnauthenticated) {
		t.Fatalf("the operator secret without the cluster secret: %v, want %s", codes, CodeUnauthenticated)
	}
}

// Without an operator credential configured the Operator service is
// closed, unless the manager runs in insecure mode; the Manager service is
// open either way.
func TestOperatorMethodsClosedWithoutAnOperatorCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth OperatorAuth
		want Code
	}{
		{"closed", OperatorAuth{}, CodeForbidden},
		{"insecure mode", OperatorAuth{Insecure: true}, ""},
	} {
		addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Operator: &fakeOperator{}, OperatorAuth: tc.auth})
		if codes := callOperator(t, addr, ClientConfig{}); !allCode(codes, tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, codes, tc.want)
		}
		c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, MaxAttempts: 1})
		if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Tenant: "t1", Key: "k"}); err != nil {
			t.Errorf("%s: a submission: %v", tc.name, err)
		}
		c.Close()
	}
}

// Over mutual TLS with the operator's CA, a gate's certificate is refused
// forbidden on the Operator service and a certificate with the operator
// role's URI SAN gets through (the listener's credentials hand the verified
// certificate to the call), unless certificates are not accepted
// (Certificates false, as on a manager whose CA is derived from the cluster
// secret).
func TestOperatorMethodsAcceptAnOperatorCertificate(t *testing.T) {
	issue := clusterIssuer(t)
	role, _ := url.Parse(OperatorRoleURI)
	other, _ := url.Parse("spiffe://once/role/gate")
	server := issue("manager", certstest.Spec{Serial: 2, DNSNames: []string{certs.ServerName}, Server: true, Client: true})
	gate := issue("gate", certstest.Spec{Serial: 3, CommonName: "gate", Client: true, URIs: []*url.URL{other}})
	operator := issue("operator", certstest.Spec{Serial: 4, CommonName: "operator", Client: true, URIs: []*url.URL{role}})

	op := &fakeOperator{}
	addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{TLS: server.ServerConfig(), Operator: op,
		OperatorAuth: OperatorAuth{Secret: "operator-secret-0123456789", Certificates: true}})
	closedOp := &fakeOperator{}
	closedAddr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{TLS: server.ServerConfig(), Operator: closedOp,
		OperatorAuth: OperatorAuth{Secret: "operator-secret-0123456789"}})

	if codes := callOperator(t, addr, ClientConfig{TLS: gate.ClientConfig()}); !allCode(codes, CodeForbidden) {
		t.Fatalf("a gate's certificate: %v, want %s", codes, CodeForbidden)
	}
	if n := op.calls.Load(); n != 0 {
		t.Fatalf("a gate's certificate: %d calls served", n)
	}
	if codes := callOperator(t, addr, ClientConfig{TLS: operator.ClientConfig()}); !allCode(codes, "") || op.calls.Load() != int32(len(operatorCalls)) {
		t.Fatalf("an operator certificate: %v, %d calls served", codes, op.calls.Load())
	}
	if codes := callOperator(t, closedAddr, ClientConfig{TLS: operator.ClientConfig()}); !allCode(codes, CodeForbidden) || closedOp.calls.Load() != 0 {
		t.Fatalf("an operator certificate where certificates are not accepted: %v, %d calls served", codes, closedOp.calls.Load())
	}
}

// On a listener whose CA is derived from the cluster secret, a certificate
// claiming the operator role (which any holder of the secret, every gate,
// can issue) is served as a cluster member and refused on the Operator
// service; the operator secret gets through.
func TestOperatorMethodsRefuseADerivedOperatorCertificate(t *testing.T) {
	const cluster, operator = "cluster-secret-0123456789", "operator-secret-0123456789"
	manager, err := certs.ClusterFromSecret(cluster, certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := certs.ClusterFromSecret(cluster, certs.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	op := &fakeOperator{}
	// What a manager whose cluster TLS is derived from the secret serves
	// (internal/manager, operatorAuth).
	addr, _ := serveConfig(t, &fakeManager{leader: true}, ServerConfig{Secret: cluster, TLS: manager.ServerConfig(),
		Operator: op, OperatorAuth: OperatorAuth{Secret: operator}})
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, Secret: cluster, TLS: forged.ClientConfig(), MaxAttempts: 1})
	defer c.Close()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("the status with a derived certificate and the cluster secret: %v", err)
	}
	if codes := callOperator(t, addr, ClientConfig{Secret: cluster, TLS: forged.ClientConfig()}); !allCode(codes, CodeForbidden) || op.calls.Load() != 0 {
		t.Fatalf("a derived certificate claiming the operator role: %v, %d calls served", codes, op.calls.Load())
	}
	if codes := callOperator(t, addr, ClientConfig{Secret: cluster, TLS: forged.ClientConfig(), OperatorSecret: operator}); !allCode(codes, "") || op.calls.Load() != int32(len(operatorCalls)) {
		t.Fatalf("with the operator secret: %v, %d calls served", codes, op.calls.Load())
	}
}

// listenerCredentials hand a call the TLS state of its connection under
// cmux's wrapper, and no TLS state to a plain connection.
func TestListenerCredentialsUnwrapTheConnection(t *testing.T) {
	creds := listenerCredentials{tls: true}
	if creds.Info().SecurityProtocol != "tls" || (listenerCredentials{}).Info().SecurityProtocol != "insecure" {
		t.Fatalf("protocol info: %+v", creds.Info())
	}
	if _, _, err := creds.ClientHandshake(context.Background(), "x", nil); !errors.Is(err, errServerCredentials) {
		t.Fatalf("client handshake: %v", err)
	}
	if tlsConnOf(nil) != nil {
		t.Fatal("a nil connection has a TLS state")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tc := tls.Server(a, &tls.Config{})
	wrapped := &cmux.MuxConn{Conn: tc}
	if got := tlsConnOf(wrapped); got != tc {
		t.Fatalf("tlsConnOf(a cmux connection of TLS) = %v", got)
	}
	c, info, err := creds.ServerHandshake(wrapped)
	if _, ok := info.(credentials.TLSInfo); err != nil || c != wrapped || !ok {
		t.Fatalf("handshake of a TLS connection: %v, %T, %v", c, info, err)
	}
	plain := &cmux.MuxConn{Conn: b}
	c, info, err = (listenerCredentials{}).ServerHandshake(plain)
	if _, ok := info.(credentials.TLSInfo); err != nil || c != plain || ok || info.AuthType() != "insecure" {
		t.Fatalf("handshake of a plain connection: %v, %T, %v", c, info, err)
	}
}

// clusterIssuer returns a function that issues, from one new CA, a
// certificate of spec under name and loads it as a node's cluster TLS
// (certs.NewCluster over the CA, certificate and key files it writes in a
// temporary directory).
func clusterIssuer(t *testing.T) func(name string, spec certstest.Spec) *certs.Cluster {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	return func(name string, spec certstest.Spec) *certs.Cluster {
		t.Helper()
		f := [3]string{filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")}
		ca.WriteCA(t, f[0])
		ca.IssueFor(t, spec, f[1], f[2])
		c, err := certs.NewCluster(f[0], f[1], f[2], nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}
