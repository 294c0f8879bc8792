package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// realGate is a gate in front of a real in-process manager leader, served
// through wrap (nil: as is).
func realGate(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	m := managertest.Start(t, managertest.Options{})
	cfg := gate.DefaultConfig()
	cfg.NodeName = "test-gate"
	cfg.Managers = m.Addrs
	cfg.ForwardTimeout = 5 * time.Second
	g, err := gate.New(cfg, gate.Deps{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	var h http.Handler = g.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return srv.URL
}

// submitJobs admits n jobs of type typ through the gate.
func submitJobs(t *testing.T, url, typ string, n int) {
	t.Helper()
	for i := range n {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/jobs", strings.NewReader(`{"type":"`+typ+`"}`))
		req.Header.Set(api.HeaderIdempotencyKey, fmt.Sprintf("host1.dc1:12345:%d:0123456789abcdef", i+1))
		req.Header.Set("Content-Type", api.ContentTypeJSON)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit %d: HTTP %d", i, resp.StatusCode)
		}
	}
}

// CompleteMany against a real gate: the good items complete, a lost lease
// and an unknown job are their own items' errors, and the same call again
// answers the same jobs.
func TestCompleteManyThroughARealGate(t *testing.T) {
	url := realGate(t, nil)
	submitJobs(t, url, "x", 3)
	c, err := New([]string{url}, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases, err := c.Lease(ctx, LeaseOptions{MaxJobs: 3})
	if err != nil || len(leases) != 3 {
		t.Fatalf("leases %+v: %v", leases, err)
	}
	items := []Completion{
		{JobID: leases[0].Job.JobID, LeaseID: leases[0].LeaseID, Result: map[string]int{"n": 0}},
		{JobID: leases[1].Job.JobID, LeaseID: "not-the-lease", Result: 1},
		{JobID: "no-such-job", LeaseID: "l"},
		{JobID: leases[2].Job.JobID, LeaseID: leases[2].LeaseID, Result: "two"},
	}
	res, err := c.CompleteMany(ctx, items)
	if err != nil || len(res) != len(items) {
		t.Fatalf("CompleteMany: %+v, %v", res, err)
	}
	check := func(res []CompletionResult) {
		t.Helper()
		if r := res[0]; r.Err != nil || r.Job.JobID != leases[0].Job.JobID || r.Job.State != api.JobStatusSucceeded || string(r.Job.Result) != `{"n":0}` {
			t.Fatalf("item 0: %+v", r)
		}
		if r := res[1]; r.Job != nil || !errors.Is(r.Err, ErrLeaseLost) {
			t.Fatalf("item 1 (a lost lease): %+v", r)
		}
		if r := res[2]; r.Job != nil || !errors.Is(r.Err, ErrJobNotFound) {
			t.Fatalf("item 2 (an unknown job): %+v", r)
		}
		if r := res[3]; r.Err != nil || r.Job.State != api.JobStatusSucceeded || string(r.Job.Result) != `"two"` {
			t.Fatalf("item 3: %+v", r)
		}
	}
	check(res)
	again, err := c.CompleteMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	check(again)
	if j, err := c.GetJob(ctx, leases[1].Job.JobID); err != nil || j.State != api.JobStatusRunning {
		t.Fatalf("the lost lease's job: %+v, %v", j, err)
	}
	if _, err := c.CompleteMany(ctx, nil); err == nil {
		t.Fatal("CompleteMany of nothing: no error")
	}
}

// completionCounter counts the gate's completion requests and their items.
type completionCounter struct {
	mu       sync.Mutex
	requests int // POST /v1/completions and POST /v1/jobs/{id}/complete
	batched  int // of them, POST /v1/completions
}

// Run groups the completions of jobs that finish together: the first is
// sent at once, held at the gate until every handler has returned, and
// those that finished meanwhile go in the next request; every job is
// completed once, in fewer HTTP requests than jobs.
func TestRunGroupsCompletionsThroughARealGate(t *testing.T) {
	const jobs = 16
	var cnt completionCounter
	returned := make(chan struct{})
	var hold sync.Once
	url := realGate(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && (r.URL.Path == "/v1/completions" || strings.HasSuffix(r.URL.Path, "/complete")) {
				cnt.mu.Lock()
				cnt.requests++
				if r.URL.Path == "/v1/completions" {
					cnt.batched++
				}
				cnt.mu.Unlock()
				hold.Do(func() { <-returned })
			}
			next.ServeHTTP(w, r)
		})
	})
	submitJobs(t, url, "x", jobs)
	c, err := New([]string{url}, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	var started, finished sync.WaitGroup
	started.Add(jobs)
	finished.Add(jobs)
	go func() { finished.Wait(); close(returned) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, WorkerOptions{Concurrency: jobs, LeaseFor: time.Minute, Wait: time.Second},
			func(ctx context.Context, job api.Job, attempt int) (any, error) {
				defer finished.Done()
				started.Done()
				started.Wait() // every job runs at once, and finishes together
				return job.JobID, nil
			})
	}()
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		page, err := c.ListPage(context.Background(), ListOptions{State: api.JobStatusSucceeded, Limit: 100}, "")
		if err != nil {
			return false, err.Error()
		}
		return len(page.Jobs) == jobs, fmt.Sprintf("%d jobs succeeded", len(page.Jobs))
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	cnt.mu.Lock()
	defer cnt.mu.Unlock()
	if cnt.requests >= jobs || cnt.batched == 0 {
		t.Fatalf("%d completion requests (%d batches) for %d jobs: not grouped", cnt.requests, cnt.batched, jobs)
	}
	t.Logf("%d jobs completed in %d requests (%d batches)", jobs, cnt.requests, cnt.batched)
	page, err := c.ListPage(context.Background(), ListOptions{State: api.JobStatusSucceeded, Limit: 100}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page.Jobs {
		if j.Attempts != 1 || string(j.Result) != `"`+j.JobID+`"` {
			t.Fatalf("job %+v: not completed once with its result", j)
		}
	}
}

// Fail with a message over api.MaxJobErrorBytes whose cut falls inside a
// multi-byte character: the client cuts it at a character boundary, so
// the gate takes it (a byte cut travels as U+FFFD, 3 bytes a byte, and
// went over the bound: 400 invalid_request, the failure unrecorded).
func TestFailCutsALongMessageAtACharacter(t *testing.T) {
	c, lease := leaseOneJob(t)
	ctx := context.Background()
	msg := "x" + strings.Repeat("é", api.MaxJobErrorBytes) // byte MaxJobErrorBytes is inside an "é"
	job, err := c.Fail(ctx, lease.Job.JobID, lease.LeaseID, msg, false)
	if err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if len(job.Error) > api.MaxJobErrorBytes || !strings.HasPrefix(msg, job.Error) {
		t.Fatalf("the job's error (%d bytes) is not a prefix of the message within the bound", len(job.Error))
	}
}

// Fail with a message holding invalid UTF-8 (a handler's error quoting a
// program's raw output): within the bound as bytes, but each invalid byte
// travels as U+FFFD (3 bytes) and went over it (400 invalid_request, the
// failure unrecorded). The client replaces each run of invalid bytes with
// one U+FFFD, so the gate takes it.
func TestFailTakesAMessageOfInvalidUTF8(t *testing.T) {
	c, lease := leaseOneJob(t)
	ctx := context.Background()
	msg := "tool said: " + strings.Repeat("\xff", 2000) + " (exit 1)" // 2020 bytes, 6020 as JSON decodes it
	job, err := c.Fail(ctx, lease.Job.JobID, lease.LeaseID, msg, false)
	if err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if want := "tool said: \uFFFD (exit 1)"; job.Error != want {
		t.Fatalf("the job's error is %q, want %q", job.Error, want)
	}
}

// leaseOneJob submits one job of type x to a real gate and leases it with a
// client of that gate.
func leaseOneJob(t *testing.T) (*Client, api.Lease) {
	t.Helper()
	url := realGate(t, nil)
	submitJobs(t, url, "x", 1)
	c, err := New([]string{url}, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	leases, err := c.Lease(context.Background(), LeaseOptions{})
	if err != nil || len(leases) != 1 {
		t.Fatalf("leases %+v: %v", leases, err)
	}
	return c, leases[0]
}
