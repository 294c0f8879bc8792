package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	total := workerJobs(t, 400)
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
	// Two jobs of a type no worker runs, for a lease the leader's death cuts
	// off (below).
	const heldType = "held-e2e"
	for i := range 2 {
		if _, err := cl.Submit(ctx, api.JobRequest{Type: heldType, Payload: json.RawMessage(fmt.Sprintf(`{"held":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}

	// A worker that leases and dies: its jobs come back when the leases end.
	// Before dying it retries its lease with the same Idempotency-Key
	// through the other gate, and is given the same jobs (the leader keeps
	// the answer), not six more.
	leaseBody := fmt.Sprintf(`{"types":[%q],"max_jobs":%d,"lease_seconds":2}`, jobType, abandoned)
	first, err := postPath(ctx, http.DefaultClient, c.GateURLs()[0], "/v1/leases", "e2e-dying-worker-lease-1", leaseBody)
	if err != nil || first.status != http.StatusOK {
		t.Fatalf("the dying worker's lease: %d %s %v", first.status, first.body, err)
	}
	retried, err := postPath(ctx, http.DefaultClient, c.GateURLs()[1], "/v1/leases", "e2e-dying-worker-lease-1", leaseBody)
	if err != nil || retried.status != http.StatusOK || retried.replayed != "true" || !bytes.Equal(retried.body, first.body) {
		t.Fatalf("the lease retried through another gate: %d replayed=%q %s (first %s) %v",
			retried.status, retried.replayed, retried.body, first.body, err)
	}
	var dying api.LeaseList
	if err := json.Unmarshal(first.body, &dying); err != nil || len(dying.Leases) != abandoned {
		t.Fatalf("the dying worker's lease: %s %v", first.body, err)
	}
	dead := dying.Leases

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
	// A lease whose answer is lost with its leader (kill -9 right after):
	// its retry, with the same key through the other gate, at the next
	// leader, is given the same jobs under the same leases, from the ledger.
	heldBody := fmt.Sprintf(`{"types":[%q],"max_jobs":2,"lease_seconds":60}`, heldType)
	heldFirst, err := postPath(ctx, http.DefaultClient, c.GateURLs()[0], "/v1/leases", "e2e-lease-across-leaders", heldBody)
	var held api.LeaseList
	if err != nil || heldFirst.status != http.StatusOK || json.Unmarshal(heldFirst.body, &held) != nil || len(held.Leases) != 2 {
		t.Fatalf("the lease before the kill: %d %s %v", heldFirst.status, heldFirst.body, err)
	}
	// On a loaded machine an election may be under way: the leader to kill is
	// the one every manager agrees on once it is over.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	var heldRetry answer
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		heldRetry, err = postPath(ctx, http.DefaultClient, c.GateURLs()[1], "/v1/leases", "e2e-lease-across-leaders", heldBody)
		return err == nil && heldRetry.status == http.StatusOK, fmt.Sprintf("the lease retried after the kill: %d %s %v", heldRetry.status, heldRetry.body, err)
	})
	var again api.LeaseList
	if err := json.Unmarshal(heldRetry.body, &again); err != nil || heldRetry.replayed != "true" || len(again.Leases) != 2 {
		t.Fatalf("the lease retried at the next leader: replayed=%q %s %v; want the first attempt's two leases", heldRetry.replayed, heldRetry.body, err)
	}
	for i, l := range again.Leases {
		if l.LeaseID != held.Leases[i].LeaseID || l.Job.JobID != held.Leases[i].Job.JobID {
			t.Fatalf("lease %d retried at the next leader: %s on %s, first %s on %s", i, l.LeaseID, l.Job.JobID, held.Leases[i].LeaseID, held.Leases[i].Job.JobID)
		}
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

// TestWorkerProcessesSurviveKill9: `oncectl job work` processes run a shell
// command per job, which appends "<job id> <attempt>" to a file; one worker
// process is killed with SIGKILL while it holds jobs, and then the manager
// leader; a replacement worker starts. Every job ends succeeded once in the
// ledger with its command's result; the killed worker's jobs were run again
// by the others; the runs above one per job are reported.
func TestWorkerProcessesSurviveKill9(t *testing.T) {
	c := startCluster(t, 3, 2, nil)
	ctx := ctxFor(t, 10*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bin, err := oncectlBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runsFile := filepath.Join(dir, "runs")
	ks, err := client.OpenKeys(filepath.Join(dir, "keys.json"), client.KeysOptions{ClientID: "e2e.work"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.GateURLs(), client.Options{Keys: ks, MaxAttempts: 60, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	total := workerJobs(t, 600)
	for i := range total {
		if _, err := cl.Submit(ctx, api.JobRequest{Type: "shell", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	// Slow enough that a worker holds jobs when it is killed.
	script := `echo "$ONCE_JOB_ID $ONCE_JOB_ATTEMPT" >> ` + runsFile + `; sleep 0.05; echo "{\"id\":\"$ONCE_JOB_ID\"}"`
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "--gates", strings.Join(c.GateURLs(), ","), "job", "work", "--types", "shell",
			"--concurrency", "4", "--lease", "2s", "--worker", name, "--", "sh", "-c", script)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		})
		return cmd
	}
	victim := start("w1")
	start("w2")
	start("w3")
	count := func(state string) int {
		n := 0
		for _, err := range cl.ListJobs(ctx, client.ListOptions{State: state, Limit: 1000}) { // a count: pages of 1000
			if err != nil {
				return -1
			}
			n++
		}
		return n
	}
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		n := count(api.JobStatusSucceeded)
		return n >= total/3, fmt.Sprintf("a third of the jobs to succeed (%d)", n)
	})
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// On a loaded machine an election may be under way: the leader to kill is
	// the one every manager agrees on once it is over.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	start("w4")
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		n := count(api.JobStatusSucceeded)
		return n == total, fmt.Sprintf("every job to succeed (%d of %d)", n, total)
	})

	seen := 0
	for j, err := range cl.ListJobs(ctx, client.ListOptions{Type: "shell", Limit: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if j.State != api.JobStatusSucceeded || string(j.Result) != fmt.Sprintf(`{"id":%q}`, j.JobID) {
			t.Fatalf("job %s: state %s, result %s", j.JobID, j.State, j.Result)
		}
	}
	if seen != total {
		t.Fatalf("%d jobs listed, want %d", seen, total)
	}
	b, err := os.ReadFile(runsFile)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, _, _ := strings.Cut(line, " ")
		runs[id]++
	}
	if len(runs) != total {
		t.Fatalf("commands ran for %d jobs, want %d", len(runs), total)
	}
	t.Logf("%d jobs succeeded once in the ledger; %d command runs, %d above one per job (the SIGKILLed worker's jobs, run again)",
		total, strings.Count(string(b), "\n"), strings.Count(string(b), "\n")-total)
}

// workerJobs is how many jobs a worker test runs: def, or ONCE_WORKERS_JOBS
// for a bigger run (ONCE_WORKERS_JOBS=10000).
func workerJobs(t *testing.T, def int) int {
	s := os.Getenv("ONCE_WORKERS_JOBS")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 {
		t.Fatalf("ONCE_WORKERS_JOBS=%q: want a number ≥ 100", s)
	}
	return n
}
