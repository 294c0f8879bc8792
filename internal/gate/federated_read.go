package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

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

// hedgeDelay is how long a job read that names no datacenter waits for the
// gate's own datacenter before it also asks every other one: a quarter of
// the read's bound (the forward timeout), at most a second. A leader answers
// a read in milliseconds; one that has not answered in a second is failing
// over (a raft election takes about that) or unreachable, and at least three
// quarters of the bound are left for the others to answer.
func hedgeDelay(bound time.Duration) time.Duration {
	return min(time.Second, bound/4)
}

// jobAnswer is one datacenter's answer to a job read.
type jobAnswer struct {
	job *rpcpb.Job
	err error
}

// indexedAnswer is the answer of the i-th other datacenter.
type indexedAnswer struct {
	i int
	jobAnswer
}

// findJob looks a job up in the gate's own datacenter and, when it is not
// there, fails otherwise than as invalid, or has not answered within
// hedgeDelay, in every other datacenter of the federation at once, all
// within ctx (the read's bound). The own datacenter's job is the answer
// whenever it comes within the bound; else the first other datacenter in
// name order that has it, once every datacenter before it has answered, and
// the own datacenter has too or cannot hold the job (the copy found does not
// name it: a job's copies are in the datacenters its submission named, or in
// its one datacenter). When none has it, the answer is the first failure (a
// datacenter that did not answer within the bound among them), else
// errNotInView while the federation is forming (the job may be in a
// datacenter the view does not name yet), else not found: never not found
// while a datacenter that did not answer may hold it. What is still asked
// once the answer is known is cancelled. A gate that knows no other
// datacenter asks its own only, as it always did.
func (g *Gate) findJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	others := g.otherDatacenters()
	if len(others) == 0 {
		job, err := g.client.GetJob(ctx, tenant, id)
		if errors.Is(err, rpc.ErrNotFound) && g.federationForming() {
			return nil, g.notInView(id)
		}
		return job, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ownc := make(chan jobAnswer, 1)
	go func() {
		job, err := g.client.GetJob(ctx, tenant, id)
		ownc <- jobAnswer{job, err}
	}()
	hedge := time.NewTimer(hedgeDelay(g.cfg.ForwardTimeout))
	defer hedge.Stop()

	var (
		own     *jobAnswer                        // the own datacenter's answer, once in
		answers = make([]*jobAnswer, len(others)) // the others' answers, once in
		otherc  chan indexedAnswer                // nil until the others are asked
		pending = len(others)                     // the others not answered yet
	)
	askOthers := func() {
		if otherc != nil {
			return
		}
		otherc = make(chan indexedAnswer, len(others))
		for i, dc := range others {
			c := g.clientFor(dc)
			go func() {
				job, err := c.GetJob(ctx, tenant, id)
				otherc <- indexedAnswer{i, jobAnswer{job, err}}
			}()
		}
	}
	// found is the answer once it is known, whatever has not answered yet.
	found := func() (*jobAnswer, bool) {
		if own != nil && (own.err == nil || errors.Is(own.err, rpc.ErrInvalid)) {
			return own, true
		}
		for _, a := range answers {
			switch {
			case a == nil:
				return nil, false
			case a.err == nil && (own != nil || !slices.Contains(a.job.GetNamedDatacenters(), g.cfg.Datacenter)):
				return a, true
			case a.err == nil:
				return nil, false
			}
		}
		return nil, false
	}
wait:
	for {
		if a, ok := found(); ok {
			return a.job, a.err
		}
		if own != nil {
			askOthers()
			if pending == 0 {
				break
			}
		}
		select {
		case a := <-ownc:
			own = &a
		case <-hedge.C:
			askOthers()
		case a := <-otherc:
			answers[a.i] = &a.jobAnswer
			pending--
		case <-ctx.Done():
			// The bound is over: what has not answered did not answer.
			if own == nil {
				own = &jobAnswer{err: ctx.Err()}
			}
			for i, a := range answers {
				if a == nil {
					answers[i] = &jobAnswer{err: ctx.Err()}
				}
			}
			if a, ok := found(); ok {
				return a.job, a.err
			}
			break wait
		}
	}
	// No datacenter has the job.
	if !errors.Is(own.err, rpc.ErrNotFound) {
		return nil, own.err
	}
	for i, dc := range others {
		if !errors.Is(answers[i].err, rpc.ErrNotFound) {
			return nil, fmt.Errorf("datacenter %s: %w", dc, answers[i].err)
		}
	}
	if g.federationForming() {
		return nil, g.notInView(id)
	}
	return nil, own.err
}

// notInView is the failure of a job read no datacenter the gate knows
// answers with the job while the federation is still forming.
func (g *Gate) notInView(id string) error {
	return fmt.Errorf("no datacenter this gate knows holds job %q, and the federation of datacenters it reads from its managers is still forming; %w", id, errNotInView)
}
