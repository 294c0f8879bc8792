package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/once-dev/once/pkg/api"
)

// LeaseOptions say which jobs to lease and for how long (docs/workers.md).
type LeaseOptions struct {
	// Types limits the jobs to these types; empty: every type.
	Types []string
	// MaxJobs is how many jobs at most (default 1, at most 100).
	MaxJobs int
	// LeaseFor is how long each job is held without a heartbeat (whole
	// seconds, default 30 s, at most an hour).
	LeaseFor time.Duration
	// Wait holds the call until a job is queued, at most this long (whole
	// seconds, at most a minute; 0 answers at once).
	Wait time.Duration
	// Worker names the worker in the leases (default: the gate names it
	// after the connection).
	Worker string
}

// workerKey is a fresh opaque Idempotency-Key for one worker call, so that
// the client's own retries of the call get the first answer (a retried lease
// does not lease twice).
func workerKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "w-" + hex.EncodeToString(b[:])
}

// post posts v to path with Idempotency-Key key (workerKey: a fresh one)
// and decodes the answer into a new T; extra lengthens each attempt's
// timeout. replayed says whether the answer was a replay
// (Idempotent-Replayed: true).
func post[T any](ctx context.Context, c *Client, extra time.Duration, path, key string, v any) (out *T, replayed bool, err error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, false, fmt.Errorf("client: encoding %s: %w", path, err)
	}
	out = new(T)
	if replayed, err = c.do(ctx, extra, http.MethodPost, path, key, body, out); err != nil {
		return nil, false, err
	}
	return out, replayed, nil
}

func seconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// Lease leases up to opts.MaxJobs queued jobs of the client's tenant, oldest
// first; none (an empty slice) when nothing was queued before opts.Wait
// ended.
func (c *Client) Lease(ctx context.Context, opts LeaseOptions) ([]api.Lease, error) {
	leases, _, err := c.lease(ctx, opts, workerKey())
	return leases, err
}

// lease is Lease with Idempotency-Key key, and says whether the answer was a
// replay: the kept answer of an earlier attempt of the call
// (Idempotent-Replayed: true), whose leases may have expired since it was
// first given (docs/api.md keeps it for 10 minutes), and then been handed to
// another worker.
func (c *Client) lease(ctx context.Context, opts LeaseOptions, key string) ([]api.Lease, bool, error) {
	req := api.LeaseRequest{Types: opts.Types, MaxJobs: opts.MaxJobs, LeaseSeconds: seconds(opts.LeaseFor),
		WaitSeconds: seconds(opts.Wait), Worker: opts.Worker}
	out, replayed, err := post[api.LeaseList](ctx, c, opts.Wait, "/v1/leases", key, req)
	if err != nil {
		return nil, false, err
	}
	return out.Leases, replayed, nil
}

func jobPath(jobID, action string) string { return "/v1/jobs/" + url.PathEscape(jobID) + "/" + action }

// Heartbeat extends a lease to now + leaseFor (0: 30 s) and returns its new
// expiry. An error matching ErrLeaseLost: the job is no longer the caller's.
func (c *Client) Heartbeat(ctx context.Context, jobID, leaseID string, leaseFor time.Duration) (time.Time, error) {
	out, _, err := post[api.HeartbeatResponse](ctx, c, 0, jobPath(jobID, "heartbeat"), workerKey(),
		api.HeartbeatRequest{LeaseID: leaseID, LeaseSeconds: seconds(leaseFor)})
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, out.ExpiresAt)
}

// Complete records a leased job as succeeded with result (any value
// encoding/json encodes; nil is null). Completing it again with the same
// lease answers the same job.
func (c *Client) Complete(ctx context.Context, jobID, leaseID string, result any) (*api.Job, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the result of job %s: %w", jobID, err)
	}
	job, _, err := post[api.Job](ctx, c, 0, jobPath(jobID, "complete"), workerKey(), api.CompleteRequest{LeaseID: leaseID, Result: raw})
	return job, err
}

// Completion is one item of CompleteMany: a leased job and its result (any
// value encoding/json encodes; nil is null).
type Completion struct {
	JobID   string
	LeaseID string
	Result  any
}

// CompletionResult is one item's outcome: the job, or the error its own
// Complete would have returned (an *Error: errors.Is(err, ErrLeaseLost),
// ErrJobNotFound, ErrBudgetExceeded…).
type CompletionResult struct {
	Job *api.Job
	Err error
}

// CompleteMany completes up to api.MaxCompletions leased jobs in one
// request (POST /v1/completions), each judged as its own Complete. The
// results are in items' order. The error is the request's own (nothing
// was completed then, or the request may be sent again: completing is
// idempotent); an item's refusal is in its result only.
func (c *Client) CompleteMany(ctx context.Context, items []Completion) ([]CompletionResult, error) {
	if len(items) == 0 || len(items) > api.MaxCompletions {
		return nil, fmt.Errorf("client: %d completions, want 1..%d", len(items), api.MaxCompletions)
	}
	req := api.CompletionsRequest{Completions: make([]api.Completion, len(items))}
	for i, it := range items {
		raw, err := json.Marshal(it.Result)
		if err != nil {
			return nil, fmt.Errorf("client: encoding the result of job %s: %w", it.JobID, err)
		}
		req.Completions[i] = api.Completion{JobID: it.JobID, LeaseID: it.LeaseID, Result: raw}
	}
	out, _, err := post[api.CompletionsResponse](ctx, c, 0, "/v1/completions", workerKey(), req)
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(items) {
		return nil, fmt.Errorf("client: %d results for %d completions", len(out.Results), len(items))
	}
	res := make([]CompletionResult, len(items))
	for i, r := range out.Results {
		switch {
		case r.Error != nil:
			res[i].Err = problemError(r.Error.Status, r.Error)
		case r.Job != nil:
			res[i].Job = r.Job
		default:
			return nil, fmt.Errorf("client: result %d is neither a job nor an error", i)
		}
	}
	return res, nil
}

// Fail records a failed attempt: the job is queued again after the
// leader's backoff (retry true, until its last attempt makes it dead), or
// failed at once (retry false).
func (c *Client) Fail(ctx context.Context, jobID, leaseID, message string, retry bool) (*api.Job, error) {
	// Invalid UTF-8 (a program's raw output, say), or a cut inside a
	// character, would travel as U+FFFD, 3 bytes for each invalid byte, and
	// could bring the message over the bound the gate enforces (400
	// invalid_request, nothing recorded): replace each invalid run with one
	// U+FFFD, then cut at a character.
	message = strings.ToValidUTF8(message, "\uFFFD")
	if len(message) > api.MaxJobErrorBytes {
		n := api.MaxJobErrorBytes
		for n > 0 && !utf8.RuneStart(message[n]) {
			n--
		}
		message = message[:n]
	}
	job, _, err := post[api.Job](ctx, c, 0, jobPath(jobID, "fail"), workerKey(), api.FailRequest{LeaseID: leaseID, Error: message, Retry: &retry})
	return job, err
}

// ErrPermanent marks a handler's error as not worth a retry: Run then
// fails the job with retry false (wrap it: fmt.Errorf("bad input: %w",
// client.ErrPermanent)).
var ErrPermanent = errors.New("permanent failure")

// Handler runs one job. ctx ends when the lease is lost (another worker may
// run the job now: stop) or Run is stopping. A nil error completes the job
// with result; an error fails the attempt. A result the ledger's byte
// budget cannot hold (ErrBudgetExceeded), larger than the gate takes
// (ErrBodyTooLarge), or that encoding/json cannot encode (a NaN), fails the
// attempt too, with a retry, as does a panic of the handler (its value is
// the attempt's error; Run goes on).
type Handler func(ctx context.Context, job api.Job, attempt int) (result any, err error)

// WorkerOptions configure Run.
type WorkerOptions struct {
	// Types, LeaseFor and Worker are as in LeaseOptions.
	Types    []string
	LeaseFor time.Duration
	Worker   string
	// Concurrency is how many jobs run at once (default 1; a lease call asks
	// for api.MaxLeaseJobs at most).
	Concurrency int
	// Wait is each lease call's long poll (default 20 s).
	Wait time.Duration
	// Logger receives what Run cannot return: failed heartbeats and
	// reports (default: discard).
	Logger *slog.Logger
}

// Run leases jobs (at most api.MaxLeaseJobs a call) and runs h on each, at
// most opts.Concurrency at once, until ctx ends; it then waits for the
// running handlers (their contexts are cancelled, their leases still
// heartbeated until their outcomes are reported, completions already
// waiting or being sent included) and returns nil. A lease refused
// for good (400, 401, 403, 404, 405, 413: the options or the credentials
// are wrong) makes Run return that error, after the running handlers; any
// other failed lease (a 5xx, a 429, the gates unreachable) is logged and
// retried after a backoff. A lease answer naming a job twice runs it once.
// While a handler runs, and until its outcome is reported, its lease is
// heartbeated every third of opts.LeaseFor (each heartbeat has until the
// next, so one stuck on a gate gives way to the next); a lease lost while
// the handler runs cancels its context and its outcome is not reported (a
// lease of a replayed answer, which may have expired since it was first
// given, is heartbeated before its handler starts, and a lost one is not
// run). Completions that finish while one is being sent go together in the
// next CompleteMany (up to api.MaxCompletions; a lone one is sent at once,
// with no timer), each still reported once and its refusal its own; a
// group's request that fails is sent again as each job's own Complete,
// each call reporting an outcome with 30 s of its own.
// Delivery is at least once: a handler must tolerate running a job again
// (docs/workers.md says how to make it idempotent with the job id).
func (c *Client) Run(ctx context.Context, opts WorkerOptions, h Handler) error {
	// An option left unset (zero or negative) takes its default.
	opts.Concurrency = cmp.Or(max(opts.Concurrency, 0), 1)
	opts.LeaseFor = cmp.Or(max(opts.LeaseFor, 0), api.DefaultLeaseSeconds*time.Second)
	opts.Wait = cmp.Or(max(opts.Wait, 0), 20*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	slots := make(chan struct{}, opts.Concurrency)
	for range opts.Concurrency {
		slots <- struct{}{}
	}
	var running sync.WaitGroup
	g := newGrouper(c, ctx)
	defer g.stop(&running)
	failures := 0
	// A lease call left with no answer (its attempts ran out on 5xx,
	// timeouts, unreachable gates) may have leased jobs: it is sent again,
	// its key and body unchanged, so those jobs come back as a replay
	// instead of being held by no one until their leases expire.
	retryKey, retryN := "", 0
	for {
		// One free slot at least, then every other free one, up to the
		// most jobs a lease call may ask for (the gate refuses more).
		select {
		case <-ctx.Done():
			return nil
		case <-slots:
		}
		n := 1
	more:
		for n < min(opts.Concurrency, api.MaxLeaseJobs) {
			select {
			case <-slots:
				n++
			default:
				break more
			}
		}
		key := workerKey()
		if retryKey != "" {
			for ; n > retryN; n-- { // every slot it had is free again
				slots <- struct{}{}
			}
			key, retryKey = retryKey, ""
		}
		leases, replayed, err := c.lease(ctx, LeaseOptions{Types: opts.Types, MaxJobs: n, LeaseFor: opts.LeaseFor, Wait: opts.Wait, Worker: opts.Worker}, key)
		if err != nil {
			for range n {
				slots <- struct{}{}
			}
			if ctx.Err() != nil {
				return nil
			}
			var e *Error
			if errors.As(err, &e) && leaseRefused(e) {
				return fmt.Errorf("client: leasing jobs: %w", err)
			}
			if !errors.As(err, &e) || transient(e) {
				retryKey, retryN = key, n
			}
			failures++
			opts.Logger.Warn("leasing jobs failed; retrying", "err", err)
			if sleep(ctx, c.leaseRetryWait(failures, err), err) != nil {
				return nil
			}
			continue
		}
		failures = 0
		leases = runnable(leases, n, opts.Logger)
		for i := len(leases); i < n; i++ {
			slots <- struct{}{}
		}
		for _, l := range leases {
			running.Add(1)
			go func() {
				defer func() {
					slots <- struct{}{}
					running.Done()
				}()
				c.runOne(ctx, opts, h, l, replayed, g)
			}()
		}
	}
}

// runnable returns the leases of a lease answer to run with n slots: each
// job once, n at most. An answer breaking either (a gate's bug: the ledger
// leases a job once, and no more than max_jobs) would run a job twice at
// once, or more handlers than slots; the leases left out are logged, and
// expire.
func runnable(leases []api.Lease, n int, log *slog.Logger) []api.Lease {
	run := make([]api.Lease, 0, min(len(leases), n))
	for _, l := range leases {
		if len(run) == n || slices.ContainsFunc(run, func(r api.Lease) bool { return r.Job.JobID == l.Job.JobID }) {
			log.Warn("a lease answer names a job twice, or more jobs than asked: not running this lease", "job_id", l.Job.JobID)
			continue
		}
		run = append(run, l)
	}
	return run
}

// leaseRefused reports whether a lease answer can never succeed, however
// long Run waits: the request itself is refused (400: options out of
// bounds; 404: no such path; 405; 413) or the caller is not allowed (401,
// 403). Run returns it. Anything else — a 500 of a manager's bug, a 429, a
// 409 or 422 of the call's own key, a proxy's error page, a connection
// error — may pass: Run backs off and leases again, as a long-lived worker
// must survive a transient fault of the server.
func leaseRefused(e *Error) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		return true
	}
	return false
}

// runOne runs h on one leased job, heartbeating it, and reports the outcome.
// A lease of a replayed answer (replayed) is heartbeated first: the answer
// kept for a retry of the lease call still names leases that expired since
// (another worker may hold the job now), and such a job is not run.
func (c *Client) runOne(ctx context.Context, opts WorkerOptions, h Handler, l api.Lease, replayed bool, g *grouper) {
	log := opts.Logger.With("job_id", l.Job.JobID, "attempt", l.Attempt)
	every := max(opts.LeaseFor/3, 100*time.Millisecond)
	if replayed {
		bctx, bcancel := context.WithTimeout(context.WithoutCancel(ctx), every)
		_, err := c.Heartbeat(bctx, l.Job.JobID, l.LeaseID, opts.LeaseFor)
		bcancel()
		if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrJobNotFound) {
			log.Warn("a replayed lease is no longer held: not running the job", "err", err)
			return
		}
		// Any other error decided nothing: run it, heartbeating as always.
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The heartbeats go on until the outcome is reported, after Run's
	// context ended too: a handler that takes its time to stop (or ignores
	// its context) keeps its lease, instead of losing it to another worker
	// while it still runs and having its outcome refused; and so does a
	// completion waiting behind another group's request, however slow.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	beat := make(chan struct{})
	defer func() {
		hcancel()
		<-beat
	}()
	var mu sync.Mutex
	returned, lost := false, false
	go func() {
		defer close(beat)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			// One heartbeat (with its retries) has until the next tick: one
			// stuck on a gate that does not answer gives way to the next,
			// which starts on the next gate, before the lease runs out.
			bctx, bcancel := context.WithTimeout(hctx, every)
			_, err := c.Heartbeat(bctx, l.Job.JobID, l.LeaseID, opts.LeaseFor)
			bcancel()
			if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrJobNotFound) {
				// Once the handler has returned, the report's own answer
				// says whether the lease held: a heartbeat refused because
				// the completion got there first is no loss.
				mu.Lock()
				lost = !returned
				mu.Unlock()
				if lost {
					log.Warn("lease lost: stopping the handler", "err", err)
					cancel()
				}
				return
			}
			if err != nil && hctx.Err() == nil {
				log.Warn("heartbeat failed", "err", err)
			}
		}
	}()
	result, herr := callHandler(jctx, h, l, log)
	cancel()
	mu.Lock()
	returned = true
	wasLost := lost
	mu.Unlock()
	if wasLost {
		return // another worker may hold the job: report nothing
	}
	var err error
	if herr == nil {
		// Encode the result here: one that encoding/json refuses (a NaN,
		// a channel) can never be completed, and left unreported the job
		// would wait for its lease's expiry, run again and end dead with
		// no error saying why. It is a failed attempt instead.
		raw, jerr := json.Marshal(result)
		if jerr != nil {
			herr = fmt.Errorf("result not encodable as JSON: %w", jerr)
		} else {
			result = json.RawMessage(raw)
		}
	}
	if herr == nil {
		err = g.complete(Completion{JobID: l.Job.JobID, LeaseID: l.LeaseID, Result: result})
		if errors.Is(err, ErrBudgetExceeded) || errors.Is(err, ErrBodyTooLarge) {
			// The result cannot be stored (the budget has no room for it,
			// or it is larger than the gate takes): say so on the job, and
			// let it run again after the backoff (the budget may have room
			// by then), rather than leave it to its lease's expiry.
			log.Warn("the job's result cannot be recorded: failing the attempt", "err", err)
			msg := "result not recorded: " + err.Error()
			err = c.report(ctx, func(rctx context.Context) error {
				_, err := c.Fail(rctx, l.Job.JobID, l.LeaseID, msg, true)
				return err
			})
		}
	} else {
		err = c.report(ctx, func(rctx context.Context) error {
			_, err := c.Fail(rctx, l.Job.JobID, l.LeaseID, herr.Error(), !errors.Is(herr, ErrPermanent))
			return err
		})
	}
	if err != nil {
		log.Warn("reporting the job's outcome failed; it is redelivered when its lease expires", "err", err)
	}
}

// reportTimeout bounds each call reporting an outcome (a job's Complete or
// Fail, a group's CompleteMany).
var reportTimeout = 30 * time.Second

// report makes one call reporting an outcome, even while Run stops (the
// outcome is known, and a lost report costs a redelivery after the lease
// expires), within reportTimeout of its own: a call made after another ran
// out of time (a group's request, then the job's own Complete) still has
// the whole of it.
func (c *Client) report(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	return call(ctx)
}

// callHandler runs h on l's job. A panic of h is its error (the panic's
// value; wrapped when it is an error, so ErrPermanent in it fails the job
// for good), logged with its stack: the attempt fails, rather than the
// panic ending the worker's process and every job it runs (each run again
// after its lease; a job whose handler always panics would bring down
// every worker that leased it).
func callHandler(ctx context.Context, h Handler, l api.Lease, log *slog.Logger) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			if e, ok := v.(error); ok {
				err = fmt.Errorf("handler panicked: %w", e)
			} else {
				err = fmt.Errorf("handler panicked: %v", v)
			}
			log.Error("the handler panicked: failing the attempt", "err", fmt.Sprintf("%v\n%s", err, debug.Stack()))
		}
	}()
	return h(ctx, l.Job, l.Attempt)
}

// grouper sends Run's completions: one at once when it is alone, and those
// that finish while a request is in flight together in the next one
// (POST /v1/completions, up to api.MaxCompletions), with no timer.
type grouper struct {
	c    *Client
	ctx  context.Context // Run's, without its cancellation
	in   chan *pending
	done chan struct{}
}

// pending is a completion waiting for its answer.
type pending struct {
	c      Completion
	result chan outcome
}

// outcome is a pending completion's answer: err is its own Complete's
// (lone), the item's, or the group request's (group).
type outcome struct {
	err   error
	lone  bool
	group bool
}

func newGrouper(c *Client, ctx context.Context) *grouper {
	g := &grouper{c: c, ctx: context.WithoutCancel(ctx), in: make(chan *pending), done: make(chan struct{})}
	go g.loop()
	return g
}

// stop waits for the running handlers (the grouper's only senders), then
// for the grouper.
func (g *grouper) stop(running *sync.WaitGroup) {
	running.Wait()
	close(g.in)
	<-g.done
}

// complete completes one job, grouped with others finishing meanwhile, and
// returns the error its own Complete would have. It waits for the request
// in flight, if any, however long it takes (its lease is heartbeated
// meanwhile): the grouper takes every completion given to it in its next
// request.
func (g *grouper) complete(c Completion) error {
	p := &pending{c: c, result: make(chan outcome, 1)}
	g.in <- p
	o := <-p.result
	var e *Error
	if !o.lone && o.err != nil && (o.group || !errors.As(o.err, &e) || transient(e)) {
		// The group's request failed (a gate without it, say), or the item
		// decided nothing (a 5xx of the leader): the job's own call, with
		// its retries. Completing is idempotent, so a retry of an item the
		// gate did complete answers the same job.
		o.err = g.c.report(g.ctx, func(ctx context.Context) error {
			_, err := g.c.Complete(ctx, c.JobID, c.LeaseID, c.Result)
			return err
		})
	}
	return o.err
}

func (g *grouper) loop() {
	defer close(g.done)
	for p := range g.in {
		batch := []*pending{p}
	more:
		for len(batch) < api.MaxCompletions {
			select {
			case q, ok := <-g.in:
				if !ok {
					break more
				}
				batch = append(batch, q)
			default:
				break more
			}
		}
		g.send(batch)
	}
}

// send sends a group: a lone completion as its own call.
func (g *grouper) send(batch []*pending) {
	ctx, cancel := context.WithTimeout(g.ctx, reportTimeout)
	defer cancel()
	if len(batch) == 1 {
		_, err := g.c.Complete(ctx, batch[0].c.JobID, batch[0].c.LeaseID, batch[0].c.Result)
		batch[0].result <- outcome{err: err, lone: true}
		return
	}
	items := make([]Completion, len(batch))
	for i, p := range batch {
		items[i] = p.c
	}
	res, err := g.c.CompleteMany(ctx, items)
	for i, p := range batch {
		if err != nil {
			p.result <- outcome{err: err, group: true}
		} else {
			p.result <- outcome{err: res[i].Err}
		}
	}
}

// leaseRetryWait is Run's wait after failures failed leases, the last with
// err: the backoff, at most as long as a call waits to retry
// (retryWaitLimit): a Retry-After no gate sends (a proxy's, of years) would
// stop the worker.
func (c *Client) leaseRetryWait(failures int, err error) time.Duration {
	return min(c.backoff(failures, err), c.retryWaitLimit())
}
