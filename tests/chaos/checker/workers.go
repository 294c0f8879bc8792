package checker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// Runs counts handler runs by job ID: what the run's workers did.
type Runs struct {
	mu sync.Mutex
	n  map[string]int
	// attempts counts the runs of each (job, attempt) recorded by
	// AddAttempt.
	attempts map[string]map[int]int
	// completed holds, per job, the attempts whose completion a gate
	// answered recorded (AddCompleted).
	completed map[string]map[int]bool
}

// Add records one handler run of job id.
func (r *Runs) Add(id string) { r.AddAttempt(id, 0) }

// AddAttempt records one handler run of job id for its lease's attempt
// (the attempt a pkg/client Handler is given; 0: unknown). Rule (i) then
// also reports an attempt run twice.
func (r *Runs) AddAttempt(id string, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[id]++
	if attempt > 0 {
		if r.attempts == nil {
			r.attempts = map[string]map[int]int{}
		}
		if r.attempts[id] == nil {
			r.attempts[id] = map[int]int{}
		}
		r.attempts[id][attempt]++
	}
}

// AddCompleted records that a gate answered the completion of job id by
// its lease's attempt as recorded: 200 to POST /v1/jobs/{id}/complete, or
// the item's job in the answer to POST /v1/completions. Rule (l) then
// holds those answers to the job's end.
func (r *Runs) AddCompleted(id string, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.completed == nil {
		r.completed = map[string]map[int]bool{}
	}
	if r.completed[id] == nil {
		r.completed[id] = map[int]bool{}
	}
	r.completed[id][attempt] = true
}

// Completed returns the attempts of job id recorded by AddCompleted,
// sorted.
func (r *Runs) Completed(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for a := range r.completed[id] {
		out = append(out, a)
	}
	sort.Ints(out)
	return out
}

// twice returns the attempts of job id recorded by AddAttempt more than
// once, sorted.
func (r *Runs) twice(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for a, n := range r.attempts[id] {
		if n > 1 {
			out = append(out, a)
		}
	}
	sort.Ints(out)
	return out
}

// Of returns the runs of job id.
func (r *Runs) Of(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// WorkerCounts sums up what rule (i) saw.
type WorkerCounts struct {
	Jobs int `json:"jobs"`
	Runs int `json:"runs"`
	// Redeliveries are handler runs beyond one per job: at-least-once
	// delivery at work (a lease lost to a fault, a report that did not
	// arrive).
	Redeliveries int `json:"redeliveries"`
}

// CheckWorkers checks rule (i), every job run to an end once: after the
// workload, with the cluster healed and the workers still running, every
// job of every tenant of cfg must reach succeeded (the handlers never fail)
// within wait; a job still queued or running then, or failed or dead, is a
// violation (lost to the workers), and so is a succeeded job that no
// handler of runs ran (completed by no one), and a job whose handler runs
// outnumber its attempts (the leases it was handed out: each run is one
// lease, so an attempt ran twice), or that ran one attempt twice (with
// Runs.AddAttempt). The redeliveries (runs above one per job) are counted,
// not judged: delivery is at least once. It also checks rule (l), each job
// ended by its current lease, from the completions Runs.AddCompleted
// recorded and the attempt a result names.
func CheckWorkers(ctx context.Context, cfg Config, runs *Runs, wait time.Duration) (Result, WorkerCounts, error) {
	var res Result
	var wc WorkerCounts
	tenants := make([]string, 0, len(cfg.Tokens))
	for t := range cfg.Tokens {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	deadline := time.Now().Add(wait)
	for _, tenant := range tenants {
		c, err := client.New([]string{cfg.GateURL}, client.Options{Token: cfg.Tokens[tenant], MaxAttempts: 20, MaxBackoff: time.Second})
		if err != nil {
			return res, wc, err
		}
		list := func(opts client.ListOptions) ([]api.Job, error) {
			var jobs []api.Job
			for j, err := range c.ListJobs(ctx, opts) {
				if err != nil {
					return nil, err
				}
				jobs = append(jobs, j)
			}
			return jobs, nil
		}
		for {
			queued, err := list(client.ListOptions{State: api.JobStatusQueued, Limit: 1000})
			if err != nil {
				return res, wc, err
			}
			running, err := list(client.ListOptions{State: api.JobStatusRunning, Limit: 1000})
			if err != nil {
				return res, wc, err
			}
			if len(queued)+len(running) == 0 || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return res, wc, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
		jobs, err := list(client.ListOptions{Limit: 1000})
		if err != nil {
			return res, wc, err
		}
		for _, j := range jobs {
			wc.Jobs++
			n := runs.Of(j.JobID)
			wc.Runs += n
			var detail string
			switch {
			case j.State != api.JobStatusSucceeded:
				detail = fmt.Sprintf("job %s is %s after the workers ran %v past the workload (attempts %d, error %q): not run to an end", j.JobID, j.State, wait, j.Attempts, j.Error)
			case n == 0:
				detail = fmt.Sprintf("job %s succeeded without a handler run", j.JobID)
			case len(runs.twice(j.JobID)) > 0:
				detail = fmt.Sprintf("job %s ran attempt %v more than once (%d runs in %d attempts)", j.JobID, runs.twice(j.JobID), n, j.Attempts)
			case n > j.Attempts:
				// Every handler run is one lease, and every lease one
				// attempt: more runs than attempts is one attempt run twice.
				detail = fmt.Sprintf("job %s ran %d times in %d attempts: an attempt was run twice", j.JobID, n, j.Attempts)
			}
			if detail != "" {
				res.Violations = append(res.Violations, Violation{Rule: RuleRunOnce, Tenant: tenant, Key: j.IdempotencyKey, JobIDs: []string{j.JobID}, Detail: detail})
			}
			if detail := endedByOtherLease(j, runs.Completed(j.JobID)); detail != "" {
				res.Violations = append(res.Violations, Violation{Rule: RuleCurrentLease, Tenant: tenant, Key: j.IdempotencyKey, JobIDs: []string{j.JobID}, Detail: detail})
			}
		}
	}
	wc.Redeliveries = wc.Runs - wc.Jobs
	return res, wc, nil
}

// endedByOtherLease is rule (l) for job j, read after the workers ran it,
// and completed, the attempts whose completion a gate answered recorded.
// Only the current lease completes a job, once: its last attempt (a job
// that succeeded is never leased again, and a stale lease's report is
// refused with lease_lost). So a completion recorded for another attempt,
// for two attempts, or for a job that did not succeed, is a report of a
// lost lease recorded; and so is a result naming an attempt (the chaos
// workers return {"attempt": n}) other than the last. A job still queued
// or running (rule (i)'s) is left out: a completion may have been answered
// after it was read. It returns what it found, or "".
func endedByOtherLease(j api.Job, completed []int) string {
	if j.State == api.JobStatusQueued || j.State == api.JobStatusRunning {
		return ""
	}
	var problems []string
	if len(completed) > 1 {
		problems = append(problems, fmt.Sprintf("the completions of attempts %v were each answered recorded", completed))
	}
	for _, a := range completed {
		if a != j.Attempts {
			problems = append(problems, fmt.Sprintf("attempt %d's completion was answered recorded, but the job's last lease is attempt %d", a, j.Attempts))
		}
	}
	if len(completed) > 0 && j.State != api.JobStatusSucceeded {
		problems = append(problems, fmt.Sprintf("a completion was answered recorded, but the job is %s", j.State))
	}
	var result struct {
		Attempt int `json:"attempt"`
	}
	if j.State == api.JobStatusSucceeded && json.Unmarshal(j.Result, &result) == nil && result.Attempt > 0 && result.Attempt != j.Attempts {
		problems = append(problems, fmt.Sprintf("its result is attempt %d's, but its last lease is attempt %d", result.Attempt, j.Attempts))
	}
	if len(problems) == 0 {
		return ""
	}
	return fmt.Sprintf("job %s (%s, attempts %d) was not ended by its current lease: %s", j.JobID, j.State, j.Attempts, strings.Join(problems, "; "))
}
