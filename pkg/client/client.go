// Package client is the Go client of once's gate API (docs/api.md): it submits
// jobs with structured idempotency keys (Keys), retries transient answers with
// the same key and body while failing over between gates, and maps every
// problem code to a sentinel error. It depends on pkg/api, pkg/keys and
// internal/atomicfile (the keys file) only.
// docs/client.md describes it.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// ErrNoGates is returned by New when it is given no gate.
var ErrNoGates = errors.New("client: no gate endpoints")

// maxRetryWait bounds the wait before a retry (MaxBackoff when that is
// more): the longest Retry-After a gate sends is
// IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS, at most an hour.
const maxRetryWait = time.Hour

// errRetryWaitTooLong is wrapped by the error of a call whose next attempt
// would wait more than maxRetryWait (a Retry-After that long).
var errRetryWaitTooLong = errors.New("client: Retry-After too long to wait")

// errNullAnswer is wrapped by the error of a call whose 2xx answer was
// JSON's null rather than an object.
var errNullAnswer = errors.New("the answer is null, not an object")

// ErrNoKeys is returned by Submit when the client has no Keys source.
var ErrNoKeys = errors.New("client: no Keys source (Options.Keys)")

// Options configure a Client. The zero value is usable (but Submit then needs
// SubmitWithKey, or Options.Keys).
type Options struct {
	// Keys makes the idempotency key of every Submit.
	Keys *Keys
	// Token is sent as "Authorization: Bearer <Token>" when not empty.
	Token string
	// HTTPClient does the requests (default: a client without timeout, each
	// attempt being bounded by AttemptTimeout, on a transport of its own
	// that keeps up to MaxIdleConnsPerGate idle connections per gate, see
	// NewTransport).
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one call (default 10); the context
	// bounds its time.
	MaxAttempts int
	// InitialBackoff is the first wait between attempts (default 100ms); it
	// doubles per attempt up to MaxBackoff (default 5s). Each wait is drawn
	// uniformly from [backoff/2, backoff] and is never shorter than the
	// answer's Retry-After.
	InitialBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one HTTP exchange (default 10s); an attempt that
	// runs out of it is retried.
	AttemptTimeout time.Duration
}

// Client talks to a list of gates. It is safe for concurrent use.
type Client struct {
	gates []*url.URL
	opts  Options
	hc    *http.Client
	start atomic.Uint64
}

// New returns a client of the gates, given as base URLs ("http://host:8080")
// or host:port. A gate that is not an http or https URL with a host (an
// empty one included), or whose port is not 1 to 65535, is an error, as is a Token holding a control
// character (a newline: an HTTP header cannot carry it).
func New(gates []string, opts Options) (*Client, error) {
	if len(gates) == 0 {
		return nil, ErrNoGates
	}
	if i := strings.IndexFunc(opts.Token, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
		// net/http refuses such a header at every attempt, which would
		// be retried until the attempts ran out. The token is not echoed.
		return nil, fmt.Errorf("client: Options.Token holds a control character (%U at offset %d: a trailing newline?), which an HTTP header cannot carry", opts.Token[i], i)
	}
	c := &Client{opts: opts, hc: opts.HTTPClient}
	for _, g := range gates {
		if !strings.Contains(g, "://") {
			g = "http://" + g
		}
		u, err := url.Parse(strings.TrimRight(g, "/"))
		if err != nil {
			return nil, fmt.Errorf("client: gate %q: %w", g, err)
		}
		// What net/http would refuse at every attempt (until MaxAttempts or
		// the context ran out) is refused here.
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("client: gate %q: scheme %q: want http or https", g, u.Scheme)
		case u.Host == "":
			return nil, fmt.Errorf("client: gate %q: no host", g)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
				return nil, fmt.Errorf("client: gate %q: port %s: want 1 to 65535", g, p)
			}
		}
		c.gates = append(c.gates, u)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: NewTransport()}
	}
	// An option left unset (zero or negative) takes its default.
	c.opts.MaxAttempts = cmp.Or(max(c.opts.MaxAttempts, 0), 10)
	c.opts.InitialBackoff = cmp.Or(max(c.opts.InitialBackoff, 0), 100*time.Millisecond)
	c.opts.MaxBackoff = cmp.Or(max(c.opts.MaxBackoff, 0), 5*time.Second)
	c.opts.AttemptTimeout = cmp.Or(max(c.opts.AttemptTimeout, 0), 10*time.Second)
	return c, nil
}

// MaxIdleConnsPerGate is how many idle keep-alive connections the default
// transport keeps per gate.
const MaxIdleConnsPerGate = 256

// NewTransport returns the default client's transport: net/http's default
// transport (proxy from the environment, dial and TLS timeouts, HTTP/2 when
// the gate offers it over TLS) keeping up to MaxIdleConnsPerGate idle
// connections per gate, where net/http's keeps 2. A client making many
// calls at once (a worker completing the jobs of a lease concurrently, many
// submitters) then reuses its connections instead of opening and closing
// one for nearly every call, which costs both sides a connection's setup.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = MaxIdleConnsPerGate
	t.MaxIdleConns = 0 // no bound over all gates
	return t
}

// Result is the outcome of a successful submission, cancel or retry.
type Result struct {
	Job api.Job
	// Key is the idempotency key the job was submitted (or the action sent)
	// with.
	Key string
	// Replayed is the Idempotent-Replayed header: the ledger already had
	// the key (an earlier attempt, or another client, got there first).
	Replayed bool
}

// Submit submits job with a new key from Options.Keys. See SubmitWithKey.
// Once it has drawn the key, its errors are *KeyError values naming it:
// repeat a submission that failed with SubmitWithKey and that key, never
// with Submit.
func (c *Client) Submit(ctx context.Context, job api.JobRequest) (*Result, error) {
	return c.withNewKey(ctx, func(key string) (*Result, error) { return c.SubmitWithKey(ctx, key, job) })
}

// SubmitWithKey submits job with key. Transient answers (503, a proxy's
// 502, 504, 408 or code-less 429, 409 request_in_progress, 422
// idempotency_key_claimed, connection errors, attempt timeouts) are
// retried with the same key and the same body bytes, on the next gate each
// time. Any other problem is returned at once as an *Error; when the
// attempts or the context run out, the last error is returned (wrapping
// ctx.Err() when the context ended it, or context.DeadlineExceeded when
// the next attempt would start past its deadline).
func (c *Client) SubmitWithKey(ctx context.Context, key string, job api.JobRequest) (*Result, error) {
	body, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("client: encoding job: %w", err)
	}
	return c.keyed(ctx, key, "/v1/jobs", body)
}

// Cancel cancels the queued job id of the client's tenant: it ends
// cancelled and is never leased. key is the action's Idempotency-Key (""
// for a new one from Options.Keys, named by the *KeyError of a failure);
// transient answers are retried with it,
// as SubmitWithKey retries, and the ledger answers a repeat of the key
// through any gate as a replay. A job already cancelled is answered as it
// is (Replayed). Errors match ErrJobNotFound (no such job for the tenant)
// and ErrJobStateConflict (running or finished).
func (c *Client) Cancel(ctx context.Context, id, key string) (*Result, error) {
	return c.jobAction(ctx, id, key, "cancel")
}

// Retry gives the failed or dead job id of the client's tenant a new
// attempt under the same job ID: it is queued again, with its attempts
// kept (a dead job gets one more). key as for Cancel; a repeat of the key
// is a replay (the job as it is now), never a second retry. Errors match
// ErrJobNotFound and ErrJobStateConflict (any state but failed and dead).
func (c *Client) Retry(ctx context.Context, id, key string) (*Result, error) {
	return c.jobAction(ctx, id, key, "retry")
}

func (c *Client) jobAction(ctx context.Context, id, key, action string) (*Result, error) {
	call := func(key string) (*Result, error) { return c.keyed(ctx, key, jobPath(id, action), nil) }
	if key != "" {
		return call(key)
	}
	return c.withNewKey(ctx, call)
}

// withNewKey makes call with a new key from Options.Keys (a wait for its
// state file's lock ends with ctx too); its failure is a *KeyError naming
// the key, for the caller to repeat the call with it.
func (c *Client) withNewKey(ctx context.Context, call func(key string) (*Result, error)) (*Result, error) {
	if c.opts.Keys == nil {
		return nil, ErrNoKeys
	}
	key, err := c.opts.Keys.nextKey(ctx)
	if err != nil {
		return nil, err
	}
	res, err := call(key)
	if err != nil {
		return nil, &KeyError{Key: key, Err: err}
	}
	return res, nil
}

// keyed posts body to path with the structured idempotency key key; the
// answer is a job.
func (c *Client) keyed(ctx context.Context, key, path string, body []byte) (*Result, error) {
	if _, err := keys.Parse(key); err != nil {
		return nil, err
	}
	res := Result{Key: key}
	var err error
	if res.Replayed, err = c.do(ctx, 0, http.MethodPost, path, key, body, &res.Job); err != nil {
		return nil, err
	}
	return &res, nil
}

// GetJob reads one job: the gate looks in its own datacenter, then in the
// others of the federation.
func (c *Client) GetJob(ctx context.Context, id string) (*api.Job, error) {
	return get[api.Job](ctx, c, "/v1/jobs/"+url.PathEscape(id))
}

// GetJobIn reads datacenter's copy of one job (?datacenter=); an error
// matching ErrJobNotFound when that datacenter does not hold it (yet: a
// multi-datacenter job reaches every datacenter it names, but not at once
// when one was unreachable).
func (c *Client) GetJobIn(ctx context.Context, id, datacenter string) (*api.Job, error) {
	return get[api.Job](ctx, c, "/v1/jobs/"+url.PathEscape(id)+"?datacenter="+url.QueryEscape(datacenter))
}

// GetKey reads the ledger's entry of an idempotency key.
func (c *Client) GetKey(ctx context.Context, key string) (*api.KeyInfo, error) {
	return get[api.KeyInfo](ctx, c, "/v1/idempotency-keys/"+url.PathEscape(key))
}

// Cluster reads GET /v1/cluster: the gate's datacenter as its managers
// report it, its gates and the federation's datacenters (docs/api.md,
// "Operations"). It needs an operator's token (Options.Token set to a token
// of the gate's GATE_OPERATOR_TOKEN_FILE), or a gate with no token file at
// all; a tenant's token is an error matching ErrUnauthorized. A manager or
// datacenter that did not answer the gate is listed with its Error, not
// returned as one.
func (c *Client) Cluster(ctx context.Context) (*api.Cluster, error) {
	return get[api.Cluster](ctx, c, "/v1/cluster")
}

// get reads path into a new T.
func get[T any](ctx context.Context, c *Client, path string) (*T, error) {
	v := new(T)
	if _, err := c.do(ctx, 0, http.MethodGet, path, "", nil, v); err != nil {
		return nil, err
	}
	return v, nil
}

// ListOptions filter ListJobs.
type ListOptions struct {
	Type   string
	Status string
	// State lists jobs in one worker lifecycle state (api.JobStatusQueued,
	// ...; docs/workers.md); not with Status.
	State string
	// Limit is the page size (1-1000; 0 lets the gate choose).
	Limit int
	// Desc lists newest first (order=desc); the default is oldest first. A
	// page's Next continues only in the order that returned it.
	Desc bool
}

// ListPage reads one page of GET /v1/jobs; after is the previous page's Next
// (empty for the first page).
func (c *Client) ListPage(ctx context.Context, opts ListOptions, after string) (*api.JobList, error) {
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Desc {
		q.Set("order", "desc")
	}
	for _, p := range [][2]string{{"type", opts.Type}, {"status", opts.Status}, {"state", opts.State}, {"after", after}} {
		if p[1] != "" {
			q.Set(p[0], p[1])
		}
	}
	path := "/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return get[api.JobList](ctx, c, path)
}

// ListJobs iterates over every job matching opts, oldest first (newest first
// with opts.Desc), reading pages
// as it goes. An error ends the iteration after being yielded.
func (c *Client) ListJobs(ctx context.Context, opts ListOptions) iter.Seq2[api.Job, error] {
	return func(yield func(api.Job, error) bool) {
		after := ""
		for {
			page, err := c.ListPage(ctx, opts, after)
			if err != nil {
				yield(api.Job{}, err)
				return
			}
			for _, j := range page.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if page.Next == nil || *page.Next == "" {
				return
			}
			after = *page.Next
		}
	}
}

// do runs one call with retries and decodes its 2xx answer into out. key,
// when not empty, is sent as the Idempotency-Key; a body is sent as JSON.
// extra lengthens each attempt's timeout (a long poll's wait). replayed is
// the answer's Idempotent-Replayed header.
func (c *Client) do(ctx context.Context, extra time.Duration, method, path, key string, body []byte, out any) (replayed bool, err error) {
	// Spread calls over the gates; an attempt that fails moves to the next.
	first := int(c.start.Add(1) % uint64(len(c.gates)))
	var last error
	for attempt := 0; attempt < c.opts.MaxAttempts; attempt++ {
		if attempt > 0 {
			d := c.backoff(attempt, last)
			if d > c.retryWaitLimit() {
				// A Retry-After no gate sends (a proxy's, a date years
				// ahead): with no deadline, sleeping it would hang the
				// call. Give up now with the answer, as past a deadline.
				return false, fmt.Errorf("client: %s %s: the next attempt would start in %v, past the %v a call waits at most: %w (last error: %w)",
					method, path, d.Round(time.Second), c.retryWaitLimit(), errRetryWaitTooLong, last)
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				// The next attempt would start past the deadline (a
				// Retry-After longer than the time left): give up now
				// rather than sleep until the context ends.
				return false, fmt.Errorf("client: %s %s: the next attempt, in %v, would start past the context's deadline: %w (last error: %w)",
					method, path, d.Round(time.Millisecond), context.DeadlineExceeded, last)
			}
			if err := sleep(ctx, d, last); err != nil {
				return false, err
			}
		}
		gate := c.gates[(first+attempt)%len(c.gates)]
		resp, b, err := c.once(ctx, extra, gate, method, path, key, body)
		if err != nil {
			if ctx.Err() != nil {
				// The context ended this attempt: the call's error wraps
				// it and the last answer a gate gave, as sleep's does
				// (this attempt's error says no more than ctx.Err()).
				if last == nil {
					last = err
				}
				return false, fmt.Errorf("client: %s %s: %w (last error: %w)", method, path, ctx.Err(), last)
			}
			last = err // connection error or attempt timeout: retry
			continue
		}
		if r := resp.Request; r != nil && r.Method != method && r.Response != nil {
			// net/http followed a 301, 302 or 303 of a POST with a GET
			// of the new address, without the body (a proxy sending
			// http:// on to https://, say): the call never reached a
			// gate, and the GET's answer is not its answer.
			return false, &Error{Status: r.Response.StatusCode, Detail: fmt.Sprintf(
				"%s %s was redirected to %s %s, which drops its body: give the client the address the gate answers on",
				method, path, r.Method, r.URL.Redacted())}
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			if int64(len(b)) > maxAnswerBytes {
				// Not retried: the call may have taken effect (a
				// Submit's error names its key).
				return false, fmt.Errorf("client: %s %s: the answer is over %d bytes, more than a gate sends: %w", method, path, maxAnswerBytes, errAnswerTooLarge)
			}
			// Every answer of the API is an object; JSON's null would
			// decode into nothing without an error, and the call return
			// an empty value (a job without an id) as the gate's answer.
			// Anything else that is not an object fails to decode.
			if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
				return false, fmt.Errorf("client: decoding %s %s answer: %w", method, path, errNullAnswer)
			}
			if err := json.Unmarshal(b, out); err != nil {
				return false, fmt.Errorf("client: decoding %s %s answer: %w", method, path, err)
			}
			return resp.Header.Get(api.HeaderReplayed) == "true", nil
		}
		e := problem(resp, b)
		if !transient(e) {
			return false, e
		}
		last = e
	}
	return false, last
}

// transient reports whether an answer is worth another attempt with the same
// key and body.
func transient(e *Error) bool {
	switch e.Status {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusRequestTimeout:
		// A proxy (or a server) timed out reading the request: it was
		// never answered, and the same key and body again are safe.
		return true
	case http.StatusTooManyRequests:
		// A gate's 429 is a problem (job_rejected, a stored outcome;
		// tenant_quota_exceeded): its answer. One without a code is a
		// proxy's rate limit in front of the gates: the request never
		// reached one.
		return e.Code == ""
	case http.StatusConflict:
		return e.Code == api.CodeRequestInProgress
	case http.StatusUnprocessableEntity:
		// Another datacenter's concurrent first attempt holds the key; the
		// same key again gets its job's answer (docs/api.md, Datacenters).
		return e.Code == api.CodeIdempotencyKeyClaimed
	}
	return false
}

// backoff is the wait before attempt (1-based retry count): exponential
// backoff with jitter, at least the last answer's Retry-After.
func (c *Client) backoff(attempt int, last error) time.Duration {
	// InitialBackoff doubled attempt-1 times, or MaxBackoff when that is
	// more: the shift is taken only where it cannot overflow (a shift
	// past int64 wrapped to any value, a short wait among them).
	d := c.opts.MaxBackoff
	if n := min(attempt-1, 62); c.opts.InitialBackoff <= c.opts.MaxBackoff>>n {
		d = c.opts.InitialBackoff << n
	}
	d = d/2 + rand.N(d/2+1)
	var e *Error
	if errors.As(last, &e) && e.RetryAfter > d {
		d = e.RetryAfter
	}
	return d
}

// retryWaitLimit is the longest wait before a retry: maxRetryWait, or
// MaxBackoff when that is more.
func (c *Client) retryWaitLimit() time.Duration { return max(maxRetryWait, c.opts.MaxBackoff) }

// sleep waits d, or until ctx ends (an error wrapping ctx.Err() and last).
func sleep(ctx context.Context, d time.Duration, last error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("client: waiting to retry: %w (last error: %w)", ctx.Err(), last)
	case <-t.C:
		return nil
	}
}

// MaxProblemBytes bounds how much of a non-2xx answer's body is read: far
// more than any problem of docs/api.md, far less than an endless error
// page. A 2xx answer is read up to maxAnswerBytes.
const MaxProblemBytes = 64 << 10

// maxAnswerBytes bounds a 2xx answer's body: the gate bounds its answers
// (docs/api.md: a list page at about 4 MiB of jobs, a lease answer at about
// 8 MiB, a single job within twice GATE_MAX_BODY_BYTES, at most 8 MiB, and
// its error), so more is not a gate's answer, and reading on (an endless
// body) would take the process's memory. A variable for the tests.
var maxAnswerBytes int64 = 256 << 20

// errAnswerTooLarge is wrapped by the error of a call whose 2xx answer
// was longer than maxAnswerBytes.
var errAnswerTooLarge = errors.New("client: answer too large")

// once is one HTTP exchange, bounded by AttemptTimeout + extra.
func (c *Client) once(ctx context.Context, extra time.Duration, gate *url.URL, method, path, key string, body []byte) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout+extra)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, gate.String()+path, r)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", api.ContentTypeJSON)
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	if c.opts.Token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+c.opts.Token)
	}
	req.Header.Set("Accept", api.ContentTypeJSON+", "+api.ContentTypeProblem)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s%s: %w", method, gate.Host, path, err)
	}
	defer resp.Body.Close()
	var rb io.Reader = resp.Body
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A problem is small; a proxy's error page may not be (or may
		// never end): read what a problem could hold, and drop the rest
		// with the connection.
		rb = io.LimitReader(resp.Body, MaxProblemBytes)
	} else {
		// One byte past the bound tells an answer over it (do refuses
		// it) from one exactly at it.
		rb = io.LimitReader(resp.Body, maxAnswerBytes+1)
	}
	b, err := io.ReadAll(rb)
	if err != nil {
		return nil, nil, fmt.Errorf("client: reading %s %s%s: %w", method, gate.Host, path, err)
	}
	return resp, b, nil
}

// problem turns a non-2xx answer into an *Error.
func problem(resp *http.Response, b []byte) *Error {
	var e *Error
	var p api.Problem
	if strings.HasPrefix(resp.Header.Get("Content-Type"), api.ContentTypeProblem) && json.Unmarshal(b, &p) == nil {
		e = problemError(resp.StatusCode, &p)
	} else {
		e = &Error{Status: resp.StatusCode, Detail: strings.TrimSpace(string(b))}
		if len(e.Detail) > 200 {
			// At a character's start: a cut inside one is not UTF-8.
			n := 200
			for n > 0 && !utf8.RuneStart(e.Detail[n]) {
				n--
			}
			e.Detail = e.Detail[:n]
		}
	}
	e.RetryAfter = retryAfter(resp.Header.Get(api.HeaderRetryAfter))
	return e
}

// retryAfter reads a Retry-After value (RFC 9110): delta-seconds (digits
// only; a number too large for a time.Duration is the largest one), or an
// HTTP date (the time until it, 0 when past); 0 when absent or malformed.
func retryAfter(s string) time.Duration {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		n, _ := strconv.ParseUint(s, 10, 64) // all digits: on overflow, the largest uint64
		if n > uint64(math.MaxInt64/time.Second) {
			return math.MaxInt64
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// problemError is the *Error of problem p answered with status.
func problemError(status int, p *api.Problem) *Error {
	return &Error{Status: status, Code: p.Code, Title: p.Title, Detail: p.Detail, Reason: p.Reason}
}
