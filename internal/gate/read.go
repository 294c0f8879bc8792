package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// readContext bounds a read at the leader by the forward timeout.
func (g *Gate) readContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), g.cfg.ForwardTimeout)
}

// readError answers a failed read: 503 with Retry-After for errNotInView,
// notFound for rpc.ErrNotFound (also for another tenant's job or key: 404,
// never 403), 400 for a request the manager refused as malformed, 503
// otherwise.
func (g *Gate) readError(w http.ResponseWriter, r *http.Request, err error, notFound api.Code, notFoundDetail string) {
	switch {
	case errors.Is(err, errNotInView):
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
	case errors.Is(err, rpc.ErrNotFound):
		writeProblem(w, http.StatusNotFound, notFound, notFoundDetail)
	case errors.Is(err, rpc.ErrInvalid):
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "invalid request: "+rpcMessage(err))
	case errors.Is(err, rpc.ErrTooLarge):
		g.log.Error("read answer too large", logging.KeyPath, r.URL.Path, logging.KeyError, err)
		writeProblem(w, http.StatusInternalServerError, api.CodeResponseTooLarge, "a job is larger than a read answer can carry: "+rpcMessage(err))
	case errors.Is(err, rpc.ErrInternal):
		g.log.Error("read failed at the manager", logging.KeyPath, r.URL.Path, logging.KeyError, err)
		writeProblem(w, http.StatusInternalServerError, api.CodeInternal, "the manager failed to answer the read")
	default:
		g.log.Warn("read failed", logging.KeyPath, r.URL.Path, logging.KeyError, err)
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable, "no manager leader answered in time; retry later")
	}
}

func rpcMessage(err error) string {
	var e *rpc.Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return err.Error()
}

// handleGetJob is GET /v1/jobs/{job_id}.
func (g *Gate) handleGetJob(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("job_id")
	c, named, ok := g.readTarget(w, r)
	if !ok {
		return
	}
	ctx, cancel := g.readContext(r)
	defer cancel()
	var job *rpcpb.Job
	var err error
	if named {
		job, err = c.GetJob(ctx, tenant, id)
	} else {
		job, err = g.findJob(ctx, tenant, id)
	}
	if err != nil {
		g.readError(w, r, err, api.CodeJobNotFound, fmt.Sprintf("no job %q", id))
		return
	}
	body, err := jobBody(apiJob(job))
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, api.CodeInternal, encodingFailedDetail)
		return
	}
	writeBody(w, http.StatusOK, api.ContentTypeJSON, body)
}

// handleListJobs is GET /v1/jobs?type=&status=&state=&limit=&after=&order=.
func (g *Gate) handleListJobs(w http.ResponseWriter, r *http.Request, tenant string) {
	req, none, err := parseListQuery(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return
	}
	req.Tenant = tenant
	c, _, ok := g.readTarget(w, r)
	if !ok {
		return
	}
	if none {
		writeJSON(w, api.JobList{Jobs: []api.Job{}})
		return
	}
	ctx, cancel := g.readContext(r)
	defer cancel()
	resp, err := c.ListJobs(ctx, req)
	if err != nil {
		g.readError(w, r, err, api.CodeNotFound, "not found")
		return
	}
	out := api.JobList{Jobs: apiJobs(resp.Jobs)}
	if resp.Next != "" {
		next := resp.Next
		out.Next = &next
	}
	writeJSON(w, out)
}

// Query parameters of GET /v1/jobs.
const (
	queryType   = "type"
	queryStatus = "status"
	queryState  = "state"
	queryLimit  = "limit"
	queryAfter  = "after"
	queryOrder  = "order"
)

// The values of GET /v1/jobs?order=: oldest first (the default) or newest
// first.
const (
	orderAsc  = "asc"
	orderDesc = "desc"
)

// jobStates are the values of GET /v1/jobs?state=.
var jobStates = []string{api.JobStatusQueued, api.JobStatusRunning, api.JobStatusSucceeded, api.JobStatusFailed, api.JobStatusDead,
	api.JobStatusCancelled}

// maxQueryValue bounds type, status and after.
const maxQueryValue = 1024

// parseListQuery reads GET /v1/jobs's parameters. Unknown parameters are
// ignored; a known one given twice, a limit outside 1..1000 or an oversized
// value is an error naming the parameter. none reports a status filter that
// no job matches: status is an exact match, and every job's is committed
// (a lifecycle state is listed by state); committed or empty, like an empty
// type, is no filter. The request's Status carries the state alone.
func parseListQuery(r *http.Request) (req *rpcpb.ListJobsRequest, none bool, err error) {
	q, err := readQuery(r)
	if err != nil {
		return nil, false, err
	}
	for _, name := range []string{queryType, queryStatus, queryState, queryLimit, queryAfter, queryOrder} {
		if vs := q[name]; len(vs) > 1 {
			return nil, false, fmt.Errorf("invalid request: parameter %q is given %d times", name, len(vs))
		} else if len(vs) == 1 && len(vs[0]) > maxQueryValue {
			return nil, false, fmt.Errorf("invalid request: parameter %q is longer than %d characters", name, maxQueryValue)
		}
	}
	st := q.Get(queryStatus)
	none = st != "" && st != api.JobStatusCommitted
	req = &rpcpb.ListJobsRequest{
		Type:  q.Get(queryType),
		After: q.Get(queryAfter),
		Limit: api.DefaultListLimit,
	}
	if q.Has(queryState) {
		// The two filters cannot both be given.
		st := q.Get(queryState)
		switch {
		case q.Has(queryStatus):
			return nil, false, fmt.Errorf("invalid request: parameters \"status\" and \"state\" cannot both be given")
		case !slices.Contains(jobStates, st):
			return nil, false, fmt.Errorf("invalid request: parameter \"state\" must be one of %s (got %q)", strings.Join(jobStates, ", "), st)
		}
		req.Status = st
	}
	if q.Has(queryOrder) {
		switch o := q.Get(queryOrder); o {
		case orderAsc:
		case orderDesc:
			req.Desc = true
		default:
			return nil, false, fmt.Errorf("invalid request: parameter \"order\" must be %s or %s (got %q)", orderAsc, orderDesc, o)
		}
	}
	if q.Has(queryLimit) {
		s := q.Get(queryLimit)
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > api.MaxListLimit || s[0] == '+' {
			return nil, false, fmt.Errorf("invalid request: parameter \"limit\" must be an integer from 1 to %d (got %q)", api.MaxListLimit, s)
		}
		req.Limit = int64(n)
	}
	return req, none, nil
}

// readQuery parses r's query string, or returns an error for the 400 of a
// query that does not parse (a malformed %-escape, a ';'): url.URL.Query
// would drop such a pair silently, and the read would answer as if a
// parameter the caller gave (limit=%zz) were absent.
func readQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("invalid request: the query string does not parse: %w", err)
	}
	return q, nil
}

// handleGetKey is GET /v1/idempotency-keys/{key}; the key is URL-escaped in the
// path (an sf-string is accepted too).
func (g *Gate) handleGetKey(w http.ResponseWriter, r *http.Request, tenant string) {
	key, err := keys.Parse(r.PathValue("key"))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, err.Error())
		return
	}
	c, named, ok := g.readTarget(w, r)
	if !ok {
		return
	}
	ctx, cancel := g.readContext(r)
	defer cancel()
	pinfo, err := c.GetKey(ctx, tenant, key.Raw)
	pending := false
	if err == nil && !named {
		pinfo, pending, err = g.followClaim(ctx, tenant, key.Raw, pinfo)
	}
	if err != nil {
		g.readError(w, r, err, api.CodeIdempotencyKeyNotFound, fmt.Sprintf("no entry for idempotency key %q", key.Raw))
		return
	}
	// The key's parts come from the key itself: present for a structured key,
	// absent for an opaque one, whatever the manager filled in.
	info := apiKeyInfo(pinfo)
	if pending {
		info.State, info.Home = api.KeyStatePending, ""
	}
	info.Key = key.Raw
	info.ClientID, info.Sequence, info.Nonce = "", nil, ""
	if key.Structured {
		seq := key.Sequence
		info.ClientID, info.Sequence, info.Nonce = key.ClientID, &seq, key.Nonce
	}
	writeJSON(w, info)
}

// followClaim answers a key read that names no datacenter when the entry
// read is a claim (an omitted datacenters list in a federation: the key is
// held here for a job of another datacenter, its home): the key's entry is
// the home's, where its admission is decided, followed from claim to claim
// as submitOmitted follows them. A home that holds nothing for the key yet
// (the first attempt stopped between the claims and the home), or claims
// that still name each other after as many rounds as submitOmitted takes (an
// attempt is moving them to the home that sorts first), leave the key
// pending: info, with pending true. A claim naming a datacenter the gate does
// not know is errNotInView: the home cannot be asked, and a claim is never
// the answer.
func (g *Gate) followClaim(ctx context.Context, tenant, key string, info *rpcpb.KeyInfo) (*rpcpb.KeyInfo, bool, error) {
	rounds := max(maxHomeRounds, len(g.otherDatacenters())+1)
	for i := 0; info.GetState() == api.KeyStateClaimed; i++ {
		home := info.GetHome()
		switch {
		case i == rounds:
			return info, true, nil
		case !g.knownDatacenter(home):
			return nil, false, fmt.Errorf("the key is held for datacenter %q, which this gate's federation view does not name yet; %w", home, errNotInView)
		}
		next, err := g.clientFor(home).GetKey(ctx, tenant, key)
		switch {
		case errors.Is(err, rpc.ErrNotFound):
			return info, true, nil
		case err != nil:
			return nil, false, err
		}
		info = next
	}
	return info, false, nil
}

// errNotInView ends the detail of a read that needs a datacenter the gate's
// federation view does not name (not yet, or no longer): 503, to retry
// (readError).
var errNotInView = errors.New("retry later")
