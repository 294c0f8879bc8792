package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/chaos/checker"
)

// The workers' transport records the completions a gate answered recorded,
// by the attempt their result names, and nothing for a refused one; the
// client still gets every answer as it was.
func TestCompletionsSeen(t *testing.T) {
	lost := &api.Problem{Type: "https://once.dev/problems/lease_lost", Title: "Lease lost", Status: http.StatusConflict, Code: api.CodeLeaseLost}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any = api.Job{JobID: "j1", State: api.JobStatusSucceeded}
		switch r.URL.Path {
		case "/v1/jobs/j1/complete":
		case "/v1/jobs/j2/complete":
			w.Header().Set("Content-Type", api.ContentTypeProblem)
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(lost)
			return
		case "/v1/completions":
			out = api.CompletionsResponse{Results: []api.CompletionResult{{Job: &api.Job{JobID: "j3"}}, {Error: lost}}}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	var runs checker.Runs
	tr := client.NewTransport()
	defer tr.CloseIdleConnections()
	c, err := client.New([]string{srv.URL}, client.Options{MaxAttempts: 1,
		HTTPClient: &http.Client{Transport: completionsSeen{next: tr, runs: &runs}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if j, err := c.Complete(ctx, "j1", "L1", map[string]any{"ok": true, "attempt": 2}); err != nil || j.JobID != "j1" {
		t.Fatalf("complete j1: %+v, %v", j, err)
	}
	if _, err := c.Complete(ctx, "j2", "L2", map[string]any{"ok": true, "attempt": 1}); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("complete j2: %v, want lease_lost", err)
	}
	res, err := c.CompleteMany(ctx, []client.Completion{
		{JobID: "j3", LeaseID: "L3", Result: map[string]any{"attempt": 3}},
		{JobID: "j4", LeaseID: "L4", Result: map[string]any{"attempt": 1}},
	})
	if err != nil || len(res) != 2 || res[0].Job == nil || !errors.Is(res[1].Err, client.ErrLeaseLost) {
		t.Fatalf("complete many: %+v, %v", res, err)
	}
	for id, want := range map[string][]int{"j1": {2}, "j2": nil, "j3": {3}, "j4": nil} {
		if got := runs.Completed(id); !slices.Equal(got, want) {
			t.Errorf("completed attempts of %s: %v, want %v", id, got, want)
		}
	}
}
