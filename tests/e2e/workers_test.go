package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/localcluster"
)

// TestWorkersThroughKills: real processes. Jobs are submitted; a worker
// leases some and dies without a word (its leases are never heartbeated);
// three pkg/client workers run the rest while the manager leader is killed
// with SIGKILL. Every job ends succeeded exactly once in the ledger, with
// the result its handler returned; the abandoned ones were redelivered
// (attempt 2 or more); handler runs above the job count are reported.
func TestWorkersThroughKills(t *testing.T) {
	c := startCluster(t, 3, 2, nil)
	ctx := ctxFor(t, 10*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := client.OpenKeys(filepath.Join(t.TempDir(), "keys.json"), client.KeysOptions{ClientID: "e2e.workers"})
	if err != nil {
		t.Fatal(err)
	}
	opts := client.Options{Keys: ks, MaxAttempts: 60, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second}
	cl, err := client.New(c.GateURLs(), opts)
	if err != nil {
		t.Fatal(err)
	}
	total := 400
	if s := os.Getenv("ONCE_WORKERS_JOBS"); s != "" { // a bigger run: ONCE_WORKERS_JOBS=10000
		if total, err = strconv.Atoi(s); err != nil || total < 100 {
			t.Fatalf("ONCE_WORKERS_JOBS=%q: want a number ≥ 100", s)
		}
	}
	const abandoned = 6
	jobType := "work-e2e"
	ids := map[string]bool{}
	var idsMu sync.Mutex
	var subs sync.WaitGroup
	for p := range 8 {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for i := p; i < total; i += 8 {
				res, err := cl.Submit(ctx, api.JobRequest{Type: jobType, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
				if err != nil {
					t.Errorf("submit %d: %v", i, err)
					return
				}
				idsMu.Lock()
				ids[res.Job.JobID] = true
				idsMu.Unlock()
			}
		}()
	}
	subs.Wait()
	if t.Failed() || len(ids) != total {
		t.Fatalf("%d job ids for %d submissions", len(ids), total)
	}

	// A worker that leases and dies: its jobs come back when the leases end.
	dead, err := cl.Lease(ctx, client.LeaseOptions{Types: []string{jobType}, MaxJobs: abandoned, LeaseFor: 2 * time.Second})
	if err != nil || len(dead) != abandoned {
		t.Fatalf("the dying worker's lease: %d jobs, %v", len(dead), err)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	attempts := map[string]int{}
	handler := func(ctx context.Context, job api.Job, attempt int) (any, error) {
		mu.Lock()
		runs[job.JobID]++
		attempts[job.JobID] = max(attempts[job.JobID], attempt)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		return map[string]string{"done": job.JobID}, nil
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc, err := client.New(c.GateURLs(), opts)
			if err != nil {
				t.Error(err)
				return
			}
			if err := wc.Run(wctx, client.WorkerOptions{Types: []string{jobType}, Concurrency: 4, LeaseFor: 3 * time.Second,
				Wait: 2 * time.Second, Worker: fmt.Sprintf("w%d", w)}, handler); err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
		}()
	}
	succeeded := func() int {
		n := 0
		for _, err := range cl.ListJobs(ctx, client.ListOptions{State: api.JobStatusSucceeded, Limit: 1000}) {
			if err != nil {
				return -1
			}
			n++
		}
		return n
	}
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		n := succeeded()
		return n >= total/3, fmt.Sprintf("a third of the jobs to succeed (%d)", n)
	})
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		n := succeeded()
		return n == total, fmt.Sprintf("every job to succeed (%d of %d)", n, total)
	})
	stop()
	wg.Wait()

	for j, err := range cl.ListJobs(ctx, client.ListOptions{Type: jobType, Limit: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		if !ids[j.JobID] {
			t.Fatalf("listed job %s was never submitted", j.JobID)
		}
		delete(ids, j.JobID)
		if j.State != api.JobStatusSucceeded || string(j.Result) != fmt.Sprintf(`{"done":%q}`, j.JobID) {
			t.Fatalf("job %s: state %s, result %s", j.JobID, j.State, j.Result)
		}
	}
	if len(ids) != 0 {
		t.Fatalf("%d submitted jobs not listed", len(ids))
	}
	for _, l := range dead {
		if attempts[l.Job.JobID] < 2 {
			t.Fatalf("abandoned job %s was run at attempt %d, want a redelivery (≥ 2)", l.Job.JobID, attempts[l.Job.JobID])
		}
	}
	handlerRuns := 0
	for _, n := range runs {
		handlerRuns += n
	}
	t.Logf("%d jobs succeeded exactly once in the ledger; %d handler runs + %d deliveries to the worker that died = %d deliveries, %d above one per job",
		total, handlerRuns, abandoned, handlerRuns+abandoned, handlerRuns+abandoned-total)
}

// TestWorkersKeepCapacityFree: with MANAGER_MAX_QUEUED_JOBS=100, a producer
// and a worker keep going well past 100 jobs without a 429: capacity counts
// unfinished jobs only, and finished ones stay readable.
func TestWorkersKeepCapacityFree(t *testing.T) {
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_MAX_QUEUED_JOBS=100")
	})
	ctx := ctxFor(t, 3*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := client.OpenKeys(filepath.Join(t.TempDir(), "keys.json"), client.KeysOptions{ClientID: "e2e.capacity"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.GateURLs(), client.Options{Keys: ks, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cl.Run(wctx, client.WorkerOptions{Concurrency: 4, Wait: time.Second},
			func(context.Context, api.Job, int) (any, error) { return nil, nil })
	}()
	const total = 300
	var last string
	for i := range total {
		res, err := cl.Submit(ctx, api.JobRequest{Type: "capacity", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		if err != nil {
			t.Fatalf("job %d of %d with a worker consuming (capacity 100): %v", i, total, err)
		}
		last = res.Job.JobID
	}
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		j, err := cl.GetJob(ctx, last)
		return err == nil && j.State == api.JobStatusSucceeded, fmt.Sprintf("the last job to succeed (%+v, %v)", j, err)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range cl.ListJobs(ctx, client.ListOptions{State: api.JobStatusSucceeded, Limit: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != total {
		t.Fatalf("%d succeeded jobs readable, want %d", n, total)
	}
}
