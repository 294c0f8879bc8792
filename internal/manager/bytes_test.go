package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// Byte bounds of the worker calls, through the RPC layer as a gate calls
// the leader: lease answers within the RPC limit, results within the
// ledger's budgets, list pages bounded by results.

// servedCluster is a one-manager cluster serving its RPC listener, and a
// client of it.
func servedCluster(t *testing.T, tweak func(*Config)) (*testCluster, *rpc.Client) {
	t.Helper()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		c.RPCAdvertise = c.RPCAddr
		if tweak != nil {
			tweak(c)
		}
	})
	queueOn(tc)
	serveRPC(t, tc)
	// Pages of megabytes through the race detector: an attempt is given a
	// minute, as the tests are of bytes and bounds, not of speed.
	c := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{tc.cfgs[0].RPCAdvertise}, AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	return tc, c
}

func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// submitSized submits n jobs of tenant "acme" whose payloads are a JSON
// string of size bytes, and returns their IDs.
func submitSized(t *testing.T, ctx context.Context, tc *testCluster, n, size int) map[string]bool {
	t.Helper()
	payload := `"` + strings.Repeat("p", size-2) + `"`
	ids := map[string]bool{}
	for i := range n {
		key := fmt.Sprintf("job-%d", i)
		r, err := tc.submitToLeader(ctx, "acme", key, "fp-"+key, "blob", payload, 1000)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("submit %s: %+v %v", key, r, err)
		}
		ids[r.JobId] = true
	}
	return ids
}

// TestLeaseAnswerFitsRPC: 40 jobs of 900 kB (36 MB, over the RPC answer's
// 32 MiB) asked for in leases of up to 100 jobs are handed out a few at a
// time, each answer within rpc.LeaseAnswerBytes, and every job is leased
// once and completed at its first attempt.
func TestLeaseAnswerFitsRPC(t *testing.T) {
	tc, c := servedCluster(t, nil)
	ctx := longCtx(t)
	const size = 900_000
	ids := submitSized(t, ctx, tc, 40, size)
	done := map[string]bool{}
	for round := 0; len(done) < len(ids); round++ {
		if round == len(ids) {
			t.Fatalf("%d rounds, %d of %d jobs completed", round, len(done), len(ids))
		}
		r, err := c.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 100, LeaseForNanos: int64(time.Minute),
			Request: fmt.Sprintf("lease-%d", round), Fingerprint: "f"})
		if err != nil {
			t.Fatalf("lease %d: %v", round, err)
		}
		if n := len(r.Leases); n == 0 || n*size > rpc.LeaseAnswerBytes {
			t.Fatalf("lease %d handed out %d jobs of %d bytes (answer bound %d)", round, n, size, rpc.LeaseAnswerBytes)
		}
		for _, l := range r.Leases {
			if !ids[l.Job.JobId] || done[l.Job.JobId] || l.Attempt != 1 || len(l.Job.Payload) != size {
				t.Fatalf("lease %d: job %s attempt %d (payload %d bytes), done before %v", round, l.Job.JobId, l.Attempt, len(l.Job.Payload), done[l.Job.JobId])
			}
			if _, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: l.Job.JobId, LeaseId: l.LeaseId, Result: []byte(`true`)}); err != nil {
				t.Fatalf("complete %s: %v", l.Job.JobId, err)
			}
			done[l.Job.JobId] = true
		}
	}
	for id := range ids {
		j, err := c.GetJob(ctx, "acme", id)
		if err != nil || j.State != api.JobStatusSucceeded || j.Attempts != 1 {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
	}
}

// TestListPagesCountResults: jobs with small payloads and 1 MB results
// (40 MB in all, over the RPC answer's 32 MiB) are listed a few to a page,
// every page answered, each ending with the cursor of the next.
func TestListPagesCountResults(t *testing.T) {
	tc, c := servedCluster(t, nil)
	ctx := longCtx(t)
	ids := submitSized(t, ctx, tc, 40, 10)
	result := []byte(`"` + strings.Repeat("r", 1_000_000) + `"`)
	r, err := c.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 40, LeaseForNanos: int64(time.Minute)})
	if err != nil || len(r.Leases) != 40 {
		t.Fatalf("lease: %d jobs, %v", len(r.Leases), err)
	}
	for _, l := range r.Leases {
		if _, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: l.Job.JobId, LeaseId: l.LeaseId, Result: result}); err != nil {
			t.Fatalf("complete %s: %v", l.Job.JobId, err)
		}
	}
	listed := map[string]bool{}
	req := &rpcpb.ListJobsRequest{Tenant: "acme", Status: api.JobStatusSucceeded, Limit: api.MaxListLimit}
	for pages := 1; ; pages++ {
		page, err := c.ListJobs(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Jobs) == 0 || len(page.Jobs)*len(result) > rpc.ListPageBytes {
			t.Fatalf("page %d holds %d jobs of %d-byte results", pages, len(page.Jobs), len(result))
		}
		for _, j := range page.Jobs {
			if listed[j.JobId] || len(j.Result) != len(result) {
				t.Fatalf("job %s listed twice, or its result cut (%d bytes)", j.JobId, len(j.Result))
			}
			listed[j.JobId] = true
		}
		if page.Next == "" {
			break
		}
		req.After = page.Next
	}
	if len(listed) != len(ids) {
		t.Fatalf("listed %d of %d jobs", len(listed), len(ids))
	}
}

// TestCompleteOverBudget: a result the tenant's share cannot hold is
// refused with budget_exceeded across the wire, the job still running
// under its lease; the worker can still fail it, and a result that fits
// completes it.
func TestCompleteOverBudget(t *testing.T) {
	tc, c := servedCluster(t, func(c *Config) { c.LedgerTenantMaxBytes = 1 << 20 })
	ctx := longCtx(t)
	submitSized(t, ctx, tc, 2, 10)
	r, err := c.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 2, LeaseForNanos: int64(time.Minute)})
	if err != nil || len(r.Leases) != 2 {
		t.Fatalf("lease: %+v %v", r, err)
	}
	a, b := r.Leases[0], r.Leases[1]
	big := []byte(`"` + strings.Repeat("r", 1<<20) + `"`)
	_, err = c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: a.Job.JobId, LeaseId: a.LeaseId, Result: big})
	if !errors.Is(err, rpc.ErrBudgetExceeded) {
		t.Fatalf("a result over the tenant's share: %v, want %v", err, rpc.ErrBudgetExceeded)
	}
	if j, err := c.GetJob(ctx, "acme", a.Job.JobId); err != nil || j.State != api.JobStatusRunning || j.Result != nil {
		t.Fatalf("the refused job: %+v %v", j, err)
	}
	if j, err := c.Fail(ctx, &rpcpb.FailRequest{Tenant: "acme", JobId: a.Job.JobId, LeaseId: a.LeaseId, Error: "result too large"}); err != nil || j.State != api.JobStatusFailed {
		t.Fatalf("failing the refused job: %+v %v", j, err)
	}
	// big[:1000] is not JSON: refused as invalid, before any budget.
	if _, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: b.Job.JobId, LeaseId: b.LeaseId, Result: big[:1000]}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("a result that is not JSON: %v", err)
	}
	if j, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: b.Job.JobId, LeaseId: b.LeaseId, Result: []byte(`{"ok":true}`)}); err != nil || j.State != api.JobStatusSucceeded {
		t.Fatalf("a result that fits: %+v %v", j, err)
	}
}
