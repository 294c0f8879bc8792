package gate

import (
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// TestCancelOverTenantQuotaIsNotKept: a cancel the ledger refuses because
// the tenant holds its share (429 tenant_quota_exceeded: nothing recorded,
// retry later with the same key) is not kept by the gate as the key's
// answer: once room is back, the same key cancels the job, instead of the
// refusal being replayed for the gate's ten minutes.
func TestCancelOverTenantQuotaIsNotKept(t *testing.T) {
	ledgerClock := newFakeClock()
	const ttl = time.Minute
	_, addr := startManager(t, managertest.Options{Now: ledgerClock.Now, Config: func(c *manager.Config) {
		c.Idempotency.CommittedTTL = ttl
		// The submission's entry and job fit; a second entry (the cancel's
		// key) does not, until the submission's entry is due.
		c.LedgerTenantMaxBytes = 1200
	}})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.CleanupInterval = 30 * time.Second })
	job := wantJob(t, tg.submit(t, skey(1), `{"type":"email"}`), http.StatusCreated)
	cancel := "/v1/jobs/" + job.JobID + "/cancel"
	key := []string{api.HeaderIdempotencyKey, skey(2)}

	refused := tg.post(t, cancel, "", key...)
	wantProblem(t, refused, http.StatusTooManyRequests, api.CodeTenantQuotaExceeded)
	wantNoHeader(t, refused, api.HeaderReplayed)
	// Nothing was recorded: room comes back as expiry frees it, as for a
	// submission's 429 tenant_quota_exceeded.
	wantHeader(t, refused, api.HeaderRetryAfter, "30")

	// The submission's entry is due: the ledger makes room for the cancel's.
	ledgerClock.Advance(ttl + time.Second)
	again := tg.post(t, cancel, "", key...)
	if j := wantJob(t, again, http.StatusOK); j.State != api.JobStatusCancelled {
		t.Fatalf("cancel once room is back: %s", again.body)
	}
	wantNoHeader(t, again, api.HeaderReplayed)
}

// TestCancelOnAFullLedgerRetriesAfterTheCleanupInterval: a cancel whose key
// the datacenter's ledger has no room for (IDEMPOTENCY_LEDGER_MAX_ENTRIES)
// is 503 unavailable with a Retry-After of IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS,
// as a submission refused for a full ledger is (docs/api.md): asking again
// in a second cannot help.
func TestCancelOnAFullLedgerRetriesAfterTheCleanupInterval(t *testing.T) {
	_, addr := startManager(t, managertest.Options{Config: func(c *manager.Config) { c.LedgerMaxEntries = 1 }})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.CleanupInterval = 45 * time.Second })
	job := wantJob(t, tg.submit(t, skey(1), `{"type":"email"}`), http.StatusCreated)

	refused := tg.post(t, "/v1/jobs/"+job.JobID+"/cancel", "", api.HeaderIdempotencyKey, skey(2))
	wantProblem(t, refused, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantHeader(t, refused, api.HeaderRetryAfter, "45")
}
