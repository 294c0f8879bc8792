package gate

import (
	"bytes"
	"net/http"
	"slices"
	"testing"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// TestWaiterAnswersAsTheOwner walks the outcomes a duplicate that waited on
// a PENDING entry of the same gate can get (docs/api.md, "Concurrent
// duplicates on one gate coalesce"): a stored outcome (201, 422 and 429
// job_rejected) as a replay, byte for byte, with every header of the
// owner's answer (Location, Content-Type, Content-Length,
// Idempotency-Expires-At, a 429's Retry-After) and Idempotent-Replayed:
// true; any other answer as it is, with the owner's headers (Retry-After
// included) and no Idempotent-Replayed.
func TestWaiterAnswersAsTheOwner(t *testing.T) {
	refusal := func(code rpc.Code) func() error {
		return func() error { return rpc.Errorf(code, "refused (test)") }
	}
	for _, c := range []struct {
		name   string
		body   string
		fill   bool         // submit one job first: the datacenter is full (429 capacity)
		answer func() error // the held submission's answer; nil: the manager's
		status int
		code   api.Code // "" for 201
		retry  string   // the Retry-After both answers carry, "" for none
	}{
		{name: "committed", body: invoiceBody, status: http.StatusCreated},
		{name: "rejected validation", body: `{"type":"invalid_kind"}`, status: http.StatusUnprocessableEntity, code: api.CodeJobRejected},
		{name: "rejected capacity", body: `{"type":"more"}`, fill: true, status: http.StatusTooManyRequests, code: api.CodeJobRejected, retry: "60"},
		{name: "ledger full", body: invoiceBody, answer: refusal(rpc.CodeLedgerFull), status: http.StatusServiceUnavailable, code: api.CodeUnavailable, retry: "10"},
		{name: "watermarks full", body: invoiceBody, answer: refusal(rpc.CodeWatermarksFull), status: http.StatusServiceUnavailable, code: api.CodeUnavailable, retry: "10"},
		{name: "outbox full", body: invoiceBody, answer: refusal(rpc.CodeOutboxFull), status: http.StatusServiceUnavailable, code: api.CodeOutboxFull, retry: "10"},
		{name: "tenant quota", body: invoiceBody, answer: refusal(rpc.CodeTenantQuota), status: http.StatusTooManyRequests, code: api.CodeTenantQuotaExceeded, retry: "10"},
		{name: "manager bug", body: invoiceBody, answer: refusal(rpc.CodeInvalid), status: http.StatusInternalServerError, code: api.CodeInternal},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			mgr, addr := startManager(t, managertest.Options{Now: clock.Now, Config: func(mc *manager.Config) {
				mc.AllowedJobTypes = []string{"send_invoice", "more"}
				mc.MaxQueuedJobs = 1
			}})
			tg := startGate(t, []string{addr}, func(_ *Config, deps *Deps) { deps.Now = clock.Now })
			if c.fill {
				wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
			}
			a, b := ownerAndWaiter(tg, mgr, skey(2), c.body, c.answer)

			if c.code == "" {
				wantJob(t, a, c.status)
				wantJob(t, b, c.status)
			} else {
				wantProblem(t, a, c.status, c.code)
				wantProblem(t, b, c.status, c.code)
			}
			if !bytes.Equal(a.body, b.body) {
				t.Fatalf("the waiter's body differs from the owner's:\n%s\n%s", a.body, b.body)
			}
			replayable := c.code == "" || c.code == api.CodeJobRejected
			if replayable {
				wantHeader(t, a, api.HeaderReplayed, "false")
				wantHeader(t, b, api.HeaderReplayed, "true")
				if a.header.Get(api.HeaderIdempotencyExpiresAt) == "" {
					t.Fatalf("a stored outcome without %s: %s", api.HeaderIdempotencyExpiresAt, a)
				}
			} else {
				for _, res := range []result{a, b} {
					wantNoHeader(t, res, api.HeaderReplayed)
					wantNoHeader(t, res, api.HeaderIdempotencyExpiresAt)
				}
			}
			if c.code == "" {
				wantHeader(t, a, api.HeaderLocation, "/v1/jobs/"+wantJob(t, a, c.status).JobID)
			} else {
				wantNoHeader(t, a, api.HeaderLocation)
			}
			if c.retry != "" {
				wantHeader(t, a, api.HeaderRetryAfter, c.retry)
			} else {
				wantNoHeader(t, a, api.HeaderRetryAfter)
			}
			for _, h := range []http.Header{a.header, b.header} {
				h.Del("Date")
				h.Del(api.HeaderReplayed)
			}
			names := func(h http.Header) []string {
				var out []string
				for k := range h {
					out = append(out, k)
				}
				slices.Sort(out)
				return out
			}
			if !slices.Equal(names(a.header), names(b.header)) {
				t.Fatalf("the waiter's headers %v differ from the owner's %v", b.header, a.header)
			}
			for k, v := range a.header {
				if !slices.Equal(v, b.header[k]) {
					t.Fatalf("%s: the waiter's %q, the owner's %q", k, b.header[k], v)
				}
			}
		})
	}
}
