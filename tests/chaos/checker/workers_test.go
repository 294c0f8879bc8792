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

// Rule (i) catches a job left unfinished and a job completed by no handler
// run, and counts the redeliveries of the others.
func TestRuleRunOnce(t *testing.T) {
	jobs := []api.Job{
		{JobID: "ran-once", IdempotencyKey: "k1", State: api.JobStatusSucceeded},
		{JobID: "ran-twice", IdempotencyKey: "k2", State: api.JobStatusSucceeded},
		{JobID: "nobody-ran", IdempotencyKey: "k3", State: api.JobStatusSucceeded},
		{JobID: "dead", IdempotencyKey: "k4", State: api.JobStatusDead, Attempts: 10, Error: "lease expired"},
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
	res, wc, err := CheckWorkers(context.Background(), Config{GateURL: srv.URL, Tokens: map[string]string{"acme": "t"}}, &runs, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 || res.Violations[0].JobIDs[0] != "nobody-ran" || res.Violations[1].JobIDs[0] != "dead" {
		t.Fatalf("violations %+v", res.Violations)
	}
	for _, v := range res.Violations {
		if v.Rule != RuleRunOnce || v.Tenant != "acme" {
			t.Fatalf("violation %+v", v)
		}
	}
	if wc.Jobs != 4 || wc.Runs != 4 || wc.Redeliveries != 0 {
		t.Fatalf("counts %+v", wc)
	}
}
