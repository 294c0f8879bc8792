package manager

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

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
