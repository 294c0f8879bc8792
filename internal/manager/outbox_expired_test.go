package manager

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestOutboxLogsAJobAnotherDatacenterAnswersExpired: dc2 is unreachable
// when dc1 admits sequence 1 of a client for dc1 and dc2; meanwhile the
// client's sequence 2000, for dc2 alone, commits there, so sequence 1 is
// more than the watermark window below its newest there. dc2 then answers
// the carried submission key_expired, a final answer (dc2 cannot tell
// whether the job ran there and was forgotten, so it must not admit it):
// the job does not run in dc2. The outbox must not take that in silence:
// it logs it at error, with the key, the job and the datacenter, as it does
// a key_reused.
func TestOutboxLogsAJobAnotherDatacenterAnswersExpired(t *testing.T) {
	clock := newManualClock()
	var dc2Up atomic.Bool
	dcs := newOutboxDatacenters(t, 2, clock, func(*Config) {}, func(dc string) bool { return dc != "dc2" || dc2Up.Load() })
	m1, m2 := dcs[0].m, dcs[1].m
	var logs testutil.Buffer
	dcs[0].ob.log = slog.New(slog.NewJSONHandler(&logs, nil))
	ctx := ctxT(t)

	const nonce = "0123456789abcdef"
	first := &rpcpb.SubmitRequest{Tenant: "t", Key: "host1.dc1:1:" + nonce, Fingerprint: "fp1",
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}}
	r, err := m1.Submit(ctx, first)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1, sequence 1: %+v %v", r, err)
	}
	later := &rpcpb.SubmitRequest{Tenant: "t", Key: "host1.dc1:2000:" + nonce, Fingerprint: "fp2000",
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`2000`), Datacenters: []string{"dc2"}}}
	if r, err := m2.Submit(ctx, later); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc2, sequence 2000: %+v %v", r, err)
	}

	dc2Up.Store(true)
	clock.Advance(outboxGrace + 1)
	dcs[0].ob.pass(ctx)
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2's final answer, want 0", n)
	}
	if _, ok := m2.FSM().Job("t", r.JobId); ok {
		t.Fatal("dc2 holds the job: this test needs dc2 to refuse it as expired")
	}
	var found bool
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "ERROR" && rec["idempotency_key"] == first.Key && rec["job_id"] == r.JobId && rec["dc"] == "dc2" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no error logged for the job dc2 refused as expired; logs:\n%s", logs.String())
	}
}
