package gate

import (
	"fmt"
	"net/http"
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
