package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/tests/localcluster"
)

// issueClusterTLS makes a cluster CA and every certificate a cluster with
// TLS everywhere needs, as an operator would (docs/security.md), and an
// operator's client certificate (the URI SAN spiffe://once/role/operator)
// in operatorCert and operatorKey.
func issueClusterTLS(t *testing.T) (f *localcluster.TLSFiles, operatorCert, operatorKey string) {
	t.Helper()
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	f = &localcluster.TLSFiles{
		CA:          p("ca.pem"),
		ManagerCert: p("manager.pem"), ManagerKey: p("manager-key.pem"),
		GateCert: p("gate.pem"), GateKey: p("gate-key.pem"),
		GateClientCert: p("gate-client.pem"), GateClientKey: p("gate-client-key.pem"),
		HarnessClientCert: p("harness.pem"), HarnessClientKey: p("harness-key.pem"),
	}
	ca := certstest.NewCA(t)
	ca.WriteCA(t, f.CA)
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	ca.IssueFor(t, certstest.Spec{Serial: 2, DNSNames: []string{certs.ServerName}, IPs: loopback, Server: true, Client: true}, f.ManagerCert, f.ManagerKey)
	ca.IssueFor(t, certstest.Spec{Serial: 3, IPs: loopback, Server: true}, f.GateCert, f.GateKey)
	ca.IssueFor(t, certstest.Spec{Serial: 4, CommonName: "gate", Client: true}, f.GateClientCert, f.GateClientKey)
	ca.IssueFor(t, certstest.Spec{Serial: 5, CommonName: "harness", Client: true}, f.HarnessClientCert, f.HarnessClientKey)
	operatorCert, operatorKey = p("operator.pem"), p("operator-key.pem")
	ca.IssueFor(t, certstest.Spec{Serial: 6, CommonName: "operator", Client: true, URIs: []*url.URL{certs.RoleOperator.URI()}}, operatorCert, operatorKey)
	return f, operatorCert, operatorKey
}

// TLS everywhere, with real processes: a client that trusts the CA submits
// over HTTPS (201, then the replay); the gates reach the managers and the
// managers each other (Raft) over mutual TLS, so the job commits on a
// quorum; an RPC caller without a cluster certificate is refused; oncectl
// with one lists the Raft peers, and the pool's members only with a
// certificate of the operator role.
func TestTLSEverywhere(t *testing.T) {
	files, operatorCert, operatorKey := issueClusterTLS(t)
	c := startCluster(t, 3, 1, func(o *localcluster.Options) { o.TLS = files })
	ctx := t.Context()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	withCA := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	gate := c.GateURLs()[0]
	if !strings.HasPrefix(gate, "https://") {
		t.Fatalf("gate URL %s is not https", gate)
	}
	const body = `{"type":"send_email","payload":{"to":"a@example.com"}}`
	first, err := post(ctx, withCA, gate, "tls-order-1", body)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("POST over HTTPS with the CA: %+v %v", first, err)
	}
	again, err := post(ctx, withCA, gate, "tls-order-1", body)
	if err != nil || again.status != http.StatusCreated || again.replayed != "true" || again.job.JobID != first.job.JobID {
		t.Fatalf("replay over HTTPS: %+v %v", again, err)
	}
	// A client that does not trust the CA does not get through.
	if _, err := post(ctx, &http.Client{Timeout: 5 * time.Second}, gate, "tls-order-2", body); err == nil {
		t.Fatal("a client without the CA completed a request")
	}

	// The managers' RPC: a caller that trusts the CA but has no client
	// certificate is refused, and so is plain HTTP.
	status := "https://" + leader.HTTPAddr + "/rpc/v1/status"
	if resp, err := withCA.Get(status); err == nil {
		resp.Body.Close()
		t.Fatalf("an RPC caller without a client certificate got %s", resp.Status)
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + leader.HTTPAddr + "/rpc/v1/status"); err == nil {
		resp.Body.Close()
		t.Fatalf("a plain-HTTP RPC caller got %s", resp.Status)
	}

	// oncectl with the harness's client certificate.
	var mgrs []string
	for _, m := range c.Managers {
		mgrs = append(mgrs, m.HTTPAddr)
	}
	t.Setenv("ONCE_MANAGERS", strings.Join(mgrs, ","))
	t.Setenv("ONCE_CACERT", files.CA)
	t.Setenv("ONCE_CERT", files.HarnessClientCert)
	t.Setenv("ONCE_KEY", files.HarnessClientKey)
	var p struct {
		Leader string `json:"leader"`
		Peers  []struct {
			ID string `json:"id"`
		} `json:"peers"`
	}
	oncectlJSON(t, &p, "raft", "peers")
	if p.Leader != leader.Name || len(p.Peers) != 3 {
		t.Fatalf("oncectl raft peers over mutual TLS: %+v (leader %s)", p, leader.Name)
	}
	// The operator commands: the harness's certificate (no role) without
	// the operator secret is refused (forbidden, exit 1); a certificate of the
	// operator role from the cluster's CA is an operator credential.
	t.Setenv("ONCE_OPERATOR_SECRET_FILE", "")
	if out, code := oncectl(t, "cluster", "members"); code != 1 {
		t.Fatalf("oncectl cluster members with a certificate without the operator role: exit %d, want 1; %s", code, out)
	}
	if out, code := oncectl(t, "--cert", operatorCert, "--key", operatorKey, "cluster", "members"); code != 0 || !strings.Contains(out, "manager1") {
		t.Fatalf("oncectl cluster members with an operator certificate: exit %d, want 0; %s", code, out)
	}
	t.Setenv("ONCE_CERT", "")
	t.Setenv("ONCE_KEY", "")
	t.Setenv("ONCE_CACERT", "")
	if out, code := oncectl(t, "raft", "peers"); code == 0 {
		t.Fatalf("oncectl without a client certificate: exit 0, %s", out)
	}
}
