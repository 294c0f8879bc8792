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

// SetFederation makes view the Server's federation view (at any time); a
// Server without one answers Federation with internal.
func (s *Server) SetFederation(view func() *rpcpb.FederationView) { s.federation.Store(&view) }

// Federation serves the Server's federation view.
func (sv *service) Federation(context.Context, *rpcpb.FederationRequest) (*rpcpb.FederationView, error) {
	view := sv.s.federation.Load()
	if view == nil {
		return nil, sv.s.callStatus("federation", Errorf(CodeInternal, "this manager has no federation view"))
	}
	return (*view)(), nil
}

// FederationOf reads the federation view of the manager at addr (host:port),
// once, without retries.
func (c *Client) FederationOf(ctx context.Context, addr string) (*rpcpb.FederationView, error) {
	return unaryAt(c, ctx, addr, "federation", 0, rpcpb.ManagerClient.Federation, &rpcpb.FederationRequest{})
}
