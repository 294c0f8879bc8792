package certs

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/once-dev/once/internal/certs/certstest"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// Every process derives the same CA from the same secret, byte for byte, and
// another secret gives another CA.
func TestFromSecretIsDeterministic(t *testing.T) {
	a, err := FromSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Certificate().Raw, b.Certificate().Raw) || !bytes.Equal(a.PEM(), b.PEM()) {
		t.Fatal("the same secret derived two CA certificates")
	}
	other, err := FromSecret(testSecret + "x")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Certificate().Raw, other.Certificate().Raw) {
		t.Fatal("two secrets derived the same CA")
	}
	if _, err := FromSecret(""); !errors.Is(err, ErrSecret) {
		t.Fatalf("an empty secret: %v", err)
	}
	// A leaf issued by one process verifies against the CA another derived.
	leaf, err := a.Issue(RoleGate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: b.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("a leaf of one process against the CA of another: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("a leaf verified against another secret's CA")
	}
	if r, err := RoleOf(leaf.Leaf); r != RoleGate || err != nil {
		t.Fatalf("the gate leaf's role: %q, %v", r, err)
	}
}

func TestRoleOf(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	for _, tc := range []struct {
		name string
		uris []*url.URL
		want Role
		err  bool
	}{
		{"none", nil, "", false},
		{"other URIs only", []*url.URL{u("spiffe://example/x")}, "", false},
		{"manager", []*url.URL{RoleManager.URI()}, RoleManager, false},
		{"gate", []*url.URL{u("spiffe://once/role/gate")}, RoleGate, false},
		{"operator", []*url.URL{u("spiffe://once/role/operator")}, RoleOperator, false},
		{"a role added later", []*url.URL{u("spiffe://once/role/auditor")}, "auditor", false},
		{"two roles", []*url.URL{RoleManager.URI(), RoleGate.URI()}, "", true},
		{"empty role", []*url.URL{u("spiffe://once/role/")}, "", true},
		{"nested", []*url.URL{u("spiffe://once/role/gate/x")}, "", true},
	} {
		got, err := RoleOf(&x509.Certificate{URIs: tc.uris})
		if got != tc.want || (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrRole)) {
			t.Errorf("%s: got %q, %v; want %q, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// Secret-only mode: managers and gates of one secret talk; the Raft
// configuration refuses a gate's certificate; a caller or a server of
// another secret is refused; a gate's leaf cannot pass for a manager.
func TestSecretClusterRoles(t *testing.T) {
	mk := func(secret string, r Role) *Cluster {
		c, err := ClusterFromSecret(secret, r)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	manager, peer, gate := mk(testSecret, RoleManager), mk(testSecret, RoleManager), mk(testSecret, RoleGate)
	stranger := mk(testSecret+"x", RoleManager)
	rpcAddr, raftAddr := certstest.Serve(t, manager.ServerConfig()), certstest.Serve(t, manager.RaftServerConfig())

	if err := certstest.Call(rpcAddr, gate.ClientConfig()); err != nil {
		t.Fatalf("a gate on RPC: %v", err)
	}
	if err := certstest.Call(rpcAddr, peer.ClientConfig()); err != nil {
		t.Fatalf("a manager on RPC: %v", err)
	}
	if err := certstest.Call(raftAddr, peer.ClientConfig()); err != nil {
		t.Fatalf("a manager on Raft: %v", err)
	}
	if err := certstest.Call(raftAddr, gate.ClientConfig()); err == nil {
		t.Fatal("a gate's certificate was accepted on Raft")
	}
	// The gate (the client) verifies the manager against the derived CA:
	// a server of another secret is refused, before any byte is sent.
	if err := certstest.Call(certstest.Serve(t, stranger.ServerConfig()), gate.ClientConfig()); err == nil {
		t.Fatal("the gate accepted a manager of another secret")
	}
	strangerCfg := stranger.ClientConfig()
	strangerCfg.VerifyConnection = nil
	if err := certstest.Call(rpcAddr, strangerCfg); err == nil {
		t.Fatal("a caller of another secret was accepted")
	}
	// A gate's leaf served as if it were a manager is refused by callers.
	if err := certstest.Call(certstest.Serve(t, gate.ServerConfig()), peer.ClientConfig()); err == nil {
		t.Fatal("a gate's certificate passed for a manager's")
	}
}

// With certificate files that carry roles, the Raft configuration refuses a
// gate's; files without roles keep working as before.
func TestFileClusterRoles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	manager := newCluster(t, clusterFiles(t, ca, dir, "manager", certstest.Spec{Serial: 2, DNSNames: []string{ServerName},
		URIs: []*url.URL{RoleManager.URI()}, Server: true, Client: true}))
	gate := newCluster(t, clusterFiles(t, ca, dir, "gate", certstest.Spec{Serial: 3, CommonName: "gate",
		URIs: []*url.URL{RoleGate.URI()}, Client: true}))
	plain := newCluster(t, clusterFiles(t, ca, filepath.Join(dir), "plain", certstest.Spec{Serial: 4, DNSNames: []string{ServerName}, Server: true, Client: true}))
	operator := newCluster(t, clusterFiles(t, ca, dir, "operator", certstest.Spec{Serial: 5, CommonName: "operator",
		URIs: []*url.URL{RoleOperator.URI()}, Client: true}))
	raftAddr, rpcAddr := certstest.Serve(t, manager.RaftServerConfig()), certstest.Serve(t, manager.ServerConfig())
	if err := certstest.Call(raftAddr, gate.ClientConfig()); err == nil {
		t.Fatal("a gate's certificate (with its role) was accepted on Raft")
	}
	if err := certstest.Call(raftAddr, operator.ClientConfig()); err == nil {
		t.Fatal("an operator's certificate was accepted on Raft")
	}
	if err := certstest.Call(rpcAddr, gate.ClientConfig()); err != nil {
		t.Fatalf("a gate on RPC: %v", err)
	}
	if err := certstest.Call(rpcAddr, operator.ClientConfig()); err != nil {
		t.Fatalf("an operator on RPC: %v", err)
	}
	if err := certstest.Call(raftAddr, plain.ClientConfig()); err != nil {
		t.Fatalf("a certificate without a role on Raft: %v", err)
	}
}
