package checker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
	defer srv.Close()
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
