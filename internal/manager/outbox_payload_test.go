package manager

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
)

// TestOutboxAnswersComeWithoutThePayload: the outbox reads a carried
// submission's answer for its outcome alone, so dc2 answers the carry of a
// 1 MiB job without the payload (none of it crosses the WAN back), and the
// job is still carried whole and confirmed.
func TestOutboxAnswersComeWithoutThePayload(t *testing.T) {
	clock := newManualClock()
	m1, m2, svc2, ob1 := dc1CarryingToCountedDC2(t, clock, time.Hour)
	ctx := ctxT(t)

	req := order1ForDC1AndDC2()
	payload := []byte(`"` + strings.Repeat("a", 1<<20-2) + `"`)
	req.Job.Payload = payload
	r, err := m1.Submit(ctx, req)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("dc1: %+v %v", r, err)
	}
	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	if n := svc2.carried.Load(); n != 1 {
		t.Fatalf("one pass carried the job to dc2 %d times, want once", n)
	}
	if n := svc2.carriedPayloads.Load(); n != 0 {
		t.Fatalf("dc2 answered the carried submission with %d payload bytes, want 0", n)
	}
	j, ok := m2.FSM().Job("t", r.JobId)
	if !ok || !bytes.Equal(j.Payload, payload) {
		t.Fatalf("dc2 holds the job %v with a payload of %d bytes, want %d", ok, len(j.Payload), len(payload))
	}
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 confirmed the job, want 0", n)
	}
}
