package manager

import (
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// A structured key sent again after its entry and its watermark aged out,
// while its job is retained, reserves the same derived job ID: the Commit
// finds it in use. The Admit records a rejection (422 job_id_in_use, naming
// the job), and no second job is created.
func TestJobIDInUseIsRejectedNotLeftPending(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.Idempotency.CleanupInterval = time.Second
		c.WatermarkTTL = time.Hour
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	m := tc.mgrs[l]
	ctx := ctxT(t)
	const key = "c1:5:0123456789abcdef"
	first, err := tc.submit(ctx, l, "t", key, "fp", "demo", `1`, 0)
	if err != nil || first.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", first, err)
	}
	clock.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.FSM().Stats().Entries == 0, "expiry of the committed entry"
	})
	clock.Advance(2 * time.Hour)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.FSM().Stats().Watermarks == 0, "the watermark aged out"
	})

	again, err := tc.submit(ctx, l, "t", key, "fp", "demo", `1`, 0)
	if err != nil || again.Outcome != rpc.OutcomeRejected || again.Rejection == nil ||
		again.Rejection.Status != 422 || again.Rejection.Reason != ledger.ReasonJobIDInUse ||
		!strings.Contains(again.Rejection.Detail, first.JobId) {
		t.Fatalf("resubmission: %+v %v, want 422 %s naming job %s", again, err, ledger.ReasonJobIDInUse, first.JobId)
	}
	e, ok := m.FSM().Entry("t", key)
	if !ok || e.State != ledger.StateRejected {
		t.Fatalf("entry %+v (found %v), want REJECTED", e, ok)
	}
	if st := m.FSM().Stats(); st.Rejected != 1 || st.Jobs != 1 {
		t.Fatalf("stats %+v, want the rejected entry and one job", st)
	}
	// A duplicate gets the same answer.
	dup, err := tc.submit(ctx, l, "t", key, "fp", "demo", `1`, 0)
	if err != nil || dup.Outcome != rpc.OutcomeRejected || dup.Rejection == nil || dup.Rejection.Reason != ledger.ReasonJobIDInUse {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
}
