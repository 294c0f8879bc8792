package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/jobid"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestDerivedJobIDAndRetainedJob: a submission without a proposed ID gets the
// ID derived from (tenant, key, fingerprint); the same opaque key and request
// sent again after its entry expired, while the job is retained, is answered
// with that job and makes no second one; another fingerprint under the same
// key then is a new job with another ID.
func TestDerivedJobIDAndRetainedJob(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.Idempotency.CleanupInterval = time.Second
		c.JobRetention = time.Hour
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	ctx := ctxT(t)
	const key = "order-ORD-7"
	r, err := tc.submit(ctx, l, "t", key, "fp1", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r, err)
	}
	if want := jobid.Derive("t", key, "fp1"); r.JobId != want || r.Job.JobId != want {
		t.Fatalf("job id %s, want the derived %s", r.JobId, want)
	}
	clock.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return tc.mgrs[l].FSM().Stats().Entries == 0, "expiry of the committed entry"
	})
	again, err := tc.submit(ctx, l, "t", key, "fp1", "demo", `1`, 0)
	if err != nil || again.Outcome != rpc.OutcomeCommitted || !again.Replayed || again.JobId != r.JobId {
		t.Fatalf("resubmission after expiry: %+v %v, want the retained job %s replayed", again, err, r.JobId)
	}
	if n := tc.mgrs[l].FSM().Stats().Jobs; n != 1 {
		t.Fatalf("jobs: %d, want 1", n)
	}
	other, err := tc.submit(ctx, l, "t", key, "fp2", "demo", `2`, 0)
	if err != nil || other.Outcome != rpc.OutcomeCommitted || other.JobId == r.JobId {
		t.Fatalf("another request under the expired key: %+v %v", other, err)
	}
}

// TestExpiryBasis: a gate's expiry basis within the skew bound sets the
// entry's expiry (basis + TTL); one further off is ignored for the leader's
// clock.
func TestExpiryBasis(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tc := newTestCluster(t, 1, func(c *Config) { c.Idempotency.CommittedTTL = time.Minute })
	tc.setNow(func() time.Time { return now })
	l := tc.leader()
	ctx := ctxT(t)
	for i, tt := range []struct {
		basis, want time.Time
	}{
		{now.Add(-1500 * time.Millisecond), now.Add(-1500 * time.Millisecond).Add(time.Minute)},
		{now.Add(-time.Hour), now.Add(time.Minute)},
		{time.Time{}, now.Add(time.Minute)},
	} {
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: "basis-" + string(rune('a'+i)), Fingerprint: "fp", ExpiryBasisUnixNanos: (tt.basis).UnixNano()}
		req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1"}}
		r, err := tc.mgrs[l].Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("basis %v: %+v %v", tt.basis, r, err)
		}
		if !respExpiresAt(r).Equal(tt.want) {
			t.Fatalf("basis %v: expires at %v, want %v", tt.basis, respExpiresAt(r), tt.want)
		}
	}
}

// TestProposedJobIdMustBeDerived: a proposal other than the derived ID is
// refused as invalid and reserves nothing; the derived one is accepted.
func TestProposedJobIDMustBeDerived(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	ctx := ctxT(t)
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "k-proposed", Fingerprint: "fp", ProposedJobId: "01a20087-00af-7408-a87b-1180decbaa77"}
	req.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1"}}
	if r, err := tc.mgrs[l].Submit(ctx, req); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("foreign proposal: %+v %v, want invalid", r, err)
	}
	if _, ok := tc.mgrs[l].FSM().Entry("t", "k-proposed"); ok {
		t.Fatal("a refused proposal reserved the key")
	}
	req.ProposedJobId = jobid.Derive("t", "k-proposed", "fp")
	if r, err := tc.mgrs[l].Submit(ctx, req); err != nil || r.JobId != req.ProposedJobId {
		t.Fatalf("derived proposal: %+v %v", r, err)
	}
}
