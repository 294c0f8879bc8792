package manager

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// refusingDatacenter serves a real manager's RPC, but answers every Submit
// with refuse while it is set, as a datacenter that cannot take a carried
// submission (one not yet upgraded to read it) or one unreachable would.
type refusingDatacenter struct {
	*Manager
	refuse  atomic.Pointer[rpc.Error]
	submits atomic.Int64
}

func (d *refusingDatacenter) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	d.submits.Add(1)
	if e := d.refuse.Load(); e != nil {
		return nil, e
	}
	return d.Manager.Submit(ctx, req)
}

// TestOutboxLogsAnInvalidRefusalOnceAndRetries: dc2 refuses the submission
// dc1's outbox carries as invalid. No retry alone changes that, so the
// operator must learn of it: dc1's leader logs it at error once (not at
// every attempt), with the tenant, key, job and datacenter, counts every
// refusal in once_manager_outbox_invalid_total, and keeps the entry,
// retrying at the longest backoff; once dc2 accepts, the job lands there.
// A transient refusal (unavailable) is logged at debug only, and backs off
// from the shortest wait.
func TestOutboxLogsAnInvalidRefusalOnceAndRetries(t *testing.T) {
	clock := newManualClock()
	tc1 := newTestCluster(t, 1, nil)
	tc1.setNow(clock.Now)
	tc2 := newTestCluster(t, 1, func(c *Config) { c.Datacenter = "dc2" })
	tc2.setNow(clock.Now)
	m1 := tc1.mgrs[tc1.leader()]
	dc2 := &refusingDatacenter{Manager: tc2.mgrs[tc2.leader()]}
	addr := rpctest.Listen(t, rpc.NewServer(dc2, rpc.ServerConfig{Logger: testutil.Logger(t)}))
	peers := func() map[string][]string { return map[string][]string{"dc1": nil, "dc2": {addr}} }
	var logs testutil.Buffer
	ob := newOutbox(m1, peers, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// One attempt per carry: the outbox's own client would retry an
	// unavailable answer for the whole outboxAttempt.
	ob.clients["dc2"] = rpc.NewClient(rpc.ClientConfig{
		Resolver: rpc.ResolverFunc(func() []string { return peers()["dc2"] }), Logger: testutil.Logger(t), MaxAttempts: 1})
	t.Cleanup(ob.close)
	ctx := ctxT(t)

	submit := func(key string) outboxKey {
		t.Helper()
		req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1", "dc2"}}}
		r, err := m1.Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("dc1, %s: %+v %v", key, r, err)
		}
		clock.Advance(outboxGrace + 1)
		return outboxKey{"t", key, r.JobId, "dc2"}
	}
	// state returns k's backoff and next attempt, and makes it due now (the
	// test does not wait out the backoff).
	state := func(k outboxKey) (backoff time.Duration, next time.Time) {
		t.Helper()
		ob.mu.Lock()
		defer ob.mu.Unlock()
		st := ob.state[k]
		if st == nil {
			t.Fatalf("the outbox holds no state for %v", k)
		}
		backoff, next = st.backoff, st.next
		st.next = time.Time{}
		return backoff, next
	}
	lines := func(level, key string) (n int) {
		t.Helper()
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["level"] == level && rec[logging.KeyIdemKey] == key {
				n++
			}
		}
		return n
	}

	// dc2 refuses as invalid: one error line however many attempts, every
	// attempt counted, the entry kept at the longest backoff.
	invalid := submit("order-invalid")
	dc2.refuse.Store(rpc.Errorf(rpc.CodeInvalid, "job: unknown field"))
	const attempts = 3
	for i := range attempts {
		before := time.Now()
		ob.pass(ctx)
		if backoff, next := state(invalid); backoff != outboxMaxBackoff || next.Before(before.Add(outboxMaxBackoff/2)) {
			t.Fatalf("attempt %d: backoff %v, next attempt in %v; want %v, at least %v", i+1, backoff, next.Sub(before), outboxMaxBackoff, outboxMaxBackoff/2)
		}
	}
	if n := dc2.submits.Load(); n != attempts {
		t.Fatalf("dc2 was asked %d times, want %d", n, attempts)
	}
	if n := lines("ERROR", invalid.key); n != 1 {
		t.Fatalf("%d error lines for the submission dc2 refuses as invalid, want 1; logs:\n%s", n, logs.String())
	}
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		_ = json.Unmarshal([]byte(line), &rec)
		if rec["level"] == "ERROR" && (rec[logging.KeyTenant] != "t" || rec[logging.KeyJobID] != invalid.jobID ||
			rec[logging.KeyDatacenter] != "dc2" || rec[logging.KeyError] == nil) {
			t.Fatalf("the error line lacks the tenant, job, datacenter or error: %s", line)
		}
	}
	if got := promtest.ToFloat64(m1.metrics.outboxInvalid); got != attempts {
		t.Fatalf("once_manager_outbox_invalid_total = %v, want %d", got, attempts)
	}
	if n := m1.FSM().OutboxLen(); n != 1 {
		t.Fatalf("dc1's outbox carries %d entries after dc2's invalid answers, want 1", n)
	}

	// dc2 accepts (upgraded): the next attempt lands the job there.
	dc2.refuse.Store(nil)
	ob.pass(ctx)
	if _, ok := dc2.FSM().Job("t", invalid.jobID); !ok {
		t.Fatal("dc2 does not hold the job once it accepts the submission")
	}
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 accepted, want 0", n)
	}

	// A transient refusal: debug lines only, the shortest backoff first.
	transient := submit("order-unavailable")
	dc2.refuse.Store(rpc.Errorf(rpc.CodeUnavailable, "no leader"))
	for i := range 2 {
		ob.pass(ctx)
		if backoff, _ := state(transient); backoff != outboxInterval<<i {
			t.Fatalf("attempt %d: backoff %v after an unavailable answer, want %v", i+1, backoff, outboxInterval<<i)
		}
	}
	if n := lines("ERROR", transient.key); n != 0 {
		t.Fatalf("%d error lines for an unavailable answer, want 0; logs:\n%s", n, logs.String())
	}
	if n := lines("DEBUG", transient.key); n != 2 {
		t.Fatalf("%d debug lines for two unavailable answers, want 2; logs:\n%s", n, logs.String())
	}
	if got := promtest.ToFloat64(m1.metrics.outboxInvalid); got != attempts {
		t.Fatalf("once_manager_outbox_invalid_total = %v after unavailable answers, want %d", got, attempts)
	}
}
