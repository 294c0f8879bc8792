package gate

import (
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestMultiDCCacheTTLIgnoresGateClockSkew is TestCacheTTLIgnoresGateClockSkew
// for a job naming two datacenters: the combined answer carries the lifetime
// the leaders say is left, so a gate whose clock is an hour behind theirs
// stops replaying from its cache when the ledgers' entries expire, and
// forwards the next duplicate.
func TestMultiDCCacheTTLIgnoresGateClockSkew(t *testing.T) {
	ledgerClock := newFakeClock()
	behind := testutil.NewClock(ledgerClock.Now().Add(-time.Hour))
	m1, a1 := startManager(t, managertest.Options{Datacenter: "dc1", Now: ledgerClock.Now})
	m2, a2 := startManager(t, managertest.Options{Datacenter: "dc2", Now: ledgerClock.Now})
	fed := StaticFederation{"dc1": {a1}, "dc2": {a2}}
	gate := func(now func() time.Time) *testGate {
		return startGate(t, []string{a1}, func(cfg *Config, deps *Deps) {
			cfg.Datacenter = "dc1"
			deps.Federation, deps.Now = fed, now
		})
	}
	right, skewed := gate(ledgerClock.Now), gate(behind.Now)
	advance := func(d time.Duration) { ledgerClock.Advance(d); behind.Advance(d) }
	const key = "order-skew-2dc" // opaque: once expired, the key is judged afresh
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	ttl := DefaultConfig().Idempotency.CommittedTTL
	submits := func() int64 { return m1.Submits() + m2.Submits() }

	first := wantJob(t, right.submit(t, key, body), http.StatusCreated)
	advance(ttl - 10*time.Second)
	// The skewed gate learns of the key with 10s left on the ledgers' entries.
	replay := skewed.submit(t, key, body)
	if j := wantJob(t, replay, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("replay answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, replay, api.HeaderReplayed, "true")
	// Within those 10s the skewed gate replays from its cache.
	advance(5 * time.Second)
	n := submits()
	wantJob(t, skewed.submit(t, key, body), http.StatusCreated)
	if submits() != n {
		t.Fatal("the replay within the entries' lifetime was not answered from the cache")
	}
	// Past the ledgers' expiry the skewed gate asks them again.
	advance(6 * time.Second)
	wantJob(t, skewed.submit(t, key, body), http.StatusCreated)
	if got := submits(); got != n+2 {
		t.Fatalf("the datacenters saw %d submissions, want %d: the skewed gate replayed past the ledgers' expiry", got, n+2)
	}
}
