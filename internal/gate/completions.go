package gate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/once-dev/once/pkg/api"
)

// handleCompletions is POST /v1/completions: up to api.MaxCompletions
// completions in one request, each judged exactly as its own
// POST /v1/jobs/{job_id}/complete (checked the same, forwarded the same,
// answered the same bytes), with one result per item in the items' order.
// The items are forwarded concurrently, so the submit stream to the leader
// carries them together. A request that is not valid as a whole (its JSON,
// the number of items, an item's job_id or lease_id) is 400 and completes
// nothing; otherwise the answer is 200, whatever each item's outcome.
func (g *Gate) handleCompletions(w http.ResponseWriter, r *http.Request, tenant string) {
	var req api.CompletionsRequest
	body, ok := g.decodeWorkerBody(w, r, &req)
	if !ok {
		return
	}
	if err := checkCompletions(req.Completions); err != nil {
		writeProblem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return
	}
	g.serveWorkerCall(w, r, tenant, workerCall{route: "completions", body: body,
		forward: func(ctx context.Context, _ string, _ [sha256.Size]byte) *workerAnswer {
			return g.completeAll(ctx, r, tenant, req.Completions)
		}})
}

// checkCompletions checks what makes a completions request invalid as a
// whole: 1..api.MaxCompletions items, each with a job_id and a lease_id of
// at most api.MaxTypeLen bytes.
func checkCompletions(items []api.Completion) error {
	if len(items) == 0 || len(items) > api.MaxCompletions {
		return fmt.Errorf("invalid request: field \"completions\": %d items, want 1..%d", len(items), api.MaxCompletions)
	}
	for i, c := range items {
		if !validID(c.JobID) {
			return fmt.Errorf("invalid request: field \"completions[%d].job_id\" is required, at most %d bytes", i, api.MaxTypeLen)
		}
		if !validID(c.LeaseID) {
			return fmt.Errorf("invalid request: field \"completions[%d].lease_id\" is required, at most %d bytes", i, api.MaxTypeLen)
		}
	}
	return nil
}

// completeAll forwards every item concurrently and renders the batch answer:
// {"results":[{"job":…}|{"error":…},…]}, each item's member the bytes its
// single call would answer. The answer is not kept for an Idempotency-Key
// when an item's outcome decided nothing (workerAnswer.decided: the single
// call's answer would not be kept either), so a retry with the key runs
// again.
func (g *Gate) completeAll(ctx context.Context, r *http.Request, tenant string, items []api.Completion) *workerAnswer {
	answers := make([]*workerAnswer, len(items))
	var wg sync.WaitGroup
	for i := range items {
		wg.Go(func() { answers[i] = g.completeOne(ctx, r, tenant, &items[i]) })
	}
	wg.Wait()
	var buf bytes.Buffer
	buf.WriteString(`{"results":[`)
	for i, a := range answers {
		if i > 0 {
			buf.WriteByte(',')
		}
		member := `{"job":`
		if a.status != http.StatusOK {
			member = `{"error":`
		}
		buf.WriteString(member)
		buf.Write(bytes.TrimRight(a.body, "\n"))
		buf.WriteByte('}')
	}
	buf.WriteString("]}\n")
	transient := slices.ContainsFunc(answers, func(a *workerAnswer) bool { return !a.decided() })
	return &workerAnswer{status: http.StatusOK, body: buf.Bytes(), transient: transient}
}

// completeOne is one item, as handleComplete judges its call.
func (g *Gate) completeOne(ctx context.Context, r *http.Request, tenant string, c *api.Completion) *workerAnswer {
	result, err := g.storedResult(c.Result)
	if err != nil {
		return g.checkFailed(err)
	}
	return g.callLeader(ctx, r, "complete", c.JobID, func(ctx context.Context, id string) (any, error) {
		return g.complete(ctx, tenant, id, c.LeaseID, result)
	})
}
