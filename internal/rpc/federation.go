package rpc

import (
	"context"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The federation view: the Manager service's Federation method, answered by
// any manager (Server.SetFederation gives the Server its view).

// FederationMemory is how long managers and gates keep a datacenter that the
// WAN pool (or the view they read) no longer names: a restarted manager that
// has not rejoined the pool yet still knows the federation, so gates answer
// 503 for a datacenter that is unreachable for now, never 400 for one that
// exists. Consul reaps a WAN member after 72 hours the same way.
const FederationMemory = 72 * time.Hour

// Federation is a manager's view of the datacenters of the federation: every
// datacenter whose managers it knows through the WAN gossip pool (its own
// included, from the LAN pool), with their managers' RPC addresses. Gates
// read it to forward submissions to other datacenters' leaders directly.
type Federation struct {
	// Datacenter is the answering manager's own datacenter.
	Datacenter string `json:"datacenter"`
	// Datacenters maps each datacenter's name to its managers' RPC addresses
	// (host:port), sorted.
	Datacenters map[string][]string `json:"datacenters"`
}

// SetFederation makes view the Server's federation view (at any time); a
// Server without one answers Federation with internal.
func (s *Server) SetFederation(view func() *Federation) { s.federation.Store(&view) }

// Federation serves the Server's federation view.
func (sv *service) Federation(context.Context, *rpcpb.FederationRequest) (*rpcpb.FederationView, error) {
	view := sv.s.federation.Load()
	if view == nil {
		return nil, sv.s.callStatus("federation", Errorf(CodeInternal, "this manager has no federation view"))
	}
	f := (*view)()
	p := &rpcpb.FederationView{Datacenter: f.Datacenter, Datacenters: make(map[string]*rpcpb.Managers, len(f.Datacenters))}
	for dc, addrs := range f.Datacenters {
		p.Datacenters[dc] = &rpcpb.Managers{Addrs: addrs}
	}
	return p, nil
}

// FederationOf reads the federation view of the manager at addr (host:port),
// once, without retries.
func (c *Client) FederationOf(ctx context.Context, addr string) (*Federation, error) {
	var f *Federation
	err := c.callAt(ctx, addr, "federation", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.Federation(ctx, &rpcpb.FederationRequest{})
		if err == nil {
			f = &Federation{Datacenter: p.GetDatacenter(), Datacenters: make(map[string][]string, len(p.GetDatacenters()))}
			for dc, m := range p.GetDatacenters() {
				f.Datacenters[dc] = m.GetAddrs()
			}
		}
		return err
	})
	return f, err
}
