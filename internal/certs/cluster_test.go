package certs

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs/certstest"
)

// clusterFiles issues a certificate of ca as spec says into dir and returns
// the CA, certificate and key paths.
// managerSpec is the certificate of the manager these tests serve.
var managerSpec = certstest.Spec{Serial: 2, DNSNames: []string{ServerName}, Server: true, Client: true}

// servedManager serves the manager side of a cluster whose CA file and
// certificate ca signed, from files in dir.
func servedManager(t *testing.T, ca *certstest.CA, dir string) (f [3]string, server *Cluster, addr string) {
	t.Helper()
	f = clusterFiles(t, ca, dir, "manager", managerSpec)
	server = newCluster(t, f)
	return f, server, certstest.Serve(t, server.ServerConfig())
}

// loadedPair writes a pair of serial 10, signed by a new CA, into dir and
// loads it.
func loadedPair(t *testing.T, dir string) (cf, kf string, ca *certstest.CA, r *Reloader) {
	t.Helper()
	cf, kf = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca = certstest.NewCA(t)
	ca.Issue(t, 10, cf, kf)
	r, err := New(cf, kf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cf, kf, ca, r
}

func clusterFiles(t *testing.T, ca *certstest.CA, dir, name string, spec certstest.Spec) [3]string {
	t.Helper()
	f := [3]string{filepath.Join(dir, name+"-ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")}
	ca.WriteCA(t, f[0])
	ca.IssueFor(t, spec, f[1], f[2])
	return f
}

func newCluster(t *testing.T, f [3]string) *Cluster {
	t.Helper()
	c, err := NewCluster(f[0], f[1], f[2], nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClusterMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := certstest.NewCA(t), certstest.NewCA(t)
	server := newCluster(t, clusterFiles(t, ca, dir, "manager", certstest.Spec{Serial: 2, DNSNames: []string{ServerName}, Server: true, Client: true}))
	gate := newCluster(t, clusterFiles(t, ca, dir, "gate", certstest.Spec{Serial: 3, CommonName: "gate", Client: true}))
	stranger := newCluster(t, clusterFiles(t, other, dir, "stranger", certstest.Spec{Serial: 4, DNSNames: []string{ServerName}, Server: true, Client: true}))
	addr := certstest.Serve(t, server.ServerConfig())

	if err := certstest.Call(addr, gate.ClientConfig()); err != nil {
		t.Fatalf("a gate with a cluster certificate: %v", err)
	}
	// A caller whose certificate another CA signed is refused, and so is one
	// with no certificate at all.
	strangerCfg := stranger.ClientConfig()
	strangerCfg.VerifyConnection = nil // it would refuse the server first
	if err := certstest.Call(addr, strangerCfg); err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
	noCert := gate.ClientConfig()
	noCert.GetClientCertificate = nil
	if err := certstest.Call(addr, noCert); err == nil {
		t.Fatal("a caller without a certificate was accepted")
	}
	// A cluster client refuses a server the cluster CA did not sign, and a
	// certificate of the cluster CA that is not a manager's.
	if err := certstest.Call(certstest.Serve(t, stranger.ServerConfig()), gate.ClientConfig()); err == nil {
		t.Fatal("a server of another CA was accepted")
	}
	notManager := newCluster(t, clusterFiles(t, ca, dir, "web", certstest.Spec{Serial: 5, DNSNames: []string{"www.example"}, Server: true, Client: true}))
	if err := certstest.Call(certstest.Serve(t, notManager.ServerConfig()), gate.ClientConfig()); err == nil {
		t.Fatal("a server certificate not for " + ServerName + " was accepted")
	}
}

// A new CA and new certificates written in place are used after Reload,
// without a restart.
func TestClusterReloadsTheCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certstest.NewCA(t), certstest.NewCA(t)
	gspec := certstest.Spec{Serial: 3, CommonName: "gate", Client: true}
	server := newCluster(t, clusterFiles(t, oldCA, dir, "manager", managerSpec))
	addr := certstest.Serve(t, server.ServerConfig())
	// The gate already has the new CA's certificate: refused until the
	// manager trusts the new CA.
	gate := newCluster(t, clusterFiles(t, newCA, dir, "gate", gspec))
	if err := certstest.Call(addr, gate.ClientConfig()); err == nil {
		t.Fatal("accepted before the reload")
	}
	clusterFiles(t, newCA, dir, "manager", managerSpec) // rotate the manager's CA and certificate
	future := time.Now().Add(2 * time.Second)
	for _, f := range []string{"manager-ca.pem", "manager.pem", "manager-key.pem"} {
		_ = os.Chtimes(filepath.Join(dir, f), future, future)
	}
	if loaded, err := server.Reload(); !loaded || err != nil {
		t.Fatalf("Reload: loaded %v, err %v", loaded, err)
	}
	if err := certstest.Call(addr, gate.ClientConfig()); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
}

func TestNewClusterRefusesABadCA(t *testing.T) {
	dir := t.TempDir()
	f := clusterFiles(t, certstest.NewCA(t), dir, "m", certstest.Spec{Serial: 2, DNSNames: []string{ServerName}, Server: true})
	certFile, keyFile := f[1], f[2]
	bad := filepath.Join(dir, "bad-ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCluster(bad, certFile, keyFile, nil); !errors.Is(err, ErrCA) {
		t.Fatalf("a CA file without a certificate: %v", err)
	}
	if _, err := NewCluster(filepath.Join(dir, "missing.pem"), certFile, keyFile, nil); !errors.Is(err, ErrCA) {
		t.Fatalf("a missing CA file: %v", err)
	}
}

// The RPC listener tells gRPC from HTTP/1.1 by a connection's first bytes: a
// caller that can speak http/1.1 (curl, Prometheus, Go's http.Transport, all
// of which offer h2 as well) must get it; only a caller offering h2 alone
// (gRPC) gets h2.
func TestClusterServerNegotiatesHTTP1UnlessOnlyH2IsOffered(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	server := newCluster(t, clusterFiles(t, ca, dir, "manager", certstest.Spec{Serial: 2, DNSNames: []string{ServerName}, Server: true, Client: true}))
	gate := newCluster(t, clusterFiles(t, ca, dir, "gate", certstest.Spec{Serial: 3, CommonName: "gate", Client: true}))
	addr := certstest.Serve(t, server.ServerConfig())
	for _, tc := range []struct {
		offer []string
		want  string
	}{
		{[]string{"h2", "http/1.1"}, "http/1.1"},
		{[]string{"http/1.1"}, "http/1.1"},
		{[]string{"h2"}, "h2"},
		{nil, ""},
	} {
		cfg := gate.ClientConfig()
		cfg.NextProtos = tc.offer
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Fatalf("offering %v: %v", tc.offer, err)
		}
		got := c.ConnectionState().NegotiatedProtocol
		_ = c.Close()
		if got != tc.want {
			t.Errorf("offering %v: negotiated %q, want %q", tc.offer, got, tc.want)
		}
	}
}
