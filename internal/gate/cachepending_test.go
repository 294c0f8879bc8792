package gate

import (
	"net/http"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// TestSubmitReuseWhileOwnerPendingNoWait guards docs/api.md's row for a key
// in flight at the gate with another body: with waiting disabled, the
// reuse is forwarded, uncached, and answered 409 request_in_progress while
// the key's owner is being admitted; the owner's entry is untouched (its
// job is cached), and the reuse's retry is then 422 idempotency_key_reused
// from the cache, without a forward.
func TestSubmitReuseWhileOwnerPendingNoWait(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.WaitForPending = false })
	inFlight, release := holdInFlight(t, mgr)
	owner := goSubmit(tg, skey(1), invoiceBody)
	<-inFlight

	const other = `{"type":"send_invoice","payload":{"order":"ORD-124"}}`
	res := tg.submit(t, skey(1), other)
	wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	release()
	job := wantJob(t, <-owner, http.StatusCreated)

	forwards := mgr.Submits()
	wantProblem(t, tg.submit(t, skey(1), other), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	dup := tg.submit(t, skey(1), invoiceBody)
	if j := wantJob(t, dup, http.StatusCreated); j.JobID != job.JobID {
		t.Fatalf("the owner's duplicate answered job %s, want %s", j.JobID, job.JobID)
	}
	wantHeader(t, dup, api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != forwards {
		t.Fatalf("%d more submissions reached the manager, want none (both answered from the cache)", n-forwards)
	}
	if n := mgr.Jobs(); n != 1 {
		t.Fatalf("the ledger holds %d jobs, want 1", n)
	}
}
