package manager

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
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
	tc.now = func() time.Time { runtime.Gosched(); return time.Now() }
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

// TestOrphanOnALiveLeaderIsResolved: a PENDING entry whose submitter went away
// (here: a Reserve proposed by hand and never resolved) is resolved by the same,
// still-live leader once it is older than MANAGER_ORPHAN_GRACE, long before its
// pending TTL.
func TestOrphanOnALiveLeaderIsResolved(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.OrphanGrace = 300 * time.Millisecond })
	l := tc.leader()
	ctx := ctxT(t)
	term := tc.mgrs[l].Raft().CurrentTerm()
	now := tc.now()
	res, err := tc.mgrs[l].apply(ctx, ledger.Reserve{Tenant: "t", Key: "orphan-ok", Fingerprint: "fp", JobID: "job-orphan-ok",
		Now: now.UnixNano(), ExpiresAt: now.Add(time.Minute).UnixNano(), MaxEntries: 1000,
		Request: ledger.Request{Type: "demo", Payload: []byte(`1`)}})
	if err != nil || res.Outcome != ledger.OutcomeReserved {
		t.Fatalf("orphan reserve: %+v %v", res, err)
	}
	waitFor(t, 5*time.Second, "the orphan to be resolved on the live leader", func() bool {
		return tc.mgrs[l].FSM().Stats().Pending == 0
	})
	if tc.mgrs[l].Raft().CurrentTerm() != term {
		t.Skip("an election happened: the orphan may have been resolved by the new term's sweep")
	}
	e, _ := tc.mgrs[l].FSM().Entry("t", "orphan-ok")
	if e.State != ledger.StateCommitted || e.JobID != "job-orphan-ok" {
		t.Fatalf("orphan entry: %+v", e)
	}
	// A duplicate now replays the stored outcome instead of waiting.
	r, err := tc.submit(ctx, l, "t", "orphan-ok", "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted || r.JobID != "job-orphan-ok" || !r.Replayed {
		t.Fatalf("duplicate of a resolved orphan: %+v %v", r, err)
	}
}
