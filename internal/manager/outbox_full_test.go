package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxFullStillAnswersAnExpiredSequence: with the outbox full (its one
// place taken by the expired, still owed entry of a structured key), a late
// retry of that key is answered as always, 409 idempotency_key_expired (the
// sequence committed), not refused outbox_full: the outbox bound refuses
// only what it would record, and a committed sequence records nothing.
func TestOutboxFullStillAnswersAnExpiredSequence(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	tc := newTestCluster(t, 1, func(c *Config) { c.OutboxMaxEntries = 1; c.Idempotency.CommittedTTL = ttl })
	tc.setNow(clock.Now)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	const key = "host1.dc1:12345:1:a1b2c3d4e5f6a7b8"
	req := func() *rpcpb.SubmitRequest {
		r := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp"}
		r.Job = &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}
		return r
	}
	if r, err := m.Submit(ctx, req()); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("first: %+v %v", r, err)
	}
	clock.Advance(ttl + time.Second)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		_, live := m.FSM().Entry("t", key)
		return !live && m.FSM().OwedLen() == 1, "the entry to expire and stay owed"
	})
	r, err := m.Submit(ctx, req())
	if errors.Is(err, rpc.ErrOutboxFull) || err != nil || r.Outcome != rpc.OutcomeKeyExpired {
		t.Fatalf("a late retry of the committed sequence with the outbox full: %+v %v, want key_expired", r, err)
	}
}
