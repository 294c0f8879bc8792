package gate

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestSubmitCacheFullOfPendingStillOneJob: a gate whose cache holds one
// entry, that entry PENDING (its submission in flight at the ledger), takes
// another key by evicting it; a duplicate of the evicted key then misses the
// cache and is forwarded, and the ledger answers it with the first one's
// job: the same job ID, one job per key.
func TestSubmitCacheFullOfPendingStillOneJob(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.MaxEntries = 1 })
	inFlight, release := holdInFlight(t, mgr)
	owner := goSubmit(tg, skey(1), invoiceBody)
	<-inFlight

	// The cache is full of one PENDING entry: the next key evicts it.
	wantJob(t, tg.submit(t, skey(2), invoiceBody), http.StatusCreated)
	if st := tg.cache.Stats(); st.PendingEvictions != 1 {
		t.Fatalf("cache stats %+v, want one PENDING eviction", st)
	}
	dup := goSubmit(tg, skey(1), invoiceBody)
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return mgr.Submits() == 3, fmt.Sprintf("the duplicate to reach the manager (%d submissions)", mgr.Submits())
	})
	release()
	first, second := wantJob(t, <-owner, http.StatusCreated), <-dup
	if j := wantJob(t, second, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("the duplicate answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, second, api.HeaderReplayed, "true")
	if n := mgr.Jobs(); n != 2 {
		t.Fatalf("the ledger holds %d jobs, want 2 (one per key)", n)
	}
}

// TestSubmitOwnerHangsUpWaiterGetsTheJob: the client of the request that
// forwards a key hangs up while its submission is at the manager; the forward
// goes on, the duplicate waiting on its PENDING entry gets the job as a
// replay, the outcome is cached, and the ledger holds one job.
func TestSubmitOwnerHangsUpWaiterGetsTheJob(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	waiting := make(chan struct{}, 1)
	tg.testHookWaiting = func() { waiting <- struct{}{} }
	arrived, release := holdFirstSubmit(t, mgr)

	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.URL+"/v1/jobs", strings.NewReader(invoiceBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderIdempotencyKey, skey(1))
	ownerDone := make(chan error, 1)
	go func() {
		resp, err := tg.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		ownerDone <- err
	}()
	<-arrived
	dup := goSubmit(tg, skey(1), invoiceBody)
	<-waiting
	hangUp()
	if err := <-ownerDone; err == nil {
		t.Fatal("the owner's request was answered although it was held at the manager")
	}
	release()
	res := <-dup
	job := wantJob(t, res, http.StatusCreated)
	wantHeader(t, res, api.HeaderReplayed, "true")
	n := mgr.Submits()
	again := tg.submit(t, skey(1), invoiceBody)
	if j := wantJob(t, again, http.StatusCreated); j.JobID != job.JobID {
		t.Fatalf("the next duplicate answered job %s, want %s", j.JobID, job.JobID)
	}
	if mgr.Submits() != n || mgr.Jobs() != 1 {
		t.Fatalf("manager saw %d submissions (want %d: the outcome was cached) and holds %d jobs (want 1)", mgr.Submits(), n, mgr.Jobs())
	}
}

// TestSubmitRetryIsNotRefusedByAnotherBodyPending: a key committed through
// the gate leaves its cache (evicted); a request reusing the key with another
// body is then in flight, PENDING in the cache. A retry of the original
// request meanwhile is the key's first request, so it must get its job, not
// 422 idempotency_key_reused from the PENDING entry of a request the ledger
// will refuse: the gate does not know which of two bodies holds the key until
// one is stored, the ledger does.
func TestSubmitRetryIsNotRefusedByAnotherBodyPending(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.MaxEntries = 1 })
	first := wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(2), invoiceBody), http.StatusCreated) // evicts skey(1)

	arrived, release := holdFirstSubmit(t, mgr)
	const other = `{"type":"send_invoice","payload":{"order":"ORD-124"}}`
	reuse := goSubmit(tg, skey(1), other)
	<-arrived // the other body's entry is PENDING in the cache

	retry := tg.submit(t, skey(1), invoiceBody)
	release()
	if j := wantJob(t, retry, http.StatusCreated); j.JobID != first.JobID {
		t.Fatalf("the retry answered job %s, want %s", j.JobID, first.JobID)
	}
	wantHeader(t, retry, api.HeaderReplayed, "true")
	wantProblem(t, <-reuse, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	if n := mgr.Jobs(); n != 2 {
		t.Fatalf("the ledger holds %d jobs, want 2 (one per key)", n)
	}
}
