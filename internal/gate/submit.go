package gate

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/once-dev/once/internal/cache"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/internal/jobid"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/tracing"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// submitPath is the path hashed into every submission's fingerprint.
const submitPath = "/v1/jobs"

// response is a rendered answer to a submission. Cached responses (COMMITTED and
// REJECTED outcomes) are shared by every replay: they are immutable once built.
type response struct {
	status   int
	code     api.Code // "" for 201
	body     []byte   // the exact bytes every replay sends
	location string   // 201 only
	// replayable marks a deterministic outcome (COMMITTED or REJECTED): it is
	// replayed with Idempotent-Replayed: true to every later duplicate.
	replayable bool
	// replayed is the Idempotent-Replayed value of the first answer: true when
	// the ledger had the entry before this gate's request (the key was first
	// sent through another gate, or this gate's cache lost it).
	replayed bool
	// expiresAt is when the ledger's entry expires: the Idempotency-Expires-At
	// of every answer carrying this outcome.
	expiresAt time.Time
	// retryBy is the same instant on the gate's own clock (localExpiry): a
	// 429's Retry-After counts down to it, so a gate whose wall clock is
	// off the ledger's still tells the time left.
	retryBy time.Time
	// retryAfter, when positive, is a fixed Retry-After (503, 409).
	retryAfter time.Duration

	// Set by seal, before the response is shared through the cache: the
	// SHA-256 of the raw body it answered, and its header values rendered
	// once for every replay.
	sealed       bool
	rawSum       [sha256.Size]byte
	lengthText   []string
	expiresText  []string
	locationText []string
}

// Header values shared by every answer. net/http only reads them; a handler
// that appended to one would get a copy (each has cap == len).
var (
	hdrContentType   = http.CanonicalHeaderKey("Content-Type")
	hdrContentLength = http.CanonicalHeaderKey("Content-Length")
	hdrNosniff       = http.CanonicalHeaderKey("X-Content-Type-Options")
	hdrReplayed      = http.CanonicalHeaderKey(api.HeaderReplayed)
	hdrExpiresAt     = http.CanonicalHeaderKey(api.HeaderIdempotencyExpiresAt)
	hdrLocation      = http.CanonicalHeaderKey(api.HeaderLocation)
	valJSON          = []string{api.ContentTypeJSON}
	valProblem       = []string{api.ContentTypeProblem}
	valNosniff       = []string{"nosniff"}
	valTrue          = []string{"true"}
	valFalse         = []string{"false"}
)

// seal prepares r for being replayed from the cache: it records the raw
// body's hash (a later request with the same bytes under the same key is the
// same request, recognised without canonicalizing it again: Cache.Replay)
// and renders the header values every replay sends. r is immutable after.
func (r *response) seal(rawSum [sha256.Size]byte) {
	r.rawSum = rawSum
	// The values share one array, each a slice of its own with cap == len.
	vals := make([]string, 3)
	vals[0] = strconv.Itoa(len(r.body))
	r.lengthText = vals[0:1:1]
	if r.replayable && !r.expiresAt.IsZero() {
		vals[1] = api.FormatTime(r.expiresAt)
		r.expiresText = vals[1:2:2]
	}
	if r.location != "" {
		vals[2] = r.location
		r.locationText = vals[2:3:3]
	}
	r.sealed = true
}

// responseOverhead is the accounted fixed size of a cached response (the
// struct, its headers, the cache entry) besides its body.
const responseOverhead = 256

// responseSize is the cache's Size function (IDEMPOTENCY_MAX_BYTES).
func responseSize(v any) int64 {
	r := v.(*response)
	return int64(responseOverhead + len(r.body) + len(r.location))
}

// reply sends resp. replay says whether the answer is a replay of a stored
// outcome (counted in replays_total). A sealed response (every replay from
// the cache) sets the header values it rendered once, without rendering or
// canonicalizing anything; a 429's Retry-After counts down to its expiry,
// so it is rendered each time.
func (g *Gate) reply(w http.ResponseWriter, resp *response, replay bool) {
	if replay {
		g.metrics.replays.Inc()
	}
	h := w.Header()
	switch {
	case resp.locationText != nil:
		h[hdrLocation] = resp.locationText
	case resp.location != "":
		h.Set(hdrLocation, resp.location)
	}
	if resp.replayable {
		switch {
		case resp.expiresText != nil:
			h[hdrExpiresAt] = resp.expiresText
		case !resp.expiresAt.IsZero():
			h.Set(hdrExpiresAt, api.FormatTime(resp.expiresAt))
		}
		if replay {
			h[hdrReplayed] = valTrue
		} else {
			h[hdrReplayed] = valFalse
		}
	}
	switch {
	case resp.status == http.StatusTooManyRequests && resp.replayable:
		// A stored rejection (capacity): the time left on its entry. A 429
		// that recorded nothing (tenant_quota_exceeded) has a fixed one.
		h.Set(api.HeaderRetryAfter, retryAfter(resp.retryBy.Sub(g.now())))
	case resp.retryAfter > 0:
		h.Set(api.HeaderRetryAfter, retryAfter(resp.retryAfter))
	}
	if resp.code == "" {
		h[hdrContentType] = valJSON
	} else {
		h[hdrContentType] = valProblem
	}
	if resp.lengthText != nil {
		h[hdrContentLength] = resp.lengthText
	} else {
		h.Set(hdrContentLength, strconv.Itoa(len(resp.body)))
	}
	h[hdrNosniff] = valNosniff
	noteCode(w, resp.code)
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

// checkRoute checks that the gate knows every datacenter job names (its
// own, or one of the federation view); a failure is the response to send.
func (g *Gate) checkRoute(job api.JobRequest) *response {
	for _, dc := range job.Datacenters {
		if g.knownDatacenter(dc) {
			continue
		}
		if g.federationForming() {
			// The gate has not read a federation view yet, or the view is
			// still forming (formingFederation): it cannot tell an unknown
			// datacenter from one it has not heard of yet.
			return g.retryLaterResponse(http.StatusServiceUnavailable, api.CodeUnavailable,
				fmt.Sprintf("datacenter %q is not known yet: the federation of datacenters this gate reads from its managers is still forming; retry later with the same key", dc))
		}
		// Not in the federation this gate knows: the request is wrong, not
		// the cluster. Nothing is forwarded or cached.
		return problemResponse(http.StatusBadRequest, api.CodeInvalidRequest,
			fmt.Sprintf("invalid request: field \"datacenters\": datacenter %q is not in the federation", dc))
	}
	return nil
}

// problemResponse builds a response carrying a problem.
func problemResponse(status int, code api.Code, detail string) *response {
	return &response{status: status, code: code, body: problemBody(status, code, detail)}
}

// retryLaterResponse is a transient problem (503, 409) with Config.RetryAfter
// as its Retry-After.
func (g *Gate) retryLaterResponse(status int, code api.Code, detail string) *response {
	resp := problemResponse(status, code, detail)
	resp.retryAfter = g.cfg.RetryAfter
	return resp
}

// handleSubmit is POST /v1/jobs.
func (g *Gate) handleSubmit(w http.ResponseWriter, r *http.Request, tenant string) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	resultTTL, ok := g.resultTTL(w, r)
	if !ok {
		return
	}
	noteKey(w, key.Raw)
	body, ok := g.readBody(w, r)
	if !ok {
		return
	}
	// A retry usually sends the very bytes of its first attempt: recognised
	// by their hash, it is answered from the cache without canonicalizing or
	// fingerprinting the body (the same bytes under the same tenant and key
	// can only have the same fingerprint).
	rawSum := sha256.Sum256(body)
	ckey := cache.Key(tenant, key.Raw)
	if look, ok := g.cache.Replay(ckey, func(v *response) bool { return v.sealed && v.rawSum == rawSum }); ok {
		g.reply(w, look.Value, true)
		return
	}
	// The body is read once: the canonical form is what is fingerprinted,
	// decoded and sent (the manager receives the canonical payload, so every
	// gate renders the job as the same bytes). Canonicalize catches
	// malformed JSON (with offsets into the client's body); a body that is
	// not a valid request is answered at once, nothing forwarded or cached.
	canonical, members, err := fingerprint.CanonicalizeObject(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "invalid request: body is "+err.Error())
		return
	}
	job, err := readJob(canonical, members, g.cfg.Datacenter)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return
	}
	// An omitted list is fingerprinted by whether the gate's federation names
	// another datacenter. A gate that has read no view yet (it has just
	// started) waits for its first: fingerprinted as its own datacenter's
	// job, the same request through it would be another request than
	// through every other gate (422 idempotency_key_reused against the
	// claims of a federation), or a second job.
	if omittedList(members) && !g.awaitFederationView(r.Context()) {
		g.reply(w, g.retryLaterResponse(http.StatusServiceUnavailable, api.CodeUnavailable,
			"this gate has not read the federation of datacenters from its managers yet; retry later with the same key"), false)
		return
	}
	// The fingerprint is taken over the datacenters as the set they resolve
	// to; the canonical payload sent on is unchanged. An omitted list in a
	// federation is fingerprinted as omitted: its home is decided by the
	// ledgers, not by which gate it came through.
	federated := g.federated()
	fpBody, claimed := fingerprintBody(canonical, members, job, federated)
	fp := fingerprint.Fingerprint(tenant, http.MethodPost, submitPath, fpBody)
	// In a federation, an omitted list and the list naming its home alone
	// are one request (docs/multidc.md): the ledger is told the other form's
	// fingerprint (forward), taken over rest.
	var rest []byte
	if federated && (claimed || len(job.Datacenters) == 1) {
		rest = restMembers(canonical, members)
	}

	look := g.cache.Begin(ckey, fp)
	if look.Kind == cache.LookupHit {
		// The same fingerprint is the same canonical body, which passed the
		// route check below when it was first accepted: replay.
		g.reply(w, look.Value, true)
		return
	}
	if problem := g.checkRoute(job); problem != nil {
		if look.Kind == cache.LookupMiss {
			// Duplicates waiting on this entry carry the same body: they get
			// the same answer, and nothing is cached.
			_ = look.Owner.Abandon(problem)
		}
		g.reply(w, problem, false)
		return
	}
	switch look.Kind {
	case cache.LookupMismatch:
		if look.State != cache.Pending && rest == nil {
			// A stored outcome of another body: the ledger holds the key for it.
			writeProblem(w, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused, reusedDetail)
			return
		}
		// Another body's request is in flight under the key: nothing is
		// stored yet, so the gate cannot tell which of the two the key
		// belongs to (this one may be the retry of the key's first request,
		// its outcome evicted or expired from the cache, and the other the
		// reuse). Or the stored outcome may be of this request's other form
		// (rest), which only the ledger can tell: it knows the job's home.
		// Forward, cache nothing (the key's entry is the other request's),
		// and answer what the ledger answers.
		resp, _, _ := g.forward(r.Context(), tenant, key, fp, rest, job, resultTTL, claimed)
		g.reply(w, resp, resp.replayed)
	case cache.LookupPending:
		g.awaitPending(w, r, look.Waiter)
	case cache.LookupMiss:
		resolved := false
		defer func() {
			if !resolved { // forward panicked: never leave the waiters hanging
				_ = look.Owner.Abandon(problemResponse(http.StatusInternalServerError, api.CodeInternal, panicDetail))
			}
		}()
		resp, state, cacheUntil := g.forward(r.Context(), tenant, key, fp, rest, job, resultTTL, claimed)
		resolved = true
		if state == cache.Committed || state == cache.Rejected {
			resp.seal(rawSum)
			err = look.Owner.CompleteUntil(resp, state, cacheUntil)
		} else {
			err = look.Owner.Abandon(resp)
		}
		if err != nil {
			// Complete and Abandon fail only when called twice (ErrResolved) or
			// with a bad state or TTL (ErrInvalidState): a bug, not the
			// client's concern. The answer stands; waiters were already woken.
			g.log.Warn("resolving cache entry", logging.KeyTenant, tenant, logging.KeyError, err)
		}
		g.reply(w, resp, resp.replayed)
	default:
		panic(fmt.Sprintf("gate: unexpected cache lookup kind %v", look.Kind))
	}
}

// idempotencyKey returns the request's key, from Idempotency-Key or its other
// name X-Idempotency-Key, or answers 400 and returns false: the key is
// required (optionalKey says how it is read).
func idempotencyKey(w http.ResponseWriter, r *http.Request) (keys.Key, bool) {
	key, present, ok := optionalKey(w, r)
	if ok && !present {
		writeProblem(w, http.StatusBadRequest, api.CodeIdempotencyKeyMissing,
			cmp.Or(r.Pattern, "POST /v1/jobs")+" requires an Idempotency-Key header (or X-Idempotency-Key)")
		return keys.Key{}, false
	}
	return key, ok
}

// optionalKey returns the request's key, from Idempotency-Key or its other
// name X-Idempotency-Key (present false when neither is sent), or answers
// 400 idempotency_key_invalid and returns ok false. Each header may appear
// once, and an empty one is invalid, not missing; when both are sent they
// must carry the same key. Every route that takes a key reads it so, whether
// it requires one (a submission, an action) or not (a worker call).
func optionalKey(w http.ResponseWriter, r *http.Request) (key keys.Key, present, ok bool) {
	var buf [2]keys.Key // one a header: found stays on the stack
	found := buf[:0]
	for _, name := range []string{api.HeaderIdempotencyKey, api.HeaderXIdempotencyKey} {
		values := r.Header.Values(name)
		switch len(values) {
		case 0:
			continue
		case 1:
		default:
			writeProblem(w, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid,
				fmt.Sprintf("idempotency key must be sent in exactly one %s header (got %d)", name, len(values)))
			return keys.Key{}, false, false
		}
		key, err := keys.Parse(values[0])
		if err != nil {
			writeProblem(w, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, name+": "+err.Error())
			return keys.Key{}, false, false
		}
		found = append(found, key)
	}
	switch {
	case len(found) == 0:
		return keys.Key{}, false, true
	case len(found) == 2 && found[0].Raw != found[1].Raw:
		writeProblem(w, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid,
			"the Idempotency-Key and X-Idempotency-Key headers carry different keys; send one, or both with the same key")
		return keys.Key{}, false, false
	}
	return found[0], true, true
}

// resultTTL returns the lifetime the request asks for its stored outcome
// (Idempotency-TTL, decimal seconds from 1 to IDEMPOTENCY_MAX_TTL_SECONDS), 0
// when the header is absent, or answers 400 invalid_request and returns false.
func (g *Gate) resultTTL(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	values := r.Header.Values(api.HeaderIdempotencyTTL)
	if len(values) == 0 {
		return 0, true
	}
	max := g.cfg.MaxTTL
	fail := func(why string) (time.Duration, bool) {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest,
			fmt.Sprintf("invalid request: %s header %s; it is a number of seconds from 1 to %s",
				api.HeaderIdempotencyTTL, why, config.FormatSeconds(max)))
		return 0, false
	}
	if len(values) > 1 {
		return fail(fmt.Sprintf("sent %d times", len(values)))
	}
	d, err := config.ParseSeconds(values[0])
	if err != nil {
		return fail(fmt.Sprintf("%q is not a decimal number", values[0]))
	}
	// The range is checked on the value as written, not as rounded to the
	// nanosecond: 0.9999999999 is below 1 although it rounds to 1 s.
	exact, ok := new(big.Rat).SetString(strings.TrimSpace(values[0]))
	if !ok || exact.Cmp(big.NewRat(1, 1)) < 0 || exact.Cmp(big.NewRat(int64(max), int64(time.Second))) > 0 {
		return fail(fmt.Sprintf("%q is out of range", values[0]))
	}
	return d, true
}

// Details of problems answered from more than one place.
const (
	reusedDetail = "this idempotency key was used with a different request (tenant, method, path or body); " +
		"use a new key for a new request"
	inProgressDetail = "a request with this idempotency key is still being processed"
	panicDetail      = "the gate failed unexpectedly; the failure was logged"
)

// awaitPending answers a duplicate of a PENDING submission: it waits for the
// owner's outcome (at most IDEMPOTENCY_PENDING_WAIT_TIMEOUT) and replays it, or
// answers 409 request_in_progress.
func (g *Gate) awaitPending(w http.ResponseWriter, r *http.Request, waiter *cache.Waiter[*response]) {
	if !g.cfg.Idempotency.WaitForPending {
		g.retryLater(w, http.StatusConflict, api.CodeRequestInProgress, inProgressDetail)
		return
	}
	if g.testHookWaiting != nil {
		g.testHookWaiting()
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.Idempotency.PendingWaitTimeout)
	defer cancel()
	v, _, err := waiter.Wait(ctx)
	switch {
	case err == nil || errors.Is(err, cache.ErrAbandoned):
		// The owner's outcome: a stored result is replayed; a transient
		// answer (503 and the like, never cached) is passed on as it is.
		g.reply(w, v, v.replayable)
	case r.Context().Err() != nil:
		// The client is gone; nobody reads an answer.
		writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the request was cancelled")
	default:
		g.retryLater(w, http.StatusConflict, api.CodeRequestInProgress,
			fmt.Sprintf("%s after waiting %s", inProgressDetail, g.cfg.Idempotency.PendingWaitTimeout))
	}
}

// retryLater answers retryLaterResponse(status, code, detail).
func (g *Gate) retryLater(w http.ResponseWriter, status int, code api.Code, detail string) {
	g.reply(w, g.retryLaterResponse(status, code, detail), false)
}

// readBody reads the request body, at most MaxBodyBytes. Content-Type is not
// looked at: the body must be JSON whatever the client labels it.
func (g *Gate) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := g.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		writeProblem(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, tooLargeDetail(limit))
		return nil, false
	}
	// MaxBytesReader is given the connection's own writer, so that net/http
	// knows to close the connection rather than drain an oversized body.
	conn := w
	if rw, ok := w.(*responseWriter); ok {
		conn = rw.ResponseWriter
	}
	body, err := io.ReadAll(http.MaxBytesReader(conn, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, tooLargeDetail(limit))
			return nil, false
		}
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "invalid request: reading the body failed: "+err.Error())
		return nil, false
	}
	return body, true
}

func tooLargeDetail(limit int64) string {
	return fmt.Sprintf("the request body is larger than the limit of %d bytes", limit)
}

// Outcomes of a forward, for the forward_duration_seconds metric.
const (
	outcomeUnavailable = "unavailable"
	outcomeError       = "error"
)

// forward submits a job at the manager leader and renders its answer. state is
// Committed or Rejected for the deterministic outcomes the cache keeps (until
// the returned time: the ledger's entry's expiry by the gate's clock, at most
// the configured TTL from now), else 0: the answer is not cached.
//
// resultTTL, when positive, is the lifetime the client asked for (the
// Idempotency-TTL header): the manager stores the outcome that long, and the
// cache keeps it at most that long. claimed marks an omitted datacenters
// list in a federation (submitOmitted). rest, when set, is the body's
// members but datacenters (restMembers) of a request with another form in a
// federation, an omitted list or a list naming one datacenter: the other
// form's fingerprint goes with it (rpcpb.SubmitRequest.AltFingerprint).
func (g *Gate) forward(parent context.Context, tenant string, key keys.Key, fp string, rest []byte, job api.JobRequest, resultTTL time.Duration, claimed bool) (*response, cache.State, time.Time) {
	wait := g.cfg.pendingWait()
	// The forward outlives a client that hangs up: duplicates may be waiting on
	// its outcome, and a deterministic outcome is worth caching.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), g.cfg.ForwardTimeout+wait)
	defer cancel()
	ctx, span := tracing.Span(ctx, "gate.forward")
	defer span.End()
	if span.IsRecording() { // tracing off: no attributes built
		span.SetAttributes(attribute.String("once.tenant", tenant), attribute.String("once.idempotency_key", key.Raw))
	}
	start := time.Now()
	req := &rpcpb.SubmitRequest{
		Tenant:         tenant,
		Key:            key.Raw,
		Fingerprint:    fp,
		Job:            &rpcpb.JobRequest{Type: job.Type, Payload: job.Payload, Datacenters: job.Datacenters},
		WaitMillis:     wait.Milliseconds(),
		ProposedJobId:  jobid.Derive(tenant, key.Raw, fp),
		ResultTtlNanos: int64(resultTTL),
	}
	var sr *rpcpb.SubmitResponse
	var err error
	if claimed {
		sr, err = g.submitOmitted(ctx, req, rest)
	} else {
		if rest != nil { // the list names one datacenter: its omitted form
			req.AltFingerprint = fingerprint.Fingerprint(tenant, http.MethodPost, submitPath, append([]byte{'{'}, rest...))
		}
		sr, err = g.submitAll(ctx, req)
	}
	outcome := outcomeUnavailable
	switch {
	case err == nil:
		outcome = sr.Outcome
	case forwardPanicked(err): // a bug, counted as failed counts its answers
		outcome = outcomeError
	}
	defer func() {
		g.metrics.forwardDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		if span.IsRecording() {
			span.SetAttributes(attribute.String("once.outcome", outcome))
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}
	}()
	if err != nil {
		return g.forwardError(err, tenant), 0, time.Time{}
	}
	now := g.now()
	// stored completes a deterministic outcome: its expiry (the ledger's,
	// else the lifetime asked for or configured, from now) and until when the
	// cache keeps it.
	stored := func(resp *response, state cache.State, configured time.Duration) (*response, cache.State, time.Time) {
		resp.replayable, resp.replayed, resp.expiresAt = true, sr.Replayed, expiresAt(sr)
		ttl := cmp.Or(resultTTL, configured)
		if resp.expiresAt.IsZero() {
			resp.expiresAt = now.Add(ttl)
		}
		// The cache keeps it until the entry expires by the gate's clock
		// (localExpiry), at most the state's configured TTL from now; the
		// configured TTL from now when the ledger gave no expiry. An entry
		// already expired is not cached at all: its waiters get the outcome
		// all the same (cache.Owner.CompleteUntil), and a duplicate is
		// forwarded, never replayed past the ledger's expiry.
		resp.retryBy = resp.expiresAt
		cacheUntil := now.Add(min(ttl, configured))
		if until, known := localExpiry(sr, start, now); known {
			resp.retryBy = until
			if !cacheUntil.Before(until) {
				cacheUntil = until
			}
		}
		return resp, state, cacheUntil
	}
	// failed answers 500 for a manager's answer the gate cannot render (a
	// bug): logged, never cached.
	failed := func(detail, logMsg string, logArgs ...any) (*response, cache.State, time.Time) {
		outcome = outcomeError
		g.log.Error(logMsg, append([]any{logging.KeyTenant, tenant}, logArgs...)...)
		return problemResponse(http.StatusInternalServerError, api.CodeInternal, detail), 0, time.Time{}
	}
	switch sr.Outcome {
	case rpc.OutcomeCommitted:
		if sr.Job == nil {
			return failed("the manager's answer was incomplete", "manager answered committed without a job")
		}
		body, err := jobBody(apiJob(sr.Job))
		if err != nil {
			return failed("encoding the job failed", "encoding job", logging.KeyError, err)
		}
		return stored(&response{status: http.StatusCreated, body: body, location: "/v1/jobs/" + url.PathEscape(sr.Job.JobId)},
			cache.Committed, g.cfg.Idempotency.CommittedTTL)
	case rpc.OutcomeRejected:
		if sr.Rejection == nil {
			return failed("the manager's answer was incomplete", "manager answered rejected without a rejection")
		}
		status := http.StatusUnprocessableEntity
		if sr.Rejection.Status == http.StatusTooManyRequests {
			status = http.StatusTooManyRequests
		}
		detail := sr.Rejection.Detail
		if detail == "" {
			detail = "admission refused the job: " + sr.Rejection.Reason
		}
		return stored(&response{status: status, code: api.CodeJobRejected, body: rejectionBody(status, detail, sr)},
			cache.Rejected, g.cfg.Idempotency.RejectedTTL)
	case rpc.OutcomeInProgress:
		return g.retryLaterResponse(http.StatusConflict, api.CodeRequestInProgress, inProgressDetail), 0, time.Time{}
	case rpc.OutcomeKeyReused:
		return problemResponse(http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused, reusedDetail), 0, time.Time{}
	case rpc.OutcomeKeyExpired:
		detail := "the entry of this idempotency key expired and the client has already committed this sequence; the job is not executed again"
		if key.Structured {
			detail = fmt.Sprintf("the entry of this idempotency key expired and sequence %d is at or below what client %q has already committed; "+
				"the job is not executed again: use a new sequence for a new job", key.Sequence, key.ClientID)
		}
		return problemResponse(http.StatusConflict, api.CodeIdempotencyKeyExpired, detail), 0, time.Time{}
	default:
		return failed("the manager's answer was not understood", "manager answered an unknown outcome", logging.KeyOutcome, sr.Outcome)
	}
}

// localExpiry is when sr's entry expires by the gate's clock (now): the
// manager's remaining_nanos (by ledger time) less the time since sent, when
// the request left, on the monotonic clock. No wall clock is compared
// across hosts, so a gate whose clock is off the ledger's neither replays
// past the ledger's expiry nor miscounts a Retry-After. Only an older
// manager, which does not send it, is taken by its expiry as it is. false:
// the ledger gave no expiry.
func localExpiry(sr *rpcpb.SubmitResponse, sent, now time.Time) (time.Time, bool) {
	switch {
	case sr.RemainingNanos > 0:
		return now.Add(time.Duration(sr.RemainingNanos) - time.Since(sent)), true
	case sr.ExpiresAtUnixNano != 0:
		return expiresAt(sr), true
	}
	return time.Time{}, false
}

// expiresAt is when sr's entry expires, the zero time when sr has none.
func expiresAt(sr *rpcpb.SubmitResponse) time.Time {
	if n := sr.GetExpiresAtUnixNano(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// forwardError maps a failed forward to its answer: 503 for everything
// transient (no leader before the deadline, a full ledger), 500 for a request
// the manager could not understand or a panic of a fan-out's goroutine (a
// bug). Nothing of it is cached.
func (g *Gate) forwardError(err error, tenant string) *response {
	if forwardPanicked(err) { // logged with its stack where it was recovered
		return problemResponse(http.StatusInternalServerError, api.CodeInternal, panicDetail)
	}
	for _, r := range ledgerRefusals {
		if errors.Is(err, r.err) {
			g.log.Warn(r.log, logging.KeyTenant, tenant, logging.KeyError, err)
			resp := problemResponse(r.status, r.code, r.detail)
			resp.retryAfter = g.cfg.Idempotency.CleanupInterval // when expiry frees room
			return resp
		}
	}
	var ce *claimedError
	if errors.As(err, &ce) {
		g.log.Warn("key held for another datacenter's job", logging.KeyTenant, tenant, logging.KeyDatacenter, ce.home)
		return problemResponse(http.StatusUnprocessableEntity, api.CodeIdempotencyKeyClaimed,
			fmt.Sprintf("this idempotency key is held for a job of datacenter %q, submitted at the same time through a gate of that datacenter; "+
				"retry later with the same key for its answer", ce.home))
	}
	switch {
	case errors.Is(err, rpc.ErrInvalid), errors.Is(err, rpc.ErrInternal):
		g.log.Error("manager refused the submission", logging.KeyTenant, tenant, logging.KeyError, err)
		return problemResponse(http.StatusInternalServerError, api.CodeInternal,
			"the manager could not process the submission; the same key may be retried")
	default:
		// rpc.ErrUnavailable (the client's deadline), and anything unexpected:
		// retrying the key is always safe, the ledger deduplicates.
		g.log.LogAttrs(context.Background(), slog.LevelWarn, "forward failed",
			slog.String(logging.KeyTenant, tenant), slog.Any(logging.KeyError, err))
		detail := "no manager leader answered in time; retry later with the same key"
		var dcErr *datacenterError
		if errors.As(err, &dcErr) {
			detail = fmt.Sprintf("datacenter %q did not answer in time; what the other datacenters admitted stays: retry later with the same key", dcErr.dc)
		}
		return g.retryLaterResponse(http.StatusServiceUnavailable, api.CodeUnavailable, detail)
	}
}

// ledgerRefusals are the ledger's "no room" answers: nothing was recorded, and
// the same key may be retried once expiry frees room.
var ledgerRefusals = []struct {
	err    error
	log    string
	status int
	code   api.Code
	detail string
}{
	{rpc.ErrLedgerFull, "ledger full", http.StatusServiceUnavailable, api.CodeUnavailable,
		"the datacenter's ledger is full of live entries; retry later with the same key"},
	{rpc.ErrWatermarksFull, "watermark table full", http.StatusServiceUnavailable, api.CodeUnavailable,
		"the datacenter's table of client sequence watermarks is full; retry later with the same key"},
	{rpc.ErrOutboxFull, "outbox full", http.StatusServiceUnavailable, api.CodeOutboxFull,
		"the datacenter's outbox holds its maximum of multi-datacenter submissions another datacenter has not confirmed yet; retry later with the same key"},
	{rpc.ErrTenantQuota, "tenant over its ledger share", http.StatusTooManyRequests, api.CodeTenantQuotaExceeded,
		"this tenant holds its share of the datacenter's idempotency ledger; retry later with the same key"},
}

// authenticate returns the request's tenant, or answers 401 and returns false.
func (g *Gate) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !g.tokens.tenants() {
		noteTenant(w, api.DefaultTenant)
		return api.DefaultTenant, true
	}
	values := r.Header.Values(api.HeaderAuthorization)
	if len(values) == 1 {
		if tenant, ok := g.tokens.tenant(values[0]); ok {
			noteTenant(w, tenant)
			return tenant, true
		}
	}
	detail := "a valid 'Authorization: Bearer <token>' header is required"
	if len(values) > 1 {
		detail = "exactly one Authorization header is allowed"
	}
	unauthorized(w, detail)
	return "", false
}
