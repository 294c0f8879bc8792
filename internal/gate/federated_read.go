package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// queryDatacenter selects one datacenter's copy on the read endpoints.
const queryDatacenter = "datacenter"

// readTarget reads the ?datacenter= parameter of a read: the client of the
// named datacenter's leader (named true), or the gate's own datacenter's when
// the parameter is absent (named false). An unknown datacenter, a repeated
// parameter or an invalid name is answered 400 invalid_request (ok false).
func (g *Gate) readTarget(w http.ResponseWriter, r *http.Request) (c *rpc.Client, named, ok bool) {
	vs := r.URL.Query()[queryDatacenter]
	switch {
	case len(vs) == 0:
		return g.client, false, true
	case len(vs) > 1:
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest,
			fmt.Sprintf("invalid request: parameter %q is given %d times", queryDatacenter, len(vs)))
	case g.knownDatacenter(vs[0]):
		return g.clientFor(vs[0]), true, true
	case g.federationForming():
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			fmt.Sprintf("datacenter %q is not known yet: the federation of datacenters this gate reads from its managers is still forming; retry later", vs[0]))
	default:
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest,
			fmt.Sprintf("invalid request: parameter %q: datacenter %q is not in the federation", queryDatacenter, vs[0]))
	}
	return nil, false, false
}

// findJob looks a job up in the gate's own datacenter, then, when it is not
// there, in every other datacenter of the federation at once; the first
// datacenter in name order that has it answers. When none has it, the answer
// is the first failure, else errNotInView while the federation is forming
// (the job may be in a datacenter the view does not name yet), else not
// found.
func (g *Gate) findJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	job, err := g.client.GetJob(ctx, tenant, id)
	if err == nil || !errors.Is(err, rpc.ErrNotFound) || g.federation == nil {
		return job, err
	}
	others := g.otherDatacenters()
	jobs := make([]*rpcpb.Job, len(others))
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, dc := range others {
		wg.Go(func() { jobs[i], errs[i] = g.clientFor(dc).GetJob(ctx, tenant, id) })
	}
	wg.Wait()
	for i := range others {
		if errs[i] == nil {
			return jobs[i], nil
		}
	}
	for i, dc := range others {
		if !errors.Is(errs[i], rpc.ErrNotFound) {
			return nil, fmt.Errorf("datacenter %s: %w", dc, errs[i])
		}
	}
	if g.federationForming() {
		return nil, fmt.Errorf("no datacenter this gate knows holds job %q, and the federation of datacenters it reads from its managers is still forming; %w", id, errNotInView)
	}
	return nil, err
}
