package gate

import (
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/once-dev/once/internal/console"
	"github.com/once-dev/once/pkg/api"
)

// The web console (internal/console, docs/console.md) at /ui/, and the
// operators' read of the cluster it shows: GET /v1/cluster.

// EnvOperatorTokenFile names the file of the operators' bearer tokens, the
// credential of GET /v1/cluster (and so of the console's cluster view).
const EnvOperatorTokenFile = "GATE_OPERATOR_TOKEN_FILE"

// consoleRoutes registers the console and GET /v1/cluster.
func (g *Gate) consoleRoutes() {
	h := console.Handler(consoleProblem)
	g.route("GET "+console.Prefix, h.ServeHTTP)
	g.route("GET /v1/cluster", g.operatorsOnly(g.handleCluster))
}

// consoleProblem answers an error of the console's files as a problem, as
// every error of the gate is (docs/api.md, Errors).
func consoleProblem(w http.ResponseWriter, _ *http.Request, status int) {
	switch status {
	case http.StatusNotFound:
		writeProblem(w, status, api.CodeNotFound, "no such page of the console")
	case http.StatusPreconditionFailed:
		writeProblem(w, status, api.CodeInvalidRequest, "the console's file does not match the request's If-Match (it changed: load it again)")
	case http.StatusRequestedRangeNotSatisfiable:
		writeProblem(w, status, api.CodeInvalidRequest, "the Range is not within the console's file (Content-Range gives its length)")
	default:
		writeProblem(w, status, api.CodeInvalidRequest, "the console's file cannot be served for this request: "+http.StatusText(status))
	}
}

// authenticateOperator checks GET /v1/cluster's credential: an operator
// token of GATE_OPERATOR_TOKEN_FILE. A gate without it accepts every
// caller when it has no token file either (development: every route is
// open), and none when it has one (tenants' tokens never read the cluster).
func (g *Gate) authenticateOperator(w http.ResponseWriter, r *http.Request) bool {
	if g.tokens == nil {
		return true
	}
	if values := r.Header.Values(api.HeaderAuthorization); len(values) == 1 {
		if name, ok := g.tokens.operator(values[0]); ok {
			noteTenant(w, "operator:"+name)
			return true
		}
	}
	unauthorized(w, "an operator's 'Authorization: Bearer <token>' header is required (a token of GATE_OPERATOR_TOKEN_FILE)")
	return false
}

// handleCluster is GET /v1/cluster: the leader's status, every resolved
// manager's, the gates and the federation's datacenters, each asked at
// once within the forward timeout. A manager or datacenter that does not
// answer is listed with its error; the answer is 200 while the gate can
// ask at all. It is pkg/api's Cluster, the type the Go client reads (a
// manager's rpc.Status is api.ManagerStatus).
func (g *Gate) handleCluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := g.readContext(r)
	defer cancel()
	view := api.Cluster{Datacenter: g.cfg.Datacenter, Gate: g.cfg.NodeName}
	var wg sync.WaitGroup
	wg.Go(func() {
		if st, err := g.client.LeaderStatus(ctx); err == nil {
			view.Leader = st
		}
	})
	addrs := slices.Compact(slices.Sorted(slices.Values(g.resolver.Managers())))
	view.Managers = make([]api.ClusterManager, len(addrs))
	for i, addr := range addrs {
		view.Managers[i].Addr = addr
		wg.Go(func() {
			st, err := g.client.StatusOf(ctx, addr)
			if err != nil {
				view.Managers[i].Error = rpcMessage(err)
				return
			}
			view.Managers[i].Status = st
		})
	}
	dcs := map[string][]string{}
	if g.federation != nil {
		dcs = maps.Clone(g.federation.Datacenters())
	}
	if _, ok := dcs[g.cfg.Datacenter]; !ok {
		dcs[g.cfg.Datacenter] = addrs
	}
	names := slices.Sorted(maps.Keys(dcs))
	view.Datacenters = make([]api.ClusterDatacenter, len(names))
	for i, dc := range names {
		managers := append([]string{}, dcs[dc]...) // [] when none, not null
		slices.Sort(managers)
		view.Datacenters[i] = api.ClusterDatacenter{Name: dc, Managers: managers}
		wg.Go(func() {
			st, err := g.clientFor(dc).LeaderStatus(ctx)
			if err != nil {
				view.Datacenters[i].Error = rpcMessage(err)
				return
			}
			view.Datacenters[i].Leader = st
		})
	}
	wg.Wait()
	view.Gates = g.gates()
	writeJSON(w, view)
}

// gates lists the gates of the gossip pool (Deps.Gates), or this gate.
func (g *Gate) gates() []api.ClusterGate {
	if g.gatesFn != nil {
		if gs := g.gatesFn(); len(gs) > 0 {
			return gs
		}
	}
	return []api.ClusterGate{{Name: g.cfg.NodeName, Datacenter: g.cfg.Datacenter, State: "alive"}}
}
