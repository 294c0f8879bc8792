package gate

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// TestContractOutcomes walks the outcome table of docs/api.md ("Submit a
// job", "Outcomes") row by row, through gates that share one fake manager. The other
// tests of this package look at each row (and the errors around them) in more
// detail.
func TestContractOutcomes(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now, Config: func(c *manager.Config) {
		c.AllowedJobTypes = []string{"send_invoice", "more"} // "invalid_kind" is refused
		c.MaxQueuedJobs = 1                                  // the first job fills the datacenter
	}})
	withClock := func(cfg *Config, deps *Deps) { deps.Now = clock.Now }
	tg := startGate(t, []string{addr}, withClock)
	noWait := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		withClock(cfg, deps)
		cfg.Idempotency.WaitForPending = false
	})
	shortWait := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		withClock(cfg, deps)
		cfg.Idempotency.PendingWaitTimeout = 100 * time.Millisecond
		cfg.ForwardTimeout = 300 * time.Millisecond
	})

	var admitted result
	t.Run("first time: admitted", func(t *testing.T) {
		admitted = tg.submit(t, skey(1), invoiceBody)
		job := wantJob(t, admitted, http.StatusCreated)
		wantHeader(t, admitted, api.HeaderLocation, "/v1/jobs/"+job.JobID)
		wantHeader(t, admitted, api.HeaderReplayed, "false")
	})

	var rejected422, rejected429 result
	t.Run("first time: rejected (validation)", func(t *testing.T) {
		rejected422 = tg.submit(t, skey(2), `{"type":"invalid_kind"}`)
		p := wantProblem(t, rejected422, http.StatusUnprocessableEntity, api.CodeJobRejected)
		if p.Reason != "unknown_job_type" {
			t.Fatalf("reason %q", p.Reason)
		}
		wantNoHeader(t, rejected422, api.HeaderRetryAfter)
	})
	t.Run("first time: rejected (capacity)", func(t *testing.T) {
		rejected429 = tg.submit(t, skey(3), `{"type":"more"}`)
		p := wantProblem(t, rejected429, http.StatusTooManyRequests, api.CodeJobRejected)
		if p.Reason != "capacity" {
			t.Fatalf("reason %q", p.Reason)
		}
		wantHeader(t, rejected429, api.HeaderRetryAfter, "60")
	})

	t.Run("duplicate of COMMITTED or REJECTED", func(t *testing.T) {
		clock.Advance(15 * time.Second)
		for _, c := range []struct {
			key, body  string
			first      result
			retryAfter string
		}{
			{skey(1), invoiceBodyReordered, admitted, ""},
			{skey(2), `{"type":"invalid_kind"}`, rejected422, ""},
			{skey(3), `{"type":"more"}`, rejected429, "45"},
		} {
			res := tg.submit(t, c.key, c.body)
			if res.status != c.first.status || !bytes.Equal(res.body, c.first.body) {
				t.Fatalf("replay of %s: %s, want the original %s", c.key, res, c.first)
			}
			wantHeader(t, res, api.HeaderReplayed, "true")
			if c.retryAfter != "" {
				wantHeader(t, res, api.HeaderRetryAfter, c.retryAfter)
			}
		}
		res := noWait.submit(t, skey(1), invoiceBody) // through another gate: the ledger replays
		if !bytes.Equal(res.body, admitted.body) {
			t.Fatalf("another gate's replay differs: %s", res)
		}
		wantHeader(t, res, api.HeaderReplayed, "true")
	})

	t.Run("duplicate while PENDING", func(t *testing.T) {
		mgr.finishJobs(t) // room for the job of skey(4)
		waiting := make(chan struct{}, 1)
		tg.testHookWaiting = func() { waiting <- struct{}{} }
		defer func() { tg.testHookWaiting = nil }()
		reserved, release := holdInFlight(t, mgr)
		owner := goSubmit(tg, skey(4), invoiceBody)
		<-reserved

		// Waiting disabled: 409 at once (from the manager, through noWait).
		res := noWait.submit(t, skey(4), invoiceBody)
		wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
		wantHeader(t, res, api.HeaderRetryAfter, "1")
		// Waiting timed out: 409 (here the manager's 100ms wait, through
		// shortWait; TestSubmitPendingWaitTimeout times out in the gate).
		res = shortWait.submit(t, skey(4), invoiceBody)
		wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
		wantHeader(t, res, api.HeaderRetryAfter, "1")
		// Waiting enabled: the original's outcome, as a replay.
		dup := goSubmit(tg, skey(4), invoiceBody)
		<-waiting
		release()
		first, second := <-owner, <-dup
		wantJob(t, first, http.StatusCreated)
		wantHeader(t, second, api.HeaderReplayed, "true")
		if !bytes.Equal(first.body, second.body) {
			t.Fatalf("waiter got %s, want %s", second, first)
		}
	})

	t.Run("same key, different fingerprint", func(t *testing.T) {
		res := tg.submit(t, skey(1), `{"type":"send_invoice","payload":{"order":"ORD-999"}}`)
		wantProblem(t, res, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		if bytes.Contains(res.body, []byte("job_id")) {
			t.Fatalf("422 carries a job: %s", res)
		}
	})

	t.Run("expired key at or below the committed sequence", func(t *testing.T) {
		clock.Advance(301 * time.Second)
		jobs := mgr.Jobs()
		res := tg.submit(t, skey(1), invoiceBody)
		wantProblem(t, res, http.StatusConflict, api.CodeIdempotencyKeyExpired)
		if mgr.Jobs() != jobs {
			t.Fatal("the expired key was executed again")
		}
	})

	t.Run("no leader reachable: 503, not cached", func(t *testing.T) {
		mgr.finishJobs(t) // room for the job of skey(5)
		mgr.SetLeader(false)
		res := shortWait.submit(t, skey(5), invoiceBody)
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		wantHeader(t, res, api.HeaderRetryAfter, "1")
		mgr.SetLeader(true)
		ok := shortWait.submit(t, skey(5), invoiceBody)
		wantJob(t, ok, http.StatusCreated)
		wantHeader(t, ok, api.HeaderReplayed, "false")
	})

	t.Run("every error is a problem", func(t *testing.T) {
		for _, res := range []result{
			tg.submit(t, "", invoiceBody),
			tg.submit(t, "c:1:bad", invoiceBody),
			tg.submit(t, skey(6), `{"type":"x","nope":1}`),
			tg.submit(t, skey(6), `{"type":"x","payload":"`+strings.Repeat("x", DefaultMaxBodyBytes)+`"}`),
			tg.get(t, "/v1/jobs/unknown"),
			tg.get(t, "/v1/idempotency-keys/unknown"),
			tg.get(t, "/nowhere"),
			tg.do(t, http.MethodDelete, "/v1/jobs", nil),
		} {
			if ct := res.header.Get("Content-Type"); ct != api.ContentTypeProblem || res.status < 400 {
				t.Fatalf("not a problem: %s", res)
			}
		}
	})
}
