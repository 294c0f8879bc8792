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
// parameter, an invalid name or a query string that does not parse is
// answered 400 invalid_request (ok false).
func (g *Gate) readTarget(w http.ResponseWriter, r *http.Request) (c *rpc.Client, named, ok bool) {
	q, err := readQuery(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return nil, false, false
	}
	vs := q[queryDatacenter]
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
	defer cancel() // ends every read still asking, whose channel has room for its answer
	s := &jobSearch{g: g, ctx: ctx, tenant: tenant, id: id, others: others, answers: make([]*jobAnswer, len(others))}
	ownc := make(chan jobAnswer, 1)
	go func() {
		job, err := g.client.GetJob(ctx, tenant, id)
		ownc <- jobAnswer{job, err}
	}()
	hedge := time.NewTimer(hedgeDelay(g.cfg.ForwardTimeout))
	defer hedge.Stop()
	for {
		var a *jobAnswer
		select {
		case own := <-ownc:
			a = s.ownAnswered(own)
		case <-hedge.C:
			a = s.hedged()
		case other := <-s.otherc:
			a = s.otherAnswered(other)
		case <-ctx.Done():
			a = s.boundOver()
		}
		if a != nil {
			return a.job, a.err
		}
	}
}

// jobSearch is the state of findJob's read across the federation; each of
// its event methods returns the read's answer once it is known, else nil.
type jobSearch struct {
	g          *Gate
	ctx        context.Context // the read's bound, cancelled once it is answered
	tenant, id string
	others     []string           // the other datacenters, in name order
	own        *jobAnswer         // the own datacenter's answer, once in
	answers    []*jobAnswer       // the others' answers, once in
	otherc     chan indexedAnswer // nil until the others are asked
	pending    int                // the others asked and not answered yet
}

// ownAnswered is the own datacenter's answer coming in.
func (s *jobSearch) ownAnswered(a jobAnswer) *jobAnswer {
	s.own = &a
	return s.settle()
}

// otherAnswered is another datacenter's answer coming in.
func (s *jobSearch) otherAnswered(a indexedAnswer) *jobAnswer {
	s.answers[a.i] = &a.jobAnswer
	s.pending--
	return s.settle()
}

// hedged is the hedge delay over: the others are asked too.
func (s *jobSearch) hedged() *jobAnswer {
	s.askOthers()
	return s.settle()
}

// boundOver is the read's bound over: what has not answered did not answer.
func (s *jobSearch) boundOver() *jobAnswer {
	err := s.ctx.Err()
	if s.own == nil {
		s.own = &jobAnswer{err: err}
	}
	for i, a := range s.answers {
		if a == nil {
			s.answers[i] = &jobAnswer{err: err}
		}
	}
	if a := s.found(); a != nil {
		return a
	}
	return &jobAnswer{err: s.none()}
}

// settle is the answer once it is known. The own datacenter's answer
// without the job has every other one asked, and once all have answered
// the read is over.
func (s *jobSearch) settle() *jobAnswer {
	if a := s.found(); a != nil {
		return a
	}
	if s.own == nil {
		return nil
	}
	s.askOthers()
	if s.pending > 0 {
		return nil
	}
	return &jobAnswer{err: s.none()}
}

// askOthers asks every other datacenter, once; each answer has room in
// otherc, so every read ends when ctx does, whether or not it is read.
func (s *jobSearch) askOthers() {
	if s.otherc != nil {
		return
	}
	s.otherc = make(chan indexedAnswer, len(s.others))
	s.pending = len(s.others)
	ctx, tenant, id, otherc := s.ctx, s.tenant, s.id, s.otherc
	for i, dc := range s.others {
		c := s.g.clientFor(dc)
		go func() {
			job, err := c.GetJob(ctx, tenant, id)
			otherc <- indexedAnswer{i, jobAnswer{job, err}}
		}()
	}
}

// found is an answer with the job (or the own datacenter's refusal as
// invalid) once it is known, whatever has not answered yet; else nil.
func (s *jobSearch) found() *jobAnswer {
	if s.own != nil && (s.own.err == nil || errors.Is(s.own.err, rpc.ErrInvalid)) {
		return s.own
	}
	for _, a := range s.answers {
		switch {
		case a == nil:
			return nil
		case a.err == nil && (s.own != nil || !slices.Contains(a.job.GetNamedDatacenters(), s.g.cfg.Datacenter)):
			return a
		case a.err == nil:
			return nil
		}
	}
	return nil
}

// none is the read's failure once every datacenter has answered, or the
// bound is over, and none has the job.
func (s *jobSearch) none() error {
	if !errors.Is(s.own.err, rpc.ErrNotFound) {
		return s.own.err
	}
	for i, dc := range s.others {
		if !errors.Is(s.answers[i].err, rpc.ErrNotFound) {
			return fmt.Errorf("datacenter %s: %w", dc, s.answers[i].err)
		}
	}
	if s.g.federationForming() {
		return s.g.notInView(s.id)
	}
	return s.own.err
}

// notInView is the failure of a job read no datacenter the gate knows
// answers with the job while the federation is still forming.
func (g *Gate) notInView(id string) error {
	return fmt.Errorf("no datacenter this gate knows holds job %q, and the federation of datacenters it reads from its managers is still forming; %w", id, errNotInView)
}
