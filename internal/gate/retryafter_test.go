package gate

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestTenantQuotaRetryAfterIsTheCleanupInterval: a tenant over its share of
// the ledger is a 429 like a capacity rejection, but nothing was recorded,
// so its Retry-After is IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS (when expiry
// frees room, docs/api.md), not the seconds left on an entry it does not
// have.
func TestTenantQuotaRetryAfterIsTheCleanupInterval(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.CleanupInterval = 30 * time.Second })
	mgr.SetSubmitHook(func(context.Context, *rpcpb.SubmitRequest) error {
		return rpc.Errorf(rpc.CodeTenantQuota, "refused")
	})
	r := tg.submit(t, skey(1), invoiceBody)
	wantProblem(t, r, http.StatusTooManyRequests, api.CodeTenantQuotaExceeded)
	wantHeader(t, r, api.HeaderRetryAfter, "30")
}

// TestCapacityRetryAfterIgnoresGateClockSkew: the Retry-After of a capacity
// rejection (429), first answered or replayed from the cache, is the time
// left on the ledger's REJECTED entry whatever the gate's wall clock says:
// a gate an hour behind the ledger does not tell its client to come back in
// an hour, nor one an hour ahead to come back at once.
func TestCapacityRetryAfterIgnoresGateClockSkew(t *testing.T) {
	ledgerClock := newFakeClock()
	_, addr := startManager(t, managertest.Options{Now: ledgerClock.Now, Config: func(c *manager.Config) { c.MaxQueuedJobs = 1 }})
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		gateClock := testutil.NewClock(ledgerClock.Now().Add(skew))
		tg := startGate(t, []string{addr}, func(_ *Config, deps *Deps) { deps.Now = gateClock.Now })
		if skew < 0 {
			wantJob(t, tg.submit(t, "fill", invoiceBody), http.StatusCreated)
		}
		key := "over-" + strconv.FormatBool(skew < 0)
		rejectedTTL := DefaultConfig().Idempotency.RejectedTTL
		r := tg.submit(t, key, invoiceBody)
		wantProblem(t, r, http.StatusTooManyRequests, api.CodeJobRejected)
		wantHeader(t, r, api.HeaderRetryAfter, strconv.Itoa(int(rejectedTTL/time.Second)))
		// Replayed from the cache 10s later.
		ledgerClock.Advance(10 * time.Second)
		gateClock.Advance(10 * time.Second)
		r = tg.submit(t, key, invoiceBody)
		wantProblem(t, r, http.StatusTooManyRequests, api.CodeJobRejected)
		wantHeader(t, r, api.HeaderReplayed, "true")
		wantHeader(t, r, api.HeaderRetryAfter, strconv.Itoa(int((rejectedTTL-10*time.Second)/time.Second)))
	}
}
