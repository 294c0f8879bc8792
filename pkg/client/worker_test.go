package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// fakeQueue is a gate's worker endpoints over an in-memory queue: enough to
// drive Run (leases with waits, heartbeats, complete, fail) and record what
// the worker reported.
type fakeQueue struct {
	mu        sync.Mutex
	queued    []string
	leases    map[string]string // job → current lease id
	n         int
	completed map[string]string // job → result
	failed    map[string]bool   // job → retry
	lose      map[string]bool   // jobs whose heartbeat answers lease_lost
	maxJobs   int               // the largest max_jobs asked
	running   int
	keys      map[string]bool // Idempotency-Keys seen
	budget    int             // results longer are refused with budget_exceeded (0: none)
	maxResult int             // results longer are refused with body_too_large (0: none)
	errs      map[string]string
	batches   []int          // the items of each POST /v1/completions
	leaseErrs []int          // statuses answered to the first leases, one each
	leaseN    int            // leases asked
	beats     map[string]int // heartbeats answered, per job
	replay    bool           // lease answers say Idempotent-Replayed: true
	dup       bool           // lease answers name each of their leases twice
	// lostLeases: the next lease call leases jobs but its answer is lost,
	// and it and the next lostLeases-1 lease calls are answered 503; after
	// them a lease call with its key is answered its leases, replayed.
	lostLeases int
	lost       map[string]api.LeaseList // the answers lost, by key
}

func newFakeQueue(jobs ...string) *fakeQueue {
	return &fakeQueue{queued: jobs, leases: map[string]string{}, completed: map[string]string{},
		failed: map[string]bool{}, lose: map[string]bool{}, keys: map[string]bool{}, errs: map[string]string{}, beats: map[string]int{},
		lost: map[string]api.LeaseList{}}
}

// client serves q until the test ends and returns a client of it.
func (q *fakeQueue) client(t *testing.T) *Client {
	t.Helper()
	return q.serve(t, fastOpts(), nil)
}

// serve serves q through wrap (nil: as is) until the test ends and returns
// a client of it with opts.
func (q *fakeQueue) serve(t *testing.T, opts Options, wrap func(http.Handler) http.Handler) *Client {
	t.Helper()
	var h http.Handler = q
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (q *fakeQueue) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := r.Header.Get(api.HeaderIdempotencyKey)
	_, retried := q.lost[k]
	if k == "" || (q.keys[k] && !retried) {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "")
		return
	} else {
		q.keys[k] = true
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.URL.Path == "/v1/leases" {
		q.leaseN++
		switch {
		case retried && q.lostLeases > 0:
			q.lostLeases--
			writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "")
			return
		case retried:
			w.Header().Set(api.HeaderReplayed, "true")
			reply(q.lost[k])
			return
		}
		if len(q.leaseErrs) > 0 {
			status := q.leaseErrs[0]
			q.leaseErrs = q.leaseErrs[1:]
			code := api.CodeInternal
			switch status {
			case http.StatusUnauthorized:
				code = api.CodeUnauthorized
			case http.StatusBadRequest:
				code = api.CodeInvalidRequest
			case http.StatusTooManyRequests:
				code = api.CodeTenantQuotaExceeded
			}
			writeProblem(w, status, code, "")
			return
		}
		var req api.LeaseRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		q.maxJobs = max(q.maxJobs, req.MaxJobs)
		if req.MaxJobs > api.MaxLeaseJobs { // as the gate
			writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, "max_jobs")
			return
		}
		out := api.LeaseList{Leases: []api.Lease{}}
		for len(q.queued) > 0 && len(out.Leases) < req.MaxJobs {
			id := q.queued[0]
			q.queued = q.queued[1:]
			q.n++
			q.leases[id] = fmt.Sprint("l", q.n)
			out.Leases = append(out.Leases, api.Lease{LeaseID: q.leases[id], Job: api.Job{JobID: id}, Attempt: 1})
		}
		if q.lostLeases > 0 {
			q.lost[k] = out
			q.lostLeases--
			writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "")
			return
		}
		if q.replay {
			w.Header().Set(api.HeaderReplayed, "true")
		}
		if q.dup {
			out.Leases = slices.Repeat(out.Leases, 2)
		}
		reply(out)
		return
	}
	if r.URL.Path == "/v1/completions" {
		var req api.CompletionsRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		q.batches = append(q.batches, len(req.Completions))
		out := api.CompletionsResponse{Results: make([]api.CompletionResult, len(req.Completions))}
		for i, c := range req.Completions {
			job, p := q.complete(c.JobID, c.LeaseID, c.Result)
			out.Results[i] = api.CompletionResult{Job: job, Error: p}
		}
		reply(out)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/jobs/"), "/")
	id, action := parts[0], parts[1]
	var body struct {
		LeaseID string          `json:"lease_id"`
		Result  json.RawMessage `json:"result"`
		Retry   *bool           `json:"retry"`
		Error   string          `json:"error"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if q.leases[id] != body.LeaseID || (action == "heartbeat" && q.lose[id]) {
		writeProblem(w, http.StatusConflict, api.CodeLeaseLost, "")
		return
	}
	switch action {
	case "heartbeat":
		q.beats[id]++
		reply(api.HeartbeatResponse{LeaseID: body.LeaseID, ExpiresAt: api.FormatTime(time.Now().Add(time.Minute))})
	case "complete":
		job, p := q.complete(id, body.LeaseID, body.Result)
		if p != nil {
			writeProblem(w, p.Status, p.Code, p.Detail)
			return
		}
		reply(job)
	case "fail":
		q.failed[id] = body.Retry != nil && *body.Retry
		q.errs[id] = body.Error
		delete(q.leases, id)
		reply(api.Job{JobID: id})
	}
}

// complete is one completion, of its own call or of a batch.
func (q *fakeQueue) complete(id, leaseID string, result json.RawMessage) (*api.Job, *api.Problem) {
	if q.leases[id] != leaseID {
		return nil, &api.Problem{Status: http.StatusConflict, Code: api.CodeLeaseLost}
	}
	if q.maxResult > 0 && len(result) > q.maxResult {
		return nil, &api.Problem{Status: http.StatusRequestEntityTooLarge, Code: api.CodeBodyTooLarge, Detail: "too large"}
	}
	if q.budget > 0 && len(result) > q.budget {
		return nil, &api.Problem{Status: http.StatusInsufficientStorage, Code: api.CodeBudgetExceeded, Detail: "over budget"}
	}
	q.completed[id] = string(result)
	delete(q.leases, id)
	return &api.Job{JobID: id, State: api.JobStatusSucceeded}, nil
}

// Run completes every job with its handler's result, fails a job whose
// handler fails (retry false for ErrPermanent), never runs more than
// Concurrency handlers at once, and stops a handler whose lease is lost
// without reporting its outcome.
func TestRunLeasesRunsAndReports(t *testing.T) {
	q := newFakeQueue("a", "b", "c", "d", "e", "bad", "hopeless", "stolen")
	q.lose["stolen"] = true
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	concurrent, peak := 0, 0
	stolenReturned := false
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, WorkerOptions{Concurrency: 3, LeaseFor: 300 * time.Millisecond, Wait: time.Second},
			func(ctx context.Context, job api.Job, attempt int) (any, error) {
				mu.Lock()
				concurrent++
				peak = max(peak, concurrent)
				mu.Unlock()
				defer func() {
					mu.Lock()
					concurrent--
					mu.Unlock()
				}()
				switch job.JobID {
				case "bad":
					return nil, errors.New("try again")
				case "hopeless":
					return nil, fmt.Errorf("bad input: %w", ErrPermanent)
				case "stolen":
					<-ctx.Done() // cancelled when the heartbeat finds the lease lost
					mu.Lock()
					stolenReturned = true
					mu.Unlock()
					return "too late", nil
				}
				time.Sleep(20 * time.Millisecond)
				return map[string]string{"job": job.JobID}, nil
			})
	}()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 5 && len(q.failed) == 2 && len(q.leases) == 1
	})
	// The lost job's handler returns once its heartbeat finds the lease
	// gone; Run returns after its report would have been made.
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stolenReturned
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.completed["a"] != `{"job":"a"}` || !q.failed["bad"] || q.failed["hopeless"] {
		t.Fatalf("completed %v failed %v", q.completed, q.failed)
	}
	if _, ok := q.completed["stolen"]; ok || q.leases["stolen"] == "" {
		t.Fatalf("a job whose lease was lost was reported: completed %v", q.completed)
	}
	if peak > 3 || q.maxJobs > 3 {
		t.Fatalf("%d handlers at once, max_jobs %d: want at most 3", peak, q.maxJobs)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runOneGoodOneBad runs Run over a queue of jobs good and bad, with h, until
// one job is completed and one failed, and leaves q locked for the
// caller's checks (the caller defers q.mu.Unlock).
func runOneGoodOneBad(t *testing.T, q *fakeQueue, h Handler) {
	t.Helper()
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, WorkerOptions{Concurrency: 2, LeaseFor: time.Minute, Wait: time.Second}, h) }()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 1 && len(q.failed) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
}

// A result the ledger's budget refuses (507 budget_exceeded) is not
// dropped silently: Run fails the attempt with a retry and says why.
func TestRunFailsAResultOverBudget(t *testing.T) {
	q := newFakeQueue("small", "big")
	q.budget = 100
	runOneGoodOneBad(t, q, func(ctx context.Context, job api.Job, attempt int) (any, error) {
		if job.JobID == "big" {
			return strings.Repeat("r", 200), nil
		}
		return "ok", nil
	})
	defer q.mu.Unlock()
	if !q.failed["big"] || !strings.Contains(q.errs["big"], string(api.CodeBudgetExceeded)) || q.completed["small"] != `"ok"` {
		t.Fatalf("completed %v, failed %v with %q", q.completed, q.failed, q.errs["big"])
	}
}

// A lease answered with a server error (500 internal: a manager's bug, a
// 429) is not the end of a worker: Run backs off and leases again, and the
// jobs queued meanwhile are run. An answer that can never succeed (401, a
// 400 for its options) ends Run with that error.
func TestRunSurvivesALeaseServerError(t *testing.T) {
	q := newFakeQueue("a", "b")
	q.leaseErrs = []int{http.StatusInternalServerError, http.StatusInternalServerError, http.StatusTooManyRequests,
		http.StatusInternalServerError}
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, WorkerOptions{Concurrency: 2, LeaseFor: time.Minute, Wait: time.Second},
			func(ctx context.Context, job api.Job, attempt int) (any, error) { return "ok", nil })
	}()
	completed := func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 2
	}
	for !completed() {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v on a server error; want it to lease again", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A proxy's 429 on a lease asking to retry in years (a Retry-After no
// gate sends) delays Run's next lease by no more than a call waits to
// retry (maxRetryWait, or MaxBackoff when that is more); a shorter
// Retry-After is waited in full. Run slept the whole Retry-After, a worker
// leasing nothing for years.
func TestLeaseRetryWaitIsBoundedLikeACallsRetry(t *testing.T) {
	years := &Error{Status: http.StatusTooManyRequests, RetryAfter: 100 * 365 * 24 * time.Hour}
	for _, tc := range []struct {
		maxBackoff time.Duration
		err        *Error
		want       time.Duration
	}{
		{time.Second, years, maxRetryWait},
		{2 * maxRetryWait, years, 2 * maxRetryWait},
		{time.Second, &Error{Status: http.StatusTooManyRequests, RetryAfter: 90 * time.Second}, 90 * time.Second},
	} {
		c, err := New([]string{"http://127.0.0.1:1"}, Options{MaxBackoff: tc.maxBackoff})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.leaseRetryWait(1, tc.err); got != tc.want {
			t.Errorf("MaxBackoff %v, Retry-After %v: wait %v, want %v", tc.maxBackoff, tc.err.RetryAfter, got, tc.want)
		}
	}
}

// A lease call whose every attempt failed with no answer (a gate cut off
// from its leader for longer than the client's attempts) may have leased
// jobs: Run sends it again with its key and body, and gets them, replayed.
// Sent with a new key, its jobs stayed leased to no one until their leases
// expired (an attempt spent on each, the last one's job dead unrun).
func TestRunSendsALeaseLeftWithNoAnswerAgain(t *testing.T) {
	q := newFakeQueue("a")
	q.lostLeases = 10 // the client's MaxAttempts
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, WorkerOptions{Concurrency: 2, LeaseFor: time.Minute, Wait: time.Second},
			func(ctx context.Context, job api.Job, attempt int) (any, error) { return "ok", nil })
	}()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 1 || q.leaseN > 30
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.completed["a"] != `"ok"` {
		t.Fatalf("after %d lease calls completed %v: want a, leased by the call left with no answer", q.leaseN, q.completed)
	}
}

func TestRunStopsOnALeaseRefusedForGood(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   error
	}{
		{http.StatusUnauthorized, ErrUnauthorized},
		{http.StatusBadRequest, ErrInvalidRequest},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			q := newFakeQueue("a")
			q.leaseErrs = []int{tc.status}
			c := q.client(t)
			err := c.Run(context.Background(), WorkerOptions{LeaseFor: time.Minute, Wait: time.Second},
				func(ctx context.Context, job api.Job, attempt int) (any, error) { return "ok", nil })
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.leaseN != 1 || len(q.completed) != 0 {
				t.Fatalf("%d leases, %d completed: want Run to stop at the first refusal", q.leaseN, len(q.completed))
			}
		})
	}
}

// A result larger than the gate takes (413 body_too_large) can never be
// completed either: Run fails the attempt with a retry and says why. Left
// unreported, the job stayed running until its lease expired, ran again,
// and ended dead with no error saying why.
func TestRunFailsAResultTooLarge(t *testing.T) {
	q := newFakeQueue("small", "big")
	q.maxResult = 100
	runOneGoodOneBad(t, q, func(ctx context.Context, job api.Job, attempt int) (any, error) {
		if job.JobID == "big" {
			return strings.Repeat("r", 200), nil
		}
		return "ok", nil
	})
	defer q.mu.Unlock()
	if !q.failed["big"] || !strings.Contains(q.errs["big"], string(api.CodeBodyTooLarge)) || q.completed["small"] != `"ok"` {
		t.Fatalf("completed %v, failed %v with %q", q.completed, q.failed, q.errs["big"])
	}
}

// A result encoding/json refuses (a NaN) can never be completed: Run
// fails the attempt, with a retry and an error that says why, instead of
// leaving the job to its lease's expiry with nothing recorded.
func TestRunFailsAResultThatCannotBeEncoded(t *testing.T) {
	q := newFakeQueue("nan", "ok")
	runOneGoodOneBad(t, q, func(ctx context.Context, job api.Job, attempt int) (any, error) {
		if job.JobID == "nan" {
			return map[string]float64{"ratio": math.NaN()}, nil
		}
		return "ok", nil
	})
	defer q.mu.Unlock()
	if !q.failed["nan"] || !strings.Contains(q.errs["nan"], "NaN") || q.completed["ok"] != `"ok"` {
		t.Fatalf("completed %v, failed %v with %q", q.completed, q.failed, q.errs["nan"])
	}
}

// A handler still running when Run's context ends (it ignores its context,
// or takes its time to stop) keeps its lease: Run heartbeats it until the
// handler returns, then completes it. Without the heartbeats the lease
// would expire under a running handler, another worker could run the job
// meanwhile, and this one's completion would be refused (lease_lost).
func TestRunHeartbeatsAHandlerThatOutlivesItsContext(t *testing.T) {
	q := newFakeQueue("slow")
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	done := make(chan error, 1)
	var runErr error
	returned := false
	defer func() { // on a failure too: Run ends before the test does
		free()
		if !returned {
			<-done
		}
	}()
	go func() {
		done <- c.Run(ctx, WorkerOptions{LeaseFor: time.Second, Wait: time.Second},
			func(context.Context, api.Job, int) (any, error) {
				close(started)
				<-release // ignores its context
				return "ok", nil
			})
	}()
	<-started
	beats := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.beats["slow"]
	}
	cancel()
	atCancel := beats()
	waitFor(t, func() bool { return beats() >= atCancel+2 })
	free()
	runErr, returned = <-done, true
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.completed["slow"] != `"ok"` {
		t.Fatalf("completed %v: want the slow job completed with its result", q.completed)
	}
}

// A heartbeat sent to a gate that never answers gives way to the next one
// at the next tick (through the next gate), instead of holding the lease's
// heartbeats for the whole of its attempts while the lease runs out.
func TestRunHeartbeatsPastAGateThatHangs(t *testing.T) {
	q := newFakeQueue("j")
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client hang up
			<-r.Context().Done()               // never answers a heartbeat
			return
		}
		q.ServeHTTP(w, r)
	}))
	defer hung.Close()
	up := httptest.NewServer(q)
	defer up.Close()
	o := fastOpts()
	o.AttemptTimeout = time.Hour
	c, err := New([]string{hung.URL, up.URL}, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	beats := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.beats["j"]
	}
	enough := make(chan struct{})
	var enoughOnce sync.Once
	done := make(chan error, 1)
	returned := false
	defer func() { // on a failure too: Run ends before the test does
		cancel()
		enoughOnce.Do(func() { close(enough) })
		if !returned {
			<-done
		}
	}()
	go func() {
		done <- c.Run(ctx, WorkerOptions{LeaseFor: time.Second, Wait: time.Second},
			func(context.Context, api.Job, int) (any, error) {
				<-enough
				return "ok", nil
			})
	}()
	waitFor(t, func() bool { return beats() >= 2 })
	enoughOnce.Do(func() { close(enough) })
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.completed["j"] == `"ok"`
	})
	cancel()
	err, returned = <-done, true
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A replayed lease answer (the kept answer of a retried lease call, which the
// gate and the leader give for 10 minutes) may name leases that expired
// since and whose jobs another worker holds: Run heartbeats each such lease
// before running its job, and runs only those it still holds. Without it the
// job ran (and was completed by the fake) under a lease its heartbeat
// calls lost.
func TestRunDoesNotRunAReplayedLeaseNoLongerHeld(t *testing.T) {
	q := newFakeQueue("gone", "held")
	q.replay = true
	q.lose["gone"] = true // its lease expired and went to another worker
	c := q.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	ran := map[string]bool{}
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, WorkerOptions{Concurrency: 2, LeaseFor: time.Minute, Wait: time.Second},
			func(ctx context.Context, job api.Job, attempt int) (any, error) {
				mu.Lock()
				ran[job.JobID] = true
				mu.Unlock()
				return "ok", nil
			})
	}()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 1
	})
	cancel()
	if err := <-done; err != nil { // Run returns after every job it leased is done with
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if ran["gone"] || !ran["held"] {
		t.Fatalf("handlers ran for %v: want held only", ran)
	}
	if _, ok := q.completed["gone"]; ok || q.leases["gone"] == "" || q.failed["gone"] {
		t.Fatalf("the job whose replayed lease was lost was reported: completed %v failed %v", q.completed, q.failed)
	}
	if q.beats["held"] != 1 {
		t.Fatalf("the held job was heartbeated %d times before its handler: want 1", q.beats["held"])
	}
}

// startRun runs c.Run with opts and h until stop is called or the test
// ends: stop cancels its context and returns Run's error. At the test's end
// (a failure included), unblock (nil: none) runs first, so that handlers
// and reports the test holds can end, then stop.
func startRun(t *testing.T, c *Client, opts WorkerOptions, h Handler, unblock func()) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx, opts, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-ran })
		return err
	}
	t.Cleanup(func() {
		if unblock != nil {
			unblock()
		}
		_ = stop()
	})
	return stop
}

// A completion that finishes while another is being sent waits for it, and
// its lease is heartbeated meanwhile, as while its handler ran. The
// heartbeats used to stop when the handler returned: held behind a slow
// request for longer than its lease, the completion was refused
// (lease_lost) and the job ran again.
func TestRunHeartbeatsACompletionWaitingBehindAnother(t *testing.T) {
	q := newFakeQueue("a", "b")
	held, free := holdFirst("/v1/jobs/a/complete")
	o := fastOpts()
	o.AttemptTimeout = time.Minute // the held request is not given up on
	c := q.serve(t, o, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held.at(r)
			next.ServeHTTP(w, r)
		})
	})
	beats := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.beats["b"]
	}
	returned := make(chan int, 1) // b's heartbeats when its handler returned
	stop := startRun(t, c, WorkerOptions{Concurrency: 2, LeaseFor: time.Second, Wait: time.Second},
		func(ctx context.Context, job api.Job, attempt int) (any, error) {
			if job.JobID == "b" {
				<-held.done // a's completion is being sent
				returned <- beats()
			}
			return job.JobID, nil
		}, free)
	// b's completion waits behind a's, held at the gate, until b's lease
	// has been heartbeated twice since b's handler returned.
	atReturn := <-returned
	waitFor(t, func() bool { return beats() >= atReturn+2 })
	free()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.completed["b"] != `"b"` {
		t.Fatalf("completed %v", q.completed)
	}
}

// parkedCompletions counts the goroutines waiting in grouper.complete to
// hand their completion to the grouper: the next request takes them all.
func parkedCompletions() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, ".(*grouper).complete(") && (strings.Contains(header, "[chan send") || strings.Contains(header, "[select")) {
			n++
		}
	}
	return n
}

// A group's request that ran out of time (a gate that never answers it) is
// sent again as each job's own Complete, and each has a time of its own.
// They used to share the time their report was given before it waited for
// the group, which the group's request had spent: each ended at once,
// unsent, and its job ran again after its lease.
func TestRunRetriesATimedOutGroupWithTimeOfItsOwn(t *testing.T) {
	was := reportTimeout
	reportTimeout = 3 * time.Second // what the group's request hangs for
	t.Cleanup(func() { reportTimeout = was })
	q := newFakeQueue("a", "b", "c")
	held, free := holdFirst("/v1/jobs/a/complete")
	var groups atomic.Int32
	o := fastOpts()
	o.AttemptTimeout = time.Minute // the report's time ends the hung request, not an attempt's
	c := q.serve(t, o, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held.at(r)
			switch r.URL.Path {
			case "/v1/completions":
				groups.Add(1)
				_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client hang up
				<-r.Context().Done()               // never answers a group
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	stop := startRun(t, c, WorkerOptions{Concurrency: 3, LeaseFor: time.Minute, Wait: time.Second},
		func(ctx context.Context, job api.Job, attempt int) (any, error) {
			if job.JobID != "a" {
				<-held.done // a's completion is being sent
			}
			return job.JobID, nil
		}, free)
	// b's and c's completions wait behind a's, then go together.
	waitFor(t, func() bool { return parkedCompletions() == 2 })
	free()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 3
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := groups.Load(); n != 1 {
		t.Fatalf("%d group requests: want b and c sent together once", n)
	}
}

// A handler that panics fails its job's attempt, with a retry and an error
// that says so, and Run goes on with the other jobs. The panic used to end
// the worker's process, and with it every job it ran, each then run again
// after its lease; a job whose handler always panics brought down every
// worker that leased it.
func TestRunFailsTheAttemptOfAHandlerThatPanics(t *testing.T) {
	q := newFakeQueue("boom", "ok")
	runOneGoodOneBad(t, q, func(ctx context.Context, job api.Job, attempt int) (any, error) {
		if job.JobID == "boom" {
			panic("index out of range")
		}
		return "ok", nil
	})
	defer q.mu.Unlock()
	if !q.failed["boom"] || !strings.Contains(q.errs["boom"], "index out of range") || q.completed["ok"] != `"ok"` {
		t.Fatalf("completed %v, failed %v with %q", q.completed, q.failed, q.errs["boom"])
	}
}

// A lease answer that names a job twice, and so more leases than max_jobs
// (a gate's bug: the ledger leases a job once), runs each job once and
// never more handlers than Concurrency. Each lease used to run: the same
// job twice at once, more handlers than slots, and slots given back beyond
// Concurrency, which blocked their goroutines and Run's return.
func TestRunRunsAJobNamedTwiceInALeaseAnswerOnce(t *testing.T) {
	q := newFakeQueue("a", "b")
	q.dup = true
	c := q.client(t)
	var mu sync.Mutex
	runs := map[string]int{}
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	stop := startRun(t, c, WorkerOptions{Concurrency: 2, LeaseFor: time.Minute, Wait: time.Second},
		func(ctx context.Context, job api.Job, attempt int) (any, error) {
			mu.Lock()
			runs[job.JobID]++
			mu.Unlock()
			<-release
			return "ok", nil
		}, free)
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		return runs["a"] + runs["b"]
	}
	waitFor(t, func() bool { return started() >= 2 })
	free()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 1 || runs["b"] != 1 {
		t.Fatalf("handler runs %v: want each job run once", runs)
	}
}

// Run's context ending while a completion is being sent, and others wait
// behind it, abandons none: Run returns once each is sent (and the outcome
// of the handler that saw the context end), every job completed.
func TestRunStoppedWhileCompletionsAreSentSendsThem(t *testing.T) {
	q := newFakeQueue("a", "b", "c", "d")
	held, free := holdFirst("/v1/jobs/a/complete")
	o := fastOpts()
	o.AttemptTimeout = time.Minute // the held request is not given up on
	c := q.serve(t, o, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held.at(r)
			next.ServeHTTP(w, r)
		})
	})
	stopping := make(chan struct{}) // d's handler saw Run's context end
	stop := startRun(t, c, WorkerOptions{Concurrency: 4, LeaseFor: time.Minute, Wait: time.Second},
		func(ctx context.Context, job api.Job, attempt int) (any, error) {
			switch job.JobID {
			case "b", "c":
				<-held.done // a's completion is being sent
			case "d":
				<-ctx.Done()
				close(stopping)
			}
			return job.JobID, nil
		}, free)
	waitFor(t, func() bool { return parkedCompletions() == 2 })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	<-stopping // Run stops while a's completion is held and b's and c's wait
	free()
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.completed) != 4 {
		t.Fatalf("completed %v when Run returned: want a, b, c and d", q.completed)
	}
}

// A heartbeat answered lease_lost after the job's completion got there
// first (the heartbeats go on while the outcome is reported) is no loss:
// the job is completed and nothing says its lease was lost.
func TestRunTakesAHeartbeatRefusedAfterTheCompletionForNoLoss(t *testing.T) {
	q := newFakeQueue("j")
	hbHeld, completed, hbAnswered := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var hbOnce, completeOnce sync.Once
	unblock := func() {
		completeOnce.Do(func() { close(completed) })
	}
	o := fastOpts()
	o.AttemptTimeout = time.Minute // the held requests are not given up on
	c := q.serve(t, o, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/jobs/j/heartbeat":
				// The first heartbeat is answered once the completion is
				// recorded, and before the completion's answer is sent.
				first := false
				hbOnce.Do(func() { first = true })
				if first {
					close(hbHeld)
					<-completed
					next.ServeHTTP(w, r)
					close(hbAnswered)
					return
				}
			case "/v1/jobs/j/complete":
				next.ServeHTTP(w, r)
				unblock()
				<-hbAnswered
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	var logs testutil.Buffer
	stop := startRun(t, c, WorkerOptions{LeaseFor: time.Second, Wait: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(ctx context.Context, job api.Job, attempt int) (any, error) {
			<-hbHeld // a heartbeat is in flight when the handler returns
			return "ok", nil
		}, unblock)
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.completed["j"] == `"ok"`
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(logs.String(), "lease lost") {
		t.Fatalf("a heartbeat refused after the completion was logged as a loss:\n%s", logs.String())
	}
}

// A Concurrency above the most jobs a lease call may ask for
// (api.MaxLeaseJobs) leases that many at a time. Asked for as many jobs as
// free slots, the gate refused the call (400: max_jobs out of bounds) and
// Run returned that error at once.
func TestRunWithMoreSlotsThanALeaseMayAskFor(t *testing.T) {
	q := newFakeQueue("a", "b")
	c := q.client(t)
	stop := startRun(t, c, WorkerOptions{Concurrency: api.MaxLeaseJobs + 1, LeaseFor: time.Minute, Wait: time.Second},
		func(ctx context.Context, job api.Job, attempt int) (any, error) { return "ok", nil }, nil)
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.completed) == 2 || q.maxJobs > api.MaxLeaseJobs
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.completed) != 2 || q.maxJobs > api.MaxLeaseJobs {
		t.Fatalf("max_jobs %d, completed %v: want at most %d asked, and a and b completed", q.maxJobs, q.completed, api.MaxLeaseJobs)
	}
}

// hold holds the first request to its path, in a fakeQueue.serve wrap
// (at), until free is called; done is closed when that request arrived.
type hold struct {
	path          string
	done, release chan struct{}
	held, freed   sync.Once
}

// holdFirst returns a hold of the first request to path, and its free.
func holdFirst(path string) (*hold, func()) {
	h := &hold{path: path, done: make(chan struct{}), release: make(chan struct{})}
	return h, func() { h.freed.Do(func() { close(h.release) }) }
}

// at holds r if it is the first request to h's path.
func (h *hold) at(r *http.Request) {
	if r.URL.Path == h.path {
		h.held.Do(func() { close(h.done); <-h.release })
	}
}
