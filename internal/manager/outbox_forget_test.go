package manager

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestForgetDatacenterFreesTheOutbox: dc2 is gone for good and never
// answers; dc1's outbox holds, at its bound of 3, an owed submission for
// dc1 and dc2, a live one for dc1 and dc2, and a live one for dc1, dc2 and
// dc3, and refuses a new one outbox_full. Forgetting dc2 records its three
// pairs confirmed: the outbox keeps only the submission dc3 still owes, a
// new multi-datacenter submission is admitted, a second forget finds
// nothing, and the outbox carries none of them to dc2 even once it answers
// again. This datacenter and a name that is not one are refused. dc2 is
// forgotten although the federation no longer knows it (the outbox owes it);
// a datacenter it knows and is owed nothing forgets 0; one it does not know
// and is owed nothing (a mistyped name) is refused not_found, naming the
// datacenters it knows.
func TestForgetDatacenterFreesTheOutbox(t *testing.T) {
	clock := newManualClock()
	const ttl = 5 * time.Second
	var dc2Back atomic.Bool
	dcs := newOutboxDatacenters(t, 2, clock, func(c *Config) { retainFor(ttl)(c); c.OutboxMaxEntries = 3 },
		func(dc string) bool { return dc != "dc2" || dc2Back.Load() })
	m1, m2, ob1 := dcs[0].m, dcs[1].m, dcs[0].ob
	ctx := ctxT(t)
	submit := func(key string, dcs ...string) (*rpcpb.SubmitResponse, error) {
		return m1.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: dcs}})
	}
	admitUntilOwed(t, m1, clock, ttl) // order-1, owed
	for _, s := range []struct {
		key string
		dcs []string
	}{{"live", []string{"dc1", "dc2"}}, {"three", []string{"dc1", "dc2", "dc3"}}} {
		if r, err := submit(s.key, s.dcs...); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", s.key, r, err)
		}
	}
	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx) // dc2 does not answer
	if n := m1.FSM().OutboxLen(); n != 3 {
		t.Fatalf("dc1's outbox carries %d entries, want 3", n)
	}
	if _, err := submit("refused", "dc1", "dc2"); !errors.Is(err, rpc.ErrOutboxFull) {
		t.Fatalf("a new submission at the bound: %v, want outbox_full", err)
	}

	for _, dc := range []string{"dc1", "", "dc 2"} {
		if n, err := m1.ForgetDatacenter(ctx, dc, []string{"dc1", "dc2", "dc3"}); !errors.Is(err, rpc.ErrInvalid) || n != 0 {
			t.Fatalf("forget %q: %d, %v; want invalid", dc, n, err)
		}
	}
	if n := m1.FSM().OutboxLen(); n != 3 {
		t.Fatalf("dc1's outbox carries %d entries after the refusals, want 3", n)
	}

	if n, err := m1.ForgetDatacenter(ctx, "dc2", []string{"dc1", "dc3"}); err != nil || n != 3 {
		t.Fatalf("forget dc2: %d pairs, %v; want 3", n, err)
	}
	if n := m1.FSM().OutboxLen(); n != 1 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 was forgotten, want 1 (dc3's)", n)
	}
	if n := m1.FSM().OwedLen(); n != 0 {
		t.Fatalf("dc1 owes %d entries after dc2 was forgotten, want 0", n)
	}
	if n, err := m1.ForgetDatacenter(ctx, "dc2", []string{"dc1", "dc2", "dc3"}); err != nil || n != 0 {
		t.Fatalf("forget dc2 again: %d pairs, %v; want 0", n, err)
	}
	for _, c := range []struct {
		dc    string
		known []string
	}{{"dc9", []string{"dc3", "dc1", "dc2"}}, {"dc2", []string{"dc3", "dc1"}}} {
		n, err := m1.ForgetDatacenter(ctx, c.dc, c.known)
		want := strings.Join(slices.Sorted(slices.Values(c.known)), ", ")
		if !errors.Is(err, rpc.ErrNotFound) || n != 0 || !strings.Contains(err.Error(), "("+want+")") {
			t.Fatalf("forget %s, owed nothing, the federation knowing %v: %d, %v; want not_found naming %s", c.dc, c.known, n, err, want)
		}
	}
	if r, err := submit("after", "dc1", "dc3"); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("a new multi-datacenter submission once the bound freed: %+v %v", r, err)
	}

	// dc2 answers again: nothing forgotten is carried there.
	dc2Back.Store(true)
	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	for _, key := range []string{"order-1", "live", "three"} {
		if _, ok := m2.FSM().Entry("t", key); ok {
			t.Fatalf("dc1's outbox carried %s to dc2 after dc2 was forgotten", key)
		}
	}
}
