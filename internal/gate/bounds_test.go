package gate

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// TestLedgerRefusalsMapToRetryableProblems: the ledger's refusals to record a
// new key are answered 503 (watermark table full, ledger full) or 429 (the
// tenant over its share), with Retry-After, and are never cached.
func TestLedgerRefusalsMapToRetryableProblems(t *testing.T) {
	for _, tc := range []struct {
		code   rpc.Code
		status int
		want   api.Code
	}{
		{rpc.CodeWatermarksFull, http.StatusServiceUnavailable, api.CodeUnavailable},
		{rpc.CodeLedgerFull, http.StatusServiceUnavailable, api.CodeUnavailable},
		{rpc.CodeTenantQuota, http.StatusTooManyRequests, api.CodeTenantQuotaExceeded},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			mgr, addr := startManager(t, managertest.Options{})
			tg := startGate(t, []string{addr}, nil)
			var refuse atomic.Bool
			refuse.Store(true)
			mgr.SetSubmitHook(func(context.Context, *rpcpb.SubmitRequest) error {
				if refuse.Load() {
					return rpc.Errorf(tc.code, "refused")
				}
				return nil
			})
			r := tg.submit(t, skey(1), invoiceBody)
			wantProblem(t, r, tc.status, tc.want)
			if r.header.Get(api.HeaderRetryAfter) == "" {
				t.Fatalf("%s: no Retry-After", tc.code)
			}
			refuse.Store(false)
			wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
		})
	}
}
