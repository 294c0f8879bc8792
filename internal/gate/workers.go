package gate

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The worker endpoints (docs/workers.md): POST /v1/leases and
// POST /v1/jobs/{id}/heartbeat|complete|fail. The gate checks the request,
// forwards it to its datacenter's leader, where each is one Raft command, and
// answers what the leader decided. A worker call may carry an
// Idempotency-Key: the gate keeps its answer (workerReplays) and gives a
// retry with the same key and body the same answer.

// workerReplayTTL is how long a worker call's answer is kept for retries
// with the same Idempotency-Key; workerReplayMax and workerReplayBytes bound
// how many are kept and their bytes. The least recently used answer is
// dropped when a bound is reached, after which a retry of it runs again (a
// lease is then answered by the leader's own memory of lease answers, or
// hands out other jobs).
const (
	workerReplayTTL   = 10 * time.Minute
	workerReplayMax   = 100_000
	workerReplayBytes = 64 << 20
)

// workerAnswer is a worker call's answer as sent: status, problem code
// ("" for 200) and body.
type workerAnswer struct {
	status int
	code   api.Code
	body   []byte
	// fingerprint is the SHA-256 of the route and the request body: a retry
	// with the same key must send the same request.
	fingerprint [sha256.Size]byte
	// retryAfter, when positive, is the answer's Retry-After.
	retryAfter time.Duration
	// replayed: the leader answered from its memory of lease answers.
	replayed bool
	// transient: the answer decided nothing for a part of the call (an item
	// of a batch answered 5xx), so it is not kept for a retry.
	transient bool
}

// decided reports whether the answer decided the call, so that a retry with
// the same Idempotency-Key may be given it. A 503 or 500 decided nothing: a
// retry must run again. Nor did a 422: the leader keeps this key's answer to
// another request, and the retry with that request must be given it. Nor
// did a 429 (the tenant over its share of the ledger): nothing was
// recorded, and a retry with the same key once room is back must run.
func (a *workerAnswer) decided() bool {
	return a.status < 500 && a.status != http.StatusUnprocessableEntity && a.status != http.StatusTooManyRequests
}

// size is what a kept answer costs: its body and a fixed overhead.
func (a *workerAnswer) size() int64 { return int64(len(a.body)) + 128 }

// workerCall is one worker request, checked, ready to forward.
type workerCall struct {
	route string
	body  []byte
	// forward asks the leader and renders the answer; key is the request's
	// Idempotency-Key ("" without one) and fp its fingerprint.
	forward func(ctx context.Context, key string, fp [sha256.Size]byte) *workerAnswer
	// wait lengthens the forward's deadline (a long poll).
	wait time.Duration
}

// serveWorkerCall runs c, or replays its stored answer when the request
// carries an Idempotency-Key seen before. The key is optional, and read as
// a submission's (optionalKey): X-Idempotency-Key is another name for it,
// and a key that is empty, sent twice or different under the two names is
// 400, never a call run without its key.
func (g *Gate) serveWorkerCall(w http.ResponseWriter, r *http.Request, tenant string, c workerCall) {
	key, present, ok := optionalKey(w, r)
	if !ok {
		return
	}
	if present {
		noteKey(w, key.Raw)
	}
	g.serveKeyedCall(w, r, tenant, key.Raw, c)
}

// serveKeyedCall runs c under key (checked; "" for none), or replays the
// answer kept for the key. Callers asking with one key at the same time share
// one run (replay.Memory.Do), which goes on while any of them waits for it;
// a caller whose request is not the run's gets the run's answer only if it
// was kept (then a 422), else it asks again.
func (g *Gate) serveKeyedCall(w http.ResponseWriter, r *http.Request, tenant, key string, c workerCall) {
	if c.wait > 0 {
		// The server's WriteTimeout, counted from the request's headers,
		// bounds a submission; a long poll answers up to its wait later,
		// and its answer must not be cut. net/http's writer, under the
		// gate's (which unwraps to it), supports the deadline.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.cfg.writeTimeout() + c.wait))
	}
	fp := callFingerprint(c.route, c.body)
	run := func(parent context.Context) *workerAnswer {
		ctx, cancel := context.WithTimeout(parent, g.cfg.ForwardTimeout+c.wait)
		defer cancel()
		if c.wait > 0 {
			// A long poll ends when the gate stops: waiting out its wait
			// would hold the shutdown up to a minute, and then be cut
			// with no answer. The leader leases nothing for a poll that
			// left while it waited; a keyed lease the leader was applying
			// then is kept there for the key's retry.
			stop := context.AfterFunc(g.polls, cancel)
			defer stop()
		}
		a := c.forward(ctx, key, fp)
		a.fingerprint = fp
		return a
	}
	if key == "" {
		g.writeWorkerAnswer(w, run(r.Context()), false)
		return
	}
	for attempt := 1; ; attempt++ {
		a, replayed, err := g.workerReplays.Do(r.Context(), keyedCall(tenant, key), func(ctx context.Context) (*workerAnswer, bool) {
			a := run(ctx)
			return a, a.decided() && !a.transient
		})
		switch {
		case err != nil:
			return // the client has gone
		case a.fingerprint == fp:
			g.writeWorkerAnswer(w, a, replayed || a.replayed)
			return
		case replayed:
			// Kept: the call the key decided is another request.
			writeProblem(w, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused, workerReusedDetail)
			return
		case attempt == maxKeyedAttempts:
			g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable, keyBusyDetail)
			return
		}
		// This call joined the run of another request under the key, whose
		// answer was not kept: it decided nothing (a 503), or the leader
		// refused it (a 422: the key may be this request's). Nothing of it
		// answers this request, which asks again: it runs, or joins a run
		// begun since.
	}
}

// maxKeyedAttempts bounds how many runs under its key a keyed call waits
// for: after that many runs of other requests (each deciding nothing for
// it) it gives up with 503, so that a key reused with other bodies without
// pause cannot hold it forever.
const maxKeyedAttempts = 3

// stoppingDetail answers a long poll the gate's shutdown ended.
const stoppingDetail = "this gate is shutting down; retry (with the same Idempotency-Key), at another gate"

const keyBusyDetail = "other requests with this Idempotency-Key kept running at this gate; retry later (with the same Idempotency-Key)"

// keyedCall is the key of tenant's worker call with Idempotency-Key key in
// the gate's memory of answers.
func keyedCall(tenant, key string) string { return tenant + "\x00" + key }

const workerReusedDetail = "this Idempotency-Key was used with a different worker request"

// callFingerprint is the SHA-256 of route, a NUL and body, hashed from a
// buffer on the stack when they fit in it (a worker call's body mostly
// does): no allocation.
func callFingerprint(route string, body []byte) [sha256.Size]byte {
	var buf [512]byte
	if len(route)+1+len(body) > len(buf) {
		h := sha256.New()
		h.Write([]byte(route))
		h.Write([]byte{0})
		h.Write(body)
		var fp [sha256.Size]byte
		h.Sum(fp[:0])
		return fp
	}
	b := append(append(append(buf[:0], route...), 0), body...)
	return sha256.Sum256(b)
}

func (g *Gate) writeWorkerAnswer(w http.ResponseWriter, a *workerAnswer, replayed bool) {
	if replayed {
		g.metrics.replays.Inc()
		w.Header().Set(api.HeaderReplayed, "true")
	}
	if a.retryAfter > 0 {
		w.Header().Set(api.HeaderRetryAfter, retryAfter(a.retryAfter))
	}
	ct := api.ContentTypeJSON
	if a.status != http.StatusOK {
		ct = api.ContentTypeProblem
		noteCode(w, a.code)
	}
	writeBody(w, a.status, ct, a.body)
}

// workerOK renders a 200 answer.
func workerOK(v any) *workerAnswer {
	b, err := json.Marshal(v)
	if err != nil {
		return workerProblem(http.StatusInternalServerError, api.CodeInternal, encodingFailedDetail)
	}
	return &workerAnswer{status: http.StatusOK, body: append(b, '\n')}
}

func workerProblem(status int, code api.Code, detail string) *workerAnswer {
	return &workerAnswer{status: status, code: code, body: problemBody(status, code, detail)}
}

// workerError renders the leader's refusal of a worker call.
func (g *Gate) workerError(r *http.Request, err error, jobID string) *workerAnswer {
	for _, refusal := range ledgerRefusals {
		if errors.Is(err, refusal.err) {
			// The ledger had no room for the call's entry (an action's key,
			// a worker call's answer): nothing changed, and expiry frees room.
			g.log.Warn(refusal.log, logging.KeyPath, r.URL.Path, logging.KeyError, err)
			a := workerProblem(refusal.status, refusal.code, refusal.detail)
			a.retryAfter = g.cfg.Idempotency.CleanupInterval
			return a
		}
	}
	switch {
	case errors.Is(err, rpc.ErrLeaseLost):
		return workerProblem(http.StatusConflict, api.CodeLeaseLost,
			"the lease is not the job's current one (it expired, another worker holds the job, or the job is finished): stop working on it; "+rpcMessage(err))
	case errors.Is(err, rpc.ErrRequestReused):
		return workerProblem(http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused, workerReusedDetail)
	case errors.Is(err, rpc.ErrConflict):
		return workerProblem(http.StatusConflict, api.CodeJobStateConflict,
			"the action does not apply to the job in its state; nothing changed: "+rpcMessage(err))
	case errors.Is(err, rpc.ErrNotFound):
		return workerProblem(http.StatusNotFound, api.CodeJobNotFound, fmt.Sprintf("no job %q", jobID))
	case errors.Is(err, rpc.ErrBudgetExceeded):
		return workerProblem(http.StatusInsufficientStorage, api.CodeBudgetExceeded,
			"the ledger's byte budget cannot hold this result or error; nothing was recorded and the job is still running under the lease "+
				"(fail it, or let the lease expire): "+rpcMessage(err))
	case errors.Is(err, rpc.ErrInvalid):
		return workerProblem(http.StatusBadRequest, api.CodeInvalidRequest, "invalid request: "+rpcMessage(err))
	case errors.Is(err, rpc.ErrInternal):
		g.log.Error("worker call failed at the manager", logging.KeyPath, r.URL.Path, logging.KeyError, err)
		return workerProblem(http.StatusInternalServerError, api.CodeInternal, "the manager failed to answer")
	case g.polls.Err() != nil && errors.Is(err, context.Canceled):
		a := workerProblem(http.StatusServiceUnavailable, api.CodeUnavailable, stoppingDetail)
		a.retryAfter = g.cfg.RetryAfter
		return a
	default:
		g.log.Warn("worker call failed", logging.KeyPath, r.URL.Path, logging.KeyError, err)
		a := workerProblem(http.StatusServiceUnavailable, api.CodeUnavailable,
			"no manager leader answered in time; retry later (with the same Idempotency-Key)")
		a.retryAfter = g.cfg.RetryAfter
		return a
	}
}

// decodeWorkerBody reads r's body into v. An empty body is {}. The body
// is one JSON object, checked as a submission's is (fingerprint.Canonicalize:
// no duplicate member names anywhere, valid UTF-8, no trailing data), so
// that no parser reads it otherwise than the gate. Unknown members are
// ignored; anything else, or a member of the wrong type, is 400.
func (g *Gate) decodeWorkerBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	body, ok := g.readBody(w, r)
	if !ok {
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	canonical, err := fingerprint.Canonicalize(body)
	if err == nil && canonical[0] != '{' {
		err = errors.New("it is not a JSON object (send no body, or a JSON object)")
	}
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "invalid request: the body is not the expected JSON object: "+err.Error())
		return nil, false
	}
	return body, true
}

// leaseSeconds checks a lease_seconds member. 0 (none named) stays 0: the
// leader then gives MANAGER_JOB_LEASE_DEFAULT (30 s unless set), which a
// duration put here in its place would override (and a MANAGER_JOB_LEASE_MAX
// under it would refuse).
func leaseSeconds(n int) (time.Duration, error) {
	switch {
	case n == 0:
		return 0, nil
	case n < 1 || n > api.MaxLeaseSeconds:
		return 0, fmt.Errorf("invalid request: field \"lease_seconds\": %d is outside 1..%d", n, api.MaxLeaseSeconds)
	}
	return time.Duration(n) * time.Second, nil
}

// handleLease is POST /v1/leases.
func (g *Gate) handleLease(w http.ResponseWriter, r *http.Request, tenant string) {
	var req api.LeaseRequest
	body, ok := g.decodeWorkerBody(w, r, &req)
	if !ok {
		return
	}
	var leaseFor time.Duration
	var err error
	switch {
	case req.MaxJobs < 0 || req.MaxJobs > api.MaxLeaseJobs:
		err = fmt.Errorf("invalid request: field \"max_jobs\": %d is outside 1..%d", req.MaxJobs, api.MaxLeaseJobs)
	case req.WaitSeconds < 0 || req.WaitSeconds > api.MaxWaitSeconds:
		err = fmt.Errorf("invalid request: field \"wait_seconds\": %d is outside 0..%d", req.WaitSeconds, api.MaxWaitSeconds)
	case len(req.Types) > api.MaxLeaseTypes:
		err = fmt.Errorf("invalid request: field \"types\": %d types, at most %d", len(req.Types), api.MaxLeaseTypes)
	case len(req.Worker) > api.MaxTypeLen:
		err = fmt.Errorf("invalid request: field \"worker\": longer than %d bytes", api.MaxTypeLen)
	}
	for _, t := range req.Types {
		if err == nil && !api.ValidName(t, api.MaxTypeLen) {
			err = fmt.Errorf("invalid request: field \"types\": %q is not a job type", t)
		}
	}
	if err == nil {
		leaseFor, err = leaseSeconds(req.LeaseSeconds)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return
	}
	wait := time.Duration(req.WaitSeconds) * time.Second
	fwd := &rpcpb.LeaseRequest{Tenant: tenant, Worker: cmp.Or(req.Worker, r.RemoteAddr), Types: req.Types,
		MaxJobs: int64(cmp.Or(req.MaxJobs, api.DefaultLeaseJobs)), LeaseForNanos: int64(leaseFor), WaitNanos: int64(wait)}
	g.serveWorkerCall(w, r, tenant, workerCall{route: "lease", body: body, wait: wait,
		forward: func(ctx context.Context, key string, fp [sha256.Size]byte) *workerAnswer {
			if key != "" {
				// The leader keeps lease answers too, so a retry through
				// another gate is given the same jobs.
				fwd.Request, fwd.Fingerprint = key, hex.EncodeToString(fp[:])
			}
			start := time.Now()
			resp, err := g.client.Lease(ctx, fwd)
			g.metrics.workerCall("lease", err, time.Since(start))
			if err != nil {
				return g.workerError(r, err, "")
			}
			out := api.LeaseList{Leases: apiLeases(resp.Leases)}
			g.metrics.leased.Add(float64(len(out.Leases)))
			a := workerOK(out)
			a.replayed = resp.Replayed
			return a
		}})
}

// validID reports whether s is a valid job or lease id: 1 to api.MaxTypeLen
// bytes.
func validID(s string) bool {
	return s != "" && len(s) <= api.MaxTypeLen
}

// pathJobID is the {job_id} of a job route, or answers 404 job_not_found
// and returns false when it is empty or too long: no job has such an id,
// and an unknown job is 404 to every job route, as to GET.
func pathJobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("job_id")
	if !validID(id) {
		writeProblem(w, http.StatusNotFound, api.CodeJobNotFound,
			fmt.Sprintf("no job with an id of %d bytes (a job id is 1 to %d bytes)", len(id), api.MaxTypeLen))
		return "", false
	}
	return id, true
}

// serveJobCall serves POST /v1/jobs/{job_id}/<action>: it decodes the body
// into req, checks the job id and *leaseID (req's lease_id, decoded), then
// check (checkFailed answers its error), and forwards call.
func (g *Gate) serveJobCall(w http.ResponseWriter, r *http.Request, tenant, action string, req any, leaseID *string,
	check func() error, call func(ctx context.Context, id string) (any, error)) {
	body, ok := g.decodeWorkerBody(w, r, req)
	if !ok {
		return
	}
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	if !validID(*leaseID) {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest,
			"invalid request: field \"lease_id\" is required, at most "+strconv.Itoa(api.MaxTypeLen)+" bytes")
		return
	}
	if err := check(); err != nil {
		g.writeWorkerAnswer(w, g.checkFailed(err), false)
		return
	}
	g.serveWorkerCall(w, r, tenant, workerCall{route: action + " " + id, body: body,
		forward: func(ctx context.Context, _ string, _ [sha256.Size]byte) *workerAnswer {
			return g.callLeader(ctx, r, action, id, call)
		}})
}

// callLeader asks the leader call, action on job id, counts it in the
// worker calls' metrics and renders its answer: 200 with what call
// returned, else the leader's refusal (workerError).
func (g *Gate) callLeader(ctx context.Context, r *http.Request, action, id string, call func(ctx context.Context, id string) (any, error)) *workerAnswer {
	start := time.Now()
	v, err := call(ctx, id)
	g.metrics.workerCall(action, err, time.Since(start))
	if err != nil {
		return g.workerError(r, err, id)
	}
	return workerOK(v)
}

// handleHeartbeat is POST /v1/jobs/{job_id}/heartbeat.
func (g *Gate) handleHeartbeat(w http.ResponseWriter, r *http.Request, tenant string) {
	var req api.HeartbeatRequest
	var d time.Duration
	g.serveJobCall(w, r, tenant, "heartbeat", &req, &req.LeaseID,
		func() (err error) {
			d, err = leaseSeconds(req.LeaseSeconds)
			return err
		},
		func(ctx context.Context, id string) (any, error) {
			h, err := g.client.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: tenant, JobId: id, LeaseId: req.LeaseID, LeaseForNanos: int64(d)})
			if err != nil {
				return nil, err
			}
			return apiHeartbeat(h), nil
		})
}

// handleComplete is POST /v1/jobs/{job_id}/complete. The result is
// forwarded as encoding/json writes it (compact, with its escapes of <, >
// and &, which may lengthen it): what the ledger stores and every answer
// carries. Longer than GATE_MAX_BODY_BYTES so written, it is 413.
func (g *Gate) handleComplete(w http.ResponseWriter, r *http.Request, tenant string) {
	var req api.CompleteRequest
	var result json.RawMessage
	g.serveJobCall(w, r, tenant, "complete", &req, &req.LeaseID,
		func() (err error) {
			result, err = g.storedResult(req.Result)
			return err
		},
		func(ctx context.Context, id string) (any, error) {
			return g.complete(ctx, tenant, id, req.LeaseID, result)
		})
}

// complete asks the leader to complete job id under leaseID with result (as
// stored: storedResult), for a POST /v1/jobs/{job_id}/complete and for each
// item of a POST /v1/completions: the job as completed.
func (g *Gate) complete(ctx context.Context, tenant, id, leaseID string, result json.RawMessage) (any, error) {
	job, err := g.client.Complete(ctx, &rpcpb.CompleteRequest{Tenant: tenant, JobId: id, LeaseId: leaseID, Result: result})
	if err != nil {
		return nil, err
	}
	return apiJob(job), nil
}

// storedResult is a completion's result as the ledger stores it: null when
// absent, else as encoding/json writes it. It is errResultTooLarge when that
// is longer than GATE_MAX_BODY_BYTES.
func (g *Gate) storedResult(result json.RawMessage) (json.RawMessage, error) {
	if len(result) == 0 {
		return json.RawMessage("null"), nil
	}
	b, err := json.Marshal(result) // valid: the body decoded
	switch {
	case err != nil:
		return nil, fmt.Errorf("invalid request: field \"result\": %w", err)
	case int64(len(b)) > g.cfg.MaxBodyBytes:
		return nil, errResultTooLarge
	}
	return b, nil
}

// errResultTooLarge: a result longer than GATE_MAX_BODY_BYTES once written
// as stored (checkFailed answers it 413 body_too_large).
var errResultTooLarge = errors.New("the result is larger than the body limit once encoded as stored")

// checkFailed is the answer to a worker call that failed the gate's
// checks: 413 body_too_large for errResultTooLarge, else 400
// invalid_request, the error's text the detail.
func (g *Gate) checkFailed(err error) *workerAnswer {
	if errors.Is(err, errResultTooLarge) {
		return workerProblem(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, err.Error()+": "+tooLargeDetail(g.cfg.MaxBodyBytes))
	}
	return workerProblem(http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
}

// handleFail is POST /v1/jobs/{job_id}/fail.
func (g *Gate) handleFail(w http.ResponseWriter, r *http.Request, tenant string) {
	var req api.FailRequest
	g.serveJobCall(w, r, tenant, "fail", &req, &req.LeaseID,
		func() error {
			if len(req.Error) > api.MaxJobErrorBytes {
				return errors.New("invalid request: field \"error\": longer than " + strconv.Itoa(api.MaxJobErrorBytes) + " bytes")
			}
			return nil
		},
		func(ctx context.Context, id string) (any, error) {
			retry := req.Retry == nil || *req.Retry
			job, err := g.client.Fail(ctx, &rpcpb.FailRequest{Tenant: tenant, JobId: id, LeaseId: req.LeaseID, Error: req.Error, Retry: retry})
			if err != nil {
				return nil, err
			}
			return apiJob(job), nil
		})
}
