package checker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// Rule (i) catches a job left unfinished, a job completed by no handler
// run and a job run more often than it was leased, and counts the
// redeliveries of the others.
func TestRuleRunOnce(t *testing.T) {
	jobs := []api.Job{
		{JobID: "ran-once", IdempotencyKey: "k1", State: api.JobStatusSucceeded, Attempts: 1},
		// Redelivered: a lease expired and a second attempt ran it.
		{JobID: "ran-twice", IdempotencyKey: "k2", State: api.JobStatusSucceeded, Attempts: 2},
		{JobID: "nobody-ran", IdempotencyKey: "k3", State: api.JobStatusSucceeded, Attempts: 1},
		{JobID: "dead", IdempotencyKey: "k4", State: api.JobStatusDead, Attempts: 10, Error: "lease expired"},
		// Leased once, run twice: one attempt ran twice.
		{JobID: "one-lease-two-runs", IdempotencyKey: "k5", State: api.JobStatusSucceeded, Attempts: 1},
		// Leased three times (a lease lost before its holder heard of it),
		// its second attempt run twice.
		{JobID: "attempt-twice", IdempotencyKey: "k6", State: api.JobStatusSucceeded, Attempts: 3},
		// Two attempts, each run once.
		{JobID: "attempts-once", IdempotencyKey: "k7", State: api.JobStatusSucceeded, Attempts: 2},
	}
	srv := serveJobs(t, jobs)
	var runs Runs
	runs.Add("ran-once")
	runs.Add("ran-twice")
	runs.Add("ran-twice")
	runs.Add("dead")
	runs.Add("one-lease-two-runs")
	runs.Add("one-lease-two-runs")
	runs.AddAttempt("attempt-twice", 2)
	runs.AddAttempt("attempt-twice", 2)
	runs.AddAttempt("attempts-once", 1)
	runs.AddAttempt("attempts-once", 2)
	res, wc, err := CheckWorkers(context.Background(), Config{GateURL: srv.URL, Tokens: map[string]string{"acme": "t"}}, &runs, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 4 || res.Violations[0].JobIDs[0] != "nobody-ran" || res.Violations[1].JobIDs[0] != "dead" ||
		res.Violations[2].JobIDs[0] != "one-lease-two-runs" || res.Violations[3].JobIDs[0] != "attempt-twice" {
		t.Fatalf("violations %+v", res.Violations)
	}
	for _, v := range res.Violations {
		if v.Rule != RuleRunOnce || v.Tenant != "acme" {
			t.Fatalf("violation %+v", v)
		}
	}
	if wc.Jobs != 7 || wc.Runs != 10 || wc.Redeliveries != 3 {
		t.Fatalf("counts %+v", wc)
	}
}

// Rule (l) catches a completion answered recorded for a lease that was no
// longer the job's, two attempts both answered as the job's end, a
// completion answered for a job that did not succeed, and a result of an
// attempt other than the last; a job completed by its last attempt passes.
func TestRuleCurrentLease(t *testing.T) {
	result := func(attempt string) json.RawMessage { return json.RawMessage(`{"ok":true,"attempt":` + attempt + `}`) }
	jobs := []api.Job{
		// Leased twice (the first lease expired), completed by the second.
		{JobID: "current", IdempotencyKey: "k1", State: api.JobStatusSucceeded, Attempts: 2, Result: result("2")},
		// A worker whose result names no attempt.
		{JobID: "no-attempt", IdempotencyKey: "k2", State: api.JobStatusSucceeded, Attempts: 1, Result: json.RawMessage(`{"ok":true}`)},
		// The first lease's completion was answered recorded after the
		// second lease was handed out.
		{JobID: "stale-completion", IdempotencyKey: "k3", State: api.JobStatusSucceeded, Attempts: 2, Result: result("2")},
		// Both leases were told they completed the job.
		{JobID: "two-ends", IdempotencyKey: "k4", State: api.JobStatusSucceeded, Attempts: 2, Result: result("2")},
		// The job holds the result of a lease it lost.
		{JobID: "stale-result", IdempotencyKey: "k5", State: api.JobStatusSucceeded, Attempts: 3, Result: result("2")},
		// A completion answered recorded, yet the job failed.
		{JobID: "completed-failed", IdempotencyKey: "k6", State: api.JobStatusFailed, Attempts: 1, Error: "boom"},
	}
	srv := serveJobs(t, jobs)
	var runs Runs
	for _, j := range jobs {
		for a := 1; a <= min(j.Attempts, 2); a++ {
			runs.AddAttempt(j.JobID, a)
		}
	}
	runs.AddCompleted("current", 2)
	runs.AddCompleted("stale-completion", 1)
	runs.AddCompleted("two-ends", 1)
	runs.AddCompleted("two-ends", 2)
	runs.AddCompleted("completed-failed", 1)
	res, _, err := CheckWorkers(context.Background(), Config{GateURL: srv.URL, Tokens: map[string]string{"acme": "t"}}, &runs, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	want := []struct {
		rule   Rule
		id     string
		detail string
	}{
		{RuleCurrentLease, "stale-completion", "attempt 1's completion was answered recorded, but the job's last lease is attempt 2"},
		{RuleCurrentLease, "two-ends", "the completions of attempts [1 2] were each answered recorded"},
		{RuleCurrentLease, "stale-result", "its result is attempt 2's, but its last lease is attempt 3"},
		{RuleRunOnce, "completed-failed", "is failed"},
		{RuleCurrentLease, "completed-failed", "a completion was answered recorded, but the job is failed"},
	}
	if len(res.Violations) != len(want) {
		t.Fatalf("got %d violations, want %d", len(res.Violations), len(want))
	}
	for i, w := range want {
		v := res.Violations[i]
		if v.Rule != w.rule || v.Tenant != "acme" || v.JobIDs[0] != w.id || !strings.Contains(v.Detail, w.detail) {
			t.Fatalf("violation %d: %+v, want %s on %s saying %q", i, v, w.rule, w.id, w.detail)
		}
	}
}

// serveJobs serves jobs as a gate's GET /v1/jobs would (the state filter
// only) until the test ends.
func serveJobs(t *testing.T, jobs []api.Job) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := api.JobList{Jobs: []api.Job{}}
		for _, j := range jobs {
			if st := r.URL.Query().Get("state"); st == "" || st == j.State {
				out.Jobs = append(out.Jobs, j)
			}
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}
