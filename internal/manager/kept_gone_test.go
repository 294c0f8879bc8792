package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestKeptJobIsGoneAtRetentionsEnd: an opaque key sent again with the same
// request after its entry expired is answered with the job it made while
// that job is retained, and not once its retention has ended, by the
// manager's one clock, though no sweep has removed the job yet: one
// nanosecond before, the submission is a replay of the job, which a read
// finds; at the instant, a read answers not found and the submission is
// judged afresh, as docs/api.md says, and commits a new job under the
// derived ID, not a replay of the old one.
func TestKeptJobIsGoneAtRetentionsEnd(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Idempotency.CommittedTTL = time.Minute
		c.JobRetention = time.Hour
		c.QueueJobs = false
		c.Idempotency.CleanupInterval = time.Hour // no Expire sweeps the entry or the job
	})
	tc.setNow(clock.Now)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	submit := func(when string) *rpcpb.SubmitResponse {
		t.Helper()
		r, err := m.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "t", Key: "order-1", Fingerprint: "fp1",
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1"}}})
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v, want committed", when, r, err)
		}
		return r
	}
	first := submit("first")
	old, ok := m.FSM().Job("t", first.JobId)
	if !ok || old.ExpiresAt == 0 {
		t.Fatalf("the job: %+v %v, want one retained for a while", old, ok)
	}
	clock.Advance(time.Duration(old.ExpiresAt - clock.Now().UnixNano() - 1))
	if e, ok := m.liveEntry("t", "order-1"); ok {
		t.Fatalf("the key's entry %+v is still live: the submission would replay it, not the job", e)
	}

	before := submit("one nanosecond before the retention's end")
	if !before.Replayed || before.JobId != first.JobId {
		t.Fatalf("one nanosecond before the retention's end: %+v, want job %s replayed", before, first.JobId)
	}
	if _, err := m.GetJob(ctx, "t", first.JobId); err != nil {
		t.Fatalf("one nanosecond before the retention's end: read %v, want the job", err)
	}

	clock.Advance(time.Nanosecond)
	if _, err := m.GetJob(ctx, "t", first.JobId); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("at the retention's end: read %v, want not found", err)
	}
	at := submit("at the retention's end")
	if at.Replayed || at.JobId != first.JobId {
		t.Fatalf("at the retention's end: %+v, want a new job under the derived ID %s, not a replay", at, first.JobId)
	}
	renewed, ok := m.FSM().Job("t", at.JobId)
	if !ok || renewed.ExpiresAt <= old.ExpiresAt {
		t.Fatalf("at the retention's end: job %+v %v, want a new one retained past %d", renewed, ok, old.ExpiresAt)
	}
	if _, err := m.GetJob(ctx, "t", at.JobId); err != nil {
		t.Fatalf("the new job: read %v", err)
	}
	if n := m.FSM().Stats().Jobs; n != 1 {
		t.Fatalf("jobs: %d, want 1", n)
	}
}
