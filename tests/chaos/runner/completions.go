package runner

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/checker"
)

// completionsSeen is the chaos workers' HTTP transport: it passes every
// request on to next, and records in runs each completion a gate answered
// recorded (200 to POST /v1/jobs/{id}/complete; an item's job in the 200
// to POST /v1/completions), with the attempt the handler put in its result
// (startWorkers), for rule (l). A completion whose answer did not arrive
// whole is not recorded: it may or may not have been.
type completionsSeen struct {
	next http.RoundTripper
	runs *checker.Runs
}

func (t completionsSeen) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	single := strings.HasPrefix(p, "/v1/jobs/") && strings.HasSuffix(p, "/complete")
	if req.Method != http.MethodPost || req.GetBody == nil || !(single || p == "/v1/completions") {
		return t.next.RoundTrip(req)
	}
	var sent []byte
	if body, err := req.GetBody(); err == nil {
		sent, err = io.ReadAll(body)
		body.Close()
		if err != nil {
			sent = nil
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || sent == nil {
		return resp, err
	}
	answer, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		// The client reads what arrived, then the same error.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(answer), errReader{rerr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	if single {
		var req api.CompleteRequest
		var job api.Job
		if json.Unmarshal(sent, &req) == nil && json.Unmarshal(answer, &job) == nil && job.JobID != "" {
			t.record(job.JobID, req.Result)
		}
		return resp, nil
	}
	var many api.CompletionsRequest
	var out api.CompletionsResponse
	if json.Unmarshal(sent, &many) != nil || json.Unmarshal(answer, &out) != nil {
		return resp, nil
	}
	for i, r := range out.Results {
		if r.Job != nil && i < len(many.Completions) {
			t.record(many.Completions[i].JobID, many.Completions[i].Result)
		}
	}
	return resp, nil
}

// record records job id's completion by the attempt its result names.
func (t completionsSeen) record(id string, result json.RawMessage) {
	var r struct {
		Attempt int `json:"attempt"`
	}
	if json.Unmarshal(result, &r) == nil && r.Attempt > 0 {
		t.runs.AddCompleted(id, r.Attempt)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
