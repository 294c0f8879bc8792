package manager

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// TestConcurrentAdmissionsNeverExceedCapacity: MANAGER_MAX_QUEUED_JOBS is
// decided in the ledger, so a storm of distinct first submissions commits
// exactly the bound and rejects the rest with 429 capacity.
func TestConcurrentAdmissionsNeverExceedCapacity(t *testing.T) {
	const bound, n = 5, 200
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxQueuedJobs = bound })
	// A clock that yields the processor, as a preempted leader would between
	// reading its clock and the next step: any check-then-act admission
	// interleaves here.
	tc.setNow(func() time.Time { runtime.Gosched(); return time.Now() })
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed, rejected := 0, 0
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := tc.submitToLeader(ctx, "t", fmt.Sprintf("cap-%d", i), "fp", "demo", `1`, 10_000)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Outcome == rpc.OutcomeCommitted:
				committed++
			case r.Outcome == rpc.OutcomeRejected && r.Rejection.Status == 429 && r.Rejection.Reason == "capacity":
				rejected++
			default:
				errs <- fmt.Errorf("key %d: unexpected answer %+v", i, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if committed != bound || rejected != n-bound {
		t.Fatalf("committed %d, rejected %d; want %d and %d", committed, rejected, bound, n-bound)
	}
	if jobs := tc.mgrs[tc.leader()].FSM().Stats().Jobs; jobs != bound {
		t.Fatalf("the job table holds %d jobs, over the bound of %d", jobs, bound)
	}
}

// TestRejectedSequenceRetriedAfterHigherCommitIsAdmitted: a 429 sequence that
// never ran, retried after a higher sequence of the same client committed and
// expired, runs; a committed sequence retried after expiry is still refused.
func TestRejectedSequenceRetriedAfterHigherCommitIsAdmitted(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.MaxQueuedJobs = 1
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.Idempotency.RejectedTTL = 10 * time.Second
		c.JobRetention = 10 * time.Second
		c.QueueJobs = false // jobs that expire by retention alone
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	ctx := ctxT(t)
	key := func(seq int) string { return fmt.Sprintf("c1:%d:0123456789abcdef", seq) }
	submit := func(seq int) *rpcpb.SubmitResponse {
		t.Helper()
		r, err := tc.submit(ctx, l, "t", key(seq), "fp", "demo", `1`, 0)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		return r
	}
	drain := func() {
		clock.Advance(time.Minute)
		testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
			st := tc.mgrs[l].FSM().Stats()
			return st.Entries == 0 && st.Jobs == 0, "entries and jobs to expire"
		})
	}
	if r := submit(1); r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("seq 1: %+v", r)
	}
	if r := submit(2); r.Outcome != rpc.OutcomeRejected || r.Rejection.Status != 429 {
		t.Fatalf("seq 2 should be a capacity rejection: %+v", r)
	}
	drain()
	if r := submit(3); r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("seq 3: %+v", r)
	}
	drain()
	if r := submit(2); r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("seq 2 never ran; its retry must be admitted, got %+v", r)
	}
	if r := submit(3); r.Outcome != rpc.OutcomeKeyExpired {
		t.Fatalf("seq 3 ran; its late retry must be key_expired, got %+v", r)
	}
}

// TestWatermarkFloodRefusesAndNeverReruns: a full watermark table refuses new
// clients (watermarks_full), a tenant over its share is refused alone
// (tenant_quota), and an earlier committed sequence is never run again.
func TestWatermarkFloodRefusesAndNeverReruns(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.WatermarkMaxClients = 3
		c.WatermarkMaxClientsPerTenant = 2
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.JobRetention = time.Hour
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	ctx := ctxT(t)
	submit := func(tenant, client string, seq int) (*rpcpb.SubmitResponse, error) {
		return tc.submit(ctx, l, tenant, fmt.Sprintf("%s:%d:0123456789abcdef", client, seq), "fp", "demo", `1`, 0)
	}
	first, err := submit("a", "c1", 1)
	if err != nil || first.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a/c1: %+v %v", first, err)
	}
	clock.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) { return tc.mgrs[l].FSM().Stats().Entries == 0, "the entry to expire" })
	if r, err := submit("a", "c2", 1); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a/c2: %+v %v", r, err)
	}
	for i := 3; i < 20; i++ {
		if _, err := submit("a", fmt.Sprintf("c%d", i), 1); !errors.Is(err, rpc.ErrTenantQuota) {
			t.Fatalf("a/c%d: want tenant_quota, got %v", i, err)
		}
	}
	// Tenant a's flood does not refuse tenant b.
	if r, err := submit("b", "c1", 1); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("b/c1: %+v %v", r, err)
	}
	// The table is full: a new client is refused, nothing is evicted...
	if _, err := submit("b", "c2", 1); !errors.Is(err, rpc.ErrWatermarksFull) {
		t.Fatalf("b/c2: want watermarks_full, got %v", err)
	}
	// ... so the late retry of a/c1's committed sequence still does not run.
	if r, err := submit("a", "c1", 1); err != nil || r.Outcome != rpc.OutcomeKeyExpired {
		t.Fatalf("late retry of a/c1 seq 1: want key_expired, got %+v %v", r, err)
	}
	if j, err := tc.mgrs[l].GetJob(ctx, "a", first.JobId); err != nil || j.JobId != first.JobId {
		t.Fatalf("the original job: %+v %v", j, err)
	}
	if n := tc.mgrs[l].FSM().Stats().Jobs; n != 3 {
		t.Fatalf("jobs %d, want 3", n)
	}
}

// TestLedgerByteBudget: large payloads fill IDEMPOTENCY_LEDGER_MAX_BYTES and
// the tenant's share; new keys are refused (ledger_full, tenant_quota), nothing
// live is dropped, and duplicates are still answered.
func TestLedgerByteBudget(t *testing.T) {
	payload := `"` + strings.Repeat("x", 200_000) + `"`
	one := int64(ledger.EntryOverhead + ledger.JobOverhead + 2*len(payload))
	tc := newTestCluster(t, 1, func(c *Config) {
		c.LedgerMaxBytes = 3 * one
		c.LedgerTenantMaxBytes = 2 * one
	})
	l := tc.leader()
	ctx := ctxT(t)
	ids := map[string]string{}
	for _, tk := range []string{"t1/a", "t1/b", "t2/a"} {
		tenant, key, _ := strings.Cut(tk, "/")
		r, err := tc.submit(ctx, l, tenant, key, "fp", "demo", payload, 0)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", tk, r, err)
		}
		ids[tk] = r.JobId
	}
	if _, err := tc.submit(ctx, l, "t1", "c", "fp", "demo", payload, 0); !errors.Is(err, rpc.ErrTenantQuota) {
		t.Fatalf("t1 over its share: want tenant_quota, got %v", err)
	}
	if _, err := tc.submit(ctx, l, "t3", "a", "fp", "demo", payload, 0); !errors.Is(err, rpc.ErrLedgerFull) {
		t.Fatalf("ledger over its bytes: want ledger_full, got %v", err)
	}
	for tk, id := range ids {
		tenant, key, _ := strings.Cut(tk, "/")
		r, err := tc.submit(ctx, l, tenant, key, "fp", "demo", payload, 0)
		if err != nil || !r.Replayed || r.JobId != id {
			t.Fatalf("live %s must survive: %+v %v", tk, r, err)
		}
	}
	if st := tc.mgrs[l].FSM().Stats(); st.Bytes > uint64(3*one) || st.Jobs != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestListLargeJobsPagesThroughRPC: 20 jobs of 900 KB (18 MB, over what one RPC
// answer may carry) page through the rpc client/server pair without an error:
// pages stop at rpc.ListPageBytes and hand out Next.
func TestListLargeJobsPagesThroughRPC(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	// 18 MB through the race detector on a loaded machine: the test is of
	// paging, not of speed, so neither the test nor an attempt is short.
	ctx := longCtx(t)
	payload := `"` + strings.Repeat("p", 900_000) + `"`
	for i := 0; i < 20; i++ {
		if r, err := tc.submit(ctx, l, "t", fmt.Sprintf("big-%02d", i), "fp", "demo", payload, 0); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("submit %d: %+v %v", i, r, err)
		}
	}
	addr := rpctest.Listen(t, rpc.NewServer(tc.mgrs[l], rpc.ServerConfig{}))
	client := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{addr}, AttemptTimeout: time.Minute})
	defer client.Close()
	var keys []string
	after, pages := "", 0
	for {
		page, err := client.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Limit: 100, After: after})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, j := range page.Jobs {
			if len(j.Payload) != len(payload) {
				t.Fatalf("job %s: payload of %d bytes", j.IdempotencyKey, len(j.Payload))
			}
			keys = append(keys, j.IdempotencyKey)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if len(keys) != 20 || keys[0] != "big-00" || keys[19] != "big-19" {
		t.Fatalf("listed %d jobs: %v", len(keys), keys)
	}
	if pages < 5 {
		t.Fatalf("%d pages for 18 MB: pages are not bounded by bytes", pages)
	}
}

// TestResultTTLIsFixedByTheFirstAdmission: a submission's ResultTTL is stored in
// its entry and stamps the outcome's expiry (SubmitResponse.ExpiresAt); a
// retry cannot change it, and its job is retained at least as long.
func TestResultTTLIsFixedByTheFirstAdmission(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	ctx := ctxT(t)
	submit := func(key string, ttl time.Duration) *rpcpb.SubmitResponse {
		t.Helper()
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp", ResultTtlNanos: int64(ttl)}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`)}
		r, err := tc.mgrs[l].Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
		return r
	}
	before := time.Now()
	r := submit("long", 2*time.Hour)
	if d := respExpiresAt(r).Sub(before); d < 2*time.Hour || d > 2*time.Hour+time.Minute {
		t.Fatalf("expires in %v, want about 2h", d)
	}
	if r2 := submit("long", time.Minute); !r2.Replayed || !respExpiresAt(r2).Equal(respExpiresAt(r)) {
		t.Fatalf("a retry changed the lifetime: %+v vs %+v", r2, r)
	}
	if d := respExpiresAt(submit("default", 0)).Sub(before); d > tc.cfgs[l].Idempotency.CommittedTTL+time.Minute {
		t.Fatalf("default lifetime %v", d)
	}
	// A queued job has no end (ExpiresAt 0) before it finishes.
	if j, _ := tc.mgrs[l].FSM().Job("t", r.JobId); j.ExpiresAt != 0 && time.Duration(j.ExpiresAt-j.CreatedAt) < 2*time.Hour {
		t.Fatalf("the job is retained less than its key: %+v", j)
	}
}
