package manager

import (
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
)

// A watermark ages out once it is WatermarkTTL old even when no entry and no
// job is due: the leader's expiry does not wait for NextExpiry.
func TestWatermarkAgesOutWithNothingElseDue(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.Idempotency.CleanupInterval = time.Second
		c.WatermarkTTL = time.Hour
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	m := tc.mgrs[l]
	r, err := tc.submit(ctxT(t), l, "t", "c1:5:0123456789abcdef", "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r, err)
	}
	// The entry expires; its job is queued (it never expires unfinished).
	clock.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.FSM().Stats().Entries == 0, "expiry of the committed entry"
	})
	if _, ok := m.FSM().Watermark("t", "c1", "0123456789abcdef"); !ok {
		t.Fatal("no watermark after the entry expired")
	}
	if at, ok := m.FSM().NextExpiry(); ok {
		t.Fatalf("something else is due at %d: the test needs nothing", at)
	}
	clock.Advance(2 * time.Hour)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.FSM().Stats().Watermarks == 0, "the watermark aged out"
	})
}
