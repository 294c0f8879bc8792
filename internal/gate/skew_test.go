package gate

import (
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestCacheTTLIgnoresGateClockSkew: a gate whose clock is an hour behind the
// ledger's caches a replayed outcome only for the lifetime the manager says is
// left (counted on the gate's own clock from when it asked), not for
// ExpiresAt minus its own clock, so it stops replaying when the ledger's entry
// expires (the next duplicate is forwarded).
func TestCacheTTLIgnoresGateClockSkew(t *testing.T) {
	ledgerClock := newFakeClock()
	behind := testutil.NewClock(ledgerClock.Now().Add(-time.Hour))
	mgr, addr := startManager(t, managertest.Options{Now: ledgerClock.Now})
	right := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = ledgerClock.Now })
	skewed := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = behind.Now })
	advance := func(d time.Duration) { ledgerClock.Advance(d); behind.Advance(d) }
	const key = "order-skew" // opaque: once expired, the key is judged afresh
	ttl := DefaultConfig().Idempotency.CommittedTTL

	first := wantJob(t, right.submit(t, key, invoiceBody), http.StatusCreated)
	advance(ttl - 10*time.Second)
	// The skewed gate learns of the key with 10s left on the ledger's entry.
	replay := skewed.submit(t, key, invoiceBody)
	if j := wantJob(t, replay, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("replay answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, replay, api.HeaderReplayed, "true")
	// Within those 10s the skewed gate replays from its cache.
	advance(5 * time.Second)
	n := mgr.Submits()
	if j := wantJob(t, skewed.submit(t, key, invoiceBody), http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("cached replay answered job %s", j.JobID)
	}
	if mgr.Submits() != n {
		t.Fatal("the replay within the entry's lifetime was not answered from the cache")
	}
	// Past the ledger's expiry the skewed gate asks the ledger again instead of
	// replaying from its cache (the job ID is derived from tenant, key and
	// fingerprint, so the ledger's answer names the same job: what matters
	// is who answered).
	advance(6 * time.Second)
	wantJob(t, skewed.submit(t, key, invoiceBody), http.StatusCreated)
	if mgr.Submits() != n+1 {
		t.Fatalf("manager saw %d submissions, want %d", mgr.Submits(), n+1)
	}
}
