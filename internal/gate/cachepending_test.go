package gate

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
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

// TestSubmitOutcomeOverCacheBytesAnsweredNotCached guards
// IDEMPOTENCY_MAX_BYTES at the gate (docs/configuration.md): an outcome
// larger than the cache's byte bound is answered to its request and to the
// duplicate waiting on it, byte for byte, but not cached, and it displaces
// nothing: an outcome cached before is still a hit, and the next duplicate
// of the large one is forwarded and replayed by the ledger, the same job.
func TestSubmitOutcomeOverCacheBytesAnsweredNotCached(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.MaxBodyBytes = 2 << 20
		cfg.CacheMaxBytes = 1 << 20 // the least IDEMPOTENCY_MAX_BYTES
	})
	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	big := `{"type":"send_invoice","payload":"` + strings.Repeat("x", 1<<20) + `"}`
	a, b := ownerAndWaiter(tg, mgr, skey(2), big, nil)
	job := wantJob(t, a, http.StatusCreated)
	wantJob(t, b, http.StatusCreated)
	wantHeader(t, b, api.HeaderReplayed, "true")
	if !bytes.Equal(a.body, b.body) {
		t.Fatal("the waiter's body differs from the owner's")
	}
	if st := tg.cache.Stats(); st.NotCached != 1 || st.Evictions != 0 || tg.cache.Len() != 1 {
		t.Fatalf("cache stats %+v, %d entries: want the large outcome not cached, nothing evicted", st, tg.cache.Len())
	}

	forwards := mgr.Submits()
	wantHeader(t, tg.submit(t, skey(1), invoiceBody), api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != forwards {
		t.Fatal("the outcome cached before the large one was forwarded again")
	}
	again := tg.submit(t, skey(2), big)
	if j := wantJob(t, again, http.StatusCreated); j.JobID != job.JobID {
		t.Fatalf("the duplicate answered job %s, want %s", j.JobID, job.JobID)
	}
	wantHeader(t, again, api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != forwards+1 {
		t.Fatalf("%d submissions reached the manager for the duplicate, want 1 (the outcome was not cached)", n-forwards)
	}
	if n := mgr.Jobs(); n != 2 {
		t.Fatalf("the ledger holds %d jobs, want 2", n)
	}
}

// TestSubmitOwnerOverrunningPendingTTLStillOneJob guards
// IDEMPOTENCY_PENDING_TTL_SECONDS at the gate (docs/configuration.md): an
// owner still being admitted when its PENDING entry expires no longer
// holds the key, so the next duplicate becomes an owner and is forwarded;
// the ledger answers it with the first one's job, which is then cached
// (the next duplicate a hit). One job.
func TestSubmitOwnerOverrunningPendingTTLStillOneJob(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(_ *Config, deps *Deps) { deps.Now = clock.Now })
	inFlight, release := holdInFlight(t, mgr)
	owner := goSubmit(tg, skey(1), invoiceBody)
	<-inFlight

	clock.Advance(tg.cfg.Idempotency.PendingTTL)
	dup := goSubmit(tg, skey(1), invoiceBody)
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return mgr.Submits() == 2, fmt.Sprintf("the duplicate to reach the manager (%d submissions)", mgr.Submits())
	})
	release()
	first, second := wantJob(t, <-owner, http.StatusCreated), <-dup
	if j := wantJob(t, second, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("the duplicate answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, second, api.HeaderReplayed, "true")
	if st := tg.cache.Stats(); st.Misses != 2 || st.Expirations != 1 || st.Waits != 0 {
		t.Fatalf("cache stats %+v, want two owners, the first's entry expired", st)
	}
	hit := tg.submit(t, skey(1), invoiceBody)
	if j := wantJob(t, hit, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("the hit answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, hit, api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("%d submissions reached the manager, want 2 (the last one a hit)", n)
	}
	if n := mgr.Jobs(); n != 1 {
		t.Fatalf("the ledger holds %d jobs, want 1", n)
	}
}
