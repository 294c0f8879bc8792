package rpc

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A carried submission (carried, carrier) is what another datacenter's
// outbox sends: it skips the outbox's bound and makes the receiver take its
// carrier for confirmed. On a listener that can tell who calls, a caller
// whose certificate names the gate role (or the operator role) is refused
// forbidden before the Service sees it, and its plain submissions stay
// served; a manager's certificate, or one without a role, carries. With
// TLS files and with the CA derived from the cluster secret alike.
func TestCarriedSubmissionNeedsAManagersCertificate(t *testing.T) {
	carried := &rpcpb.SubmitRequest{Tenant: "t", Key: "carried", Carried: true, Carrier: "dc2", Job: &rpcpb.JobRequest{Type: "x"}}
	carrierOnly := &rpcpb.SubmitRequest{Tenant: "t", Key: "carrier", Carrier: "dc2", Job: &rpcpb.JobRequest{Type: "x"}}
	plain := &rpcpb.SubmitRequest{Tenant: "t", Key: "plain", Job: &rpcpb.JobRequest{Type: "x"}}
	submit := func(t *testing.T, addr, secret string, c *certs.Cluster, req *rpcpb.SubmitRequest) error {
		t.Helper()
		cl := NewClient(ClientConfig{Resolver: StaticResolver{addr}, Secret: secret, TLS: c.ClientConfig(), MaxAttempts: 2})
		defer cl.Close()
		_, err := cl.Submit(context.Background(), req)
		return err
	}
	check := func(t *testing.T, addr, secret string, m *fakeManager, allowed, refused map[string]*certs.Cluster) {
		t.Helper()
		for name, c := range refused {
			before := m.submits.Load()
			for _, req := range []*rpcpb.SubmitRequest{carried, carrierOnly} {
				if err := submit(t, addr, secret, c, req); !errors.Is(err, ErrForbidden) {
					t.Errorf("%s's certificate, %s: %v, want %s", name, req.Key, err, CodeForbidden)
				}
			}
			if n := m.submits.Load() - before; n != 0 {
				t.Errorf("%s's certificate: %d carried submissions reached the Service", name, n)
			}
			if err := submit(t, addr, secret, c, plain); err != nil {
				t.Errorf("%s's certificate, a plain submission: %v", name, err)
			}
		}
		for name, c := range allowed {
			for _, req := range []*rpcpb.SubmitRequest{carried, carrierOnly, plain} {
				if err := submit(t, addr, secret, c, req); err != nil {
					t.Errorf("%s's certificate, %s: %v", name, req.Key, err)
				}
			}
		}
	}

	t.Run("files", func(t *testing.T) {
		issue := clusterIssuer(t)
		role := func(r certs.Role) []*url.URL { return []*url.URL{r.URI()} }
		server := issue("server", certstest.Spec{Serial: 2, DNSNames: []string{certs.ServerName}, Server: true, Client: true, URIs: role(certs.RoleManager)})
		m := &fakeManager{leader: true}
		addr, _ := serveConfig(t, m, ServerConfig{TLS: server.ServerConfig()})
		check(t, addr, "", m, map[string]*certs.Cluster{
			"a manager":  issue("manager", certstest.Spec{Serial: 3, DNSNames: []string{certs.ServerName}, Server: true, Client: true, URIs: role(certs.RoleManager)}),
			"a roleless": issue("roleless", certstest.Spec{Serial: 4, CommonName: "old", Client: true}),
		}, map[string]*certs.Cluster{
			"a gate":      issue("gate", certstest.Spec{Serial: 5, CommonName: "gate", Client: true, URIs: role(certs.RoleGate)}),
			"an operator": issue("operator", certstest.Spec{Serial: 6, CommonName: "operator", Client: true, URIs: role(certs.RoleOperator)}),
		})
	})

	t.Run("derived", func(t *testing.T) {
		const secret = "cluster-secret-0123456789"
		derived := func(r certs.Role) *certs.Cluster {
			c, err := certs.ClusterFromSecret(secret, r)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		m := &fakeManager{leader: true}
		addr, _ := serveConfig(t, m, ServerConfig{Secret: secret, TLS: derived(certs.RoleManager).ServerConfig()})
		check(t, addr, secret, m, map[string]*certs.Cluster{"a manager": derived(certs.RoleManager)},
			map[string]*certs.Cluster{"a gate": derived(certs.RoleGate)})
	})
}
