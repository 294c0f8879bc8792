package gate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

const invoiceBody = `{"type": "send_invoice", "payload": {"order": "ORD-123", "amount": 5}, "datacenters": ["dc1"]}`

// The same request, members and whitespace reordered: the same fingerprint.
const invoiceBodyReordered = `{ "datacenters":["dc1"],"payload":{"amount":5,"order":"ORD-123"},
	"type":"send_invoice" }`

// TestSubmitAdmittedThenReplayed: the first submission is 201 with Location and
// Idempotent-Replayed: false; a duplicate (whatever its key order and
// whitespace) gets the byte-identical body with Idempotent-Replayed: true, and
// the manager sees one submission.
func TestSubmitAdmittedThenReplayed(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)

	first := tg.submit(t, skey(1), invoiceBody)
	job := wantJob(t, first, http.StatusCreated)
	wantHeader(t, first, api.HeaderLocation, "/v1/jobs/"+job.JobID)
	wantHeader(t, first, api.HeaderReplayed, "false")
	if job.Type != "send_invoice" || job.IdempotencyKey != skey(1) {
		t.Fatalf("job %+v", job)
	}
	if got := string(job.Payload); got != `{"amount":5,"order":"ORD-123"}` {
		t.Fatalf("payload %s, want the canonical form", got)
	}
	if len(job.Datacenters) != 1 || job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v", job.Datacenters)
	}

	for _, body := range []string{invoiceBody, invoiceBodyReordered} {
		again := tg.submit(t, skey(1), body)
		wantStatus(t, again, http.StatusCreated)
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay body differs:\n%s\n%s", again.body, first.body)
		}
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, api.HeaderLocation, "/v1/jobs/"+job.JobID)
		wantHeader(t, again, "Content-Type", api.ContentTypeJSON)
	}
	if n := mgr.Submits(); n != 1 {
		t.Fatalf("manager saw %d submissions, want 1", n)
	}
}

// TestSubmitIgnoresContentType: the README's curl -d sends
// application/x-www-form-urlencoded; the body is JSON all the same.
func TestSubmitIgnoresContentType(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	for i, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "", "application/json; charset=utf-8"} {
		var hdr []string
		if ct != "" {
			hdr = []string{"Content-Type", ct}
		}
		res := tg.submit(t, skey(100+i), `{"type":"demo","payload":{"n":1}}`, hdr...)
		wantJob(t, res, http.StatusCreated)
	}
}

// TestSubmitKeyReused: the same key with another body is 422
// idempotency_key_reused, never the other request's result — from the gate's
// cache, and from the ledger through a gate that never saw the key.
func TestSubmitKeyReused(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	other := startGate(t, []string{addr}, nil)

	first := tg.submit(t, skey(1), invoiceBody)
	job := wantJob(t, first, http.StatusCreated)
	for _, g := range []*testGate{tg, other} {
		res := g.submit(t, skey(1), `{"type":"send_invoice","payload":{"order":"ORD-124"}}`)
		p := wantProblem(t, res, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		if strings.Contains(string(res.body), job.JobID) {
			t.Fatalf("422 leaks the other request's job: %+v", p)
		}
		wantNoHeader(t, res, api.HeaderReplayed)
	}
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("manager saw %d submissions, want 2 (one per gate cache miss)", n)
	}
	// The original is untouched.
	again := tg.submit(t, skey(1), invoiceBody)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay after reuse: %s", again)
	}
}

// TestSubmitRejected: validation rejections are 422 job_rejected with a reason,
// capacity rejections 429 with a Retry-After that counts down to the REJECTED
// entry's expiry; both replay byte for byte; after the expiry the key is judged
// afresh.
func TestSubmitRejected(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now, Config: func(c *manager.Config) {
		c.MaxQueuedJobs = 1
		c.AllowedJobTypes = []string{"fits", "too_many"} // "forbidden" is refused
	}})
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })

	t.Run("validation", func(t *testing.T) {
		res := tg.submit(t, skey(1), `{"type":"forbidden"}`)
		p := wantProblem(t, res, http.StatusUnprocessableEntity, api.CodeJobRejected)
		if p.Reason != "unknown_job_type" || p.Detail != `job type "forbidden" is not accepted in datacenter dc1` {
			t.Fatalf("problem %+v", p)
		}
		wantHeader(t, res, api.HeaderReplayed, "false")
		wantNoHeader(t, res, api.HeaderRetryAfter)
		again := tg.submit(t, skey(1), `{"type":"forbidden"}`)
		wantStatus(t, again, http.StatusUnprocessableEntity)
		if !bytes.Equal(again.body, res.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, res.body)
		}
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, "Content-Type", api.ContentTypeProblem)
	})

	t.Run("capacity", func(t *testing.T) {
		wantJob(t, tg.submit(t, skey(2), `{"type":"fits"}`), http.StatusCreated)
		res := tg.submit(t, skey(3), `{"type":"too_many"}`)
		p := wantProblem(t, res, http.StatusTooManyRequests, api.CodeJobRejected)
		if p.Reason != "capacity" {
			t.Fatalf("reason %q, want capacity", p.Reason)
		}
		wantHeader(t, res, api.HeaderRetryAfter, "60") // IDEMPOTENCY_REJECTED_TTL_SECONDS
		wantHeader(t, res, api.HeaderReplayed, "false")

		clock.Advance(20 * time.Second)
		again := tg.submit(t, skey(3), `{"type":"too_many"}`)
		wantStatus(t, again, http.StatusTooManyRequests)
		if !bytes.Equal(again.body, res.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, res.body)
		}
		wantHeader(t, again, api.HeaderRetryAfter, "40")
		wantHeader(t, again, api.HeaderReplayed, "true")

		// After the Retry-After, the key is judged afresh.
		clock.Advance(40 * time.Second)
		mgr.finishJobs(t) // the job of skey(2) finished: room for one more
		fresh := tg.submit(t, skey(3), `{"type":"too_many"}`)
		wantJob(t, fresh, http.StatusCreated)
		wantHeader(t, fresh, api.HeaderReplayed, "false")
	})
}

// TestSubmitKeyMissingOrInvalid: no header is 400 idempotency_key_missing;
// malformed keys are 400 idempotency_key_invalid with a detail naming the part;
// nothing reaches the manager.
func TestSubmitKeyMissingOrInvalid(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)

	res := tg.submit(t, "", invoiceBody)
	wantProblem(t, res, http.StatusBadRequest, api.CodeIdempotencyKeyMissing)

	tests := []struct {
		name   string
		values []string
		detail string // a part of the detail
	}{
		{"empty", []string{""}, "must not be empty"},
		{"space", []string{"a b"}, "visible ASCII"},
		{"too long", []string{strings.Repeat("k", 256)}, "at most 255"},
		{"bad nonce", []string{"c:1:xyz"}, "nonce"},
		{"uppercase nonce", []string{"c:1:A1B2C3D4E5F6A7B8"}, "nonce"},
		{"bad sequence", []string{"c:-1:" + nonce}, "sequence"},
		{"sequence with plus", []string{"c:+1:" + nonce}, "sequence"},
		{"bad client_id", []string{"a/b:1:" + nonce}, "client_id"},
		{"empty client_id", []string{":1:" + nonce}, "client_id"},
		{"malformed sf-string", []string{`"abc`}, "sf-string"},
		{"sf-string with a bad escape", []string{`"a\qb"`}, "sf-string"},
		{"sf-string with characters after it", []string{`"a"b`}, "sf-string"},
		{"tab", []string{"a\tb"}, "control character 0x09"},
		{"non-ASCII", []string{"h\u00e9"}, "non-ASCII"},
		{"two headers", []string{skey(1), skey(2)}, "exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			for _, v := range tt.values {
				hdr = append(hdr, api.HeaderIdempotencyKey, v)
			}
			res := tg.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(invoiceBody), hdr...)
			p := wantProblem(t, res, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Fatalf("detail %q does not name %q", p.Detail, tt.detail)
			}
		})
	}
	if n := mgr.Submits(); n != 0 {
		t.Fatalf("manager saw %d submissions, want 0", n)
	}
}

// TestSubmitSFStringKey: a key sent as an RFC 8941 sf-string is the same key
// without its quotes.
func TestSubmitSFStringKey(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	first := tg.submit(t, `"`+skey(7)+`"`, invoiceBody)
	job := wantJob(t, first, http.StatusCreated)
	if job.IdempotencyKey != skey(7) {
		t.Fatalf("idempotency_key %q, want the key without quotes", job.IdempotencyKey)
	}
	bare := tg.submit(t, skey(7), invoiceBody)
	wantHeader(t, bare, api.HeaderReplayed, "true")
	if !bytes.Equal(bare.body, first.body) {
		t.Fatalf("bare key got another answer: %s", bare)
	}
	// An opaque key with an escaped quote.
	quoted := tg.submit(t, `"op\"aque"`, invoiceBody)
	job = wantJob(t, quoted, http.StatusCreated)
	if job.IdempotencyKey != `op"aque` {
		t.Fatalf("idempotency_key %q", job.IdempotencyKey)
	}
}

// TestSubmitInvalidRequest: unknown fields, invalid JSON, a missing or bad type
// are 400 invalid_request with a detail naming the field; nothing is forwarded.
func TestSubmitInvalidRequest(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	tests := []struct {
		name, body, detail string
	}{
		{"unknown field", `{"type":"x","priority":1}`, `"priority"`},
		{"bad JSON", `{"type":`, "invalid JSON"},
		{"not JSON", `type=x`, "invalid JSON"},
		{"empty body", ``, "invalid JSON"},
		{"missing type", `{"payload":{"a":1}}`, `"type" is required`},
		{"type not a string", `{"type":7}`, `"type"`},
		{"type with a space", `{"type":"send invoice"}`, `"type"`},
		{"array body", `[{"type":"x"}]`, "JSON object"},
		{"trailing data", `{"type":"x"} {}`, "JSON"},
		{"duplicate member", `{"type":"x","type":"y"}`, `"type"`},
		{"duplicate key in payload", `{"type":"x","payload":{"a":1,"a":2}}`, "duplicate"},
		{"empty datacenters", `{"type":"x","datacenters":[]}`, `"datacenters"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tg.submit(t, skey(1), tt.body)
			p := wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Fatalf("detail %q does not contain %q", p.Detail, tt.detail)
			}
		})
	}
	if n := mgr.Submits(); n != 0 {
		t.Fatalf("manager saw %d submissions, want 0", n)
	}
	// An invalid body caches nothing: the key is still free.
	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
}

// TestSubmitBodyTooLarge: over GATE_MAX_BODY_BYTES is 413 body_too_large,
// whether the client announced the length or streamed the body.
func TestSubmitBodyTooLarge(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil) // the default limit, 1 MiB
	small := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.MaxBodyBytes = 2048 })

	big := `{"type":"x","payload":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"}`
	res := tg.submit(t, skey(1), big)
	wantProblem(t, res, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)

	body := `{"type":"x","payload":"` + strings.Repeat("a", 2048) + `"}`
	res = small.submit(t, skey(2), body)
	wantProblem(t, res, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
	// Streamed (chunked, no Content-Length).
	res = small.do(t, http.MethodPost, "/v1/jobs", io.MultiReader(strings.NewReader(body)), api.HeaderIdempotencyKey, skey(3))
	wantProblem(t, res, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
	// Just under the limit is accepted.
	fits := `{"type":"x","payload":"` + strings.Repeat("a", 2048-len(`{"type":"x","payload":""}`)) + `"}`
	wantJob(t, small.submit(t, skey(4), fits), http.StatusCreated)
	// The default: a body of exactly 1 MiB is accepted, one byte more is not.
	mib := `{"type":"x","payload":"` + strings.Repeat("a", DefaultMaxBodyBytes-len(`{"type":"x","payload":""}`)) + `"}`
	wantJob(t, tg.submit(t, skey(5), mib), http.StatusCreated)
	wantProblem(t, tg.submit(t, skey(6), mib+" "), http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("manager saw %d submissions, want 2", n)
	}
}

// goSubmit submits in the background; the answer arrives on the channel.
// ownerAndWaiter submits body with key to tg twice: the first submission
// (the owner) is held at mgr until the second waits on its pending entry,
// then answered with answer's error (mgr's own answer when answer is nil
// or returns nil). It returns the owner's answer and the waiter's.
func ownerAndWaiter(tg *testGate, mgr *testManager, key, body string, answer func() error) (owner, waiter result) {
	waiting := make(chan struct{}, 1)
	tg.testHookWaiting = func() { waiting <- struct{}{} }
	defer func() { tg.testHookWaiting = nil }()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	mgr.SetSubmitHook(func(ctx context.Context, _ *rpcpb.SubmitRequest) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(arrived)
		select {
		case <-release:
		case <-ctx.Done():
		}
		if answer != nil {
			return answer()
		}
		return nil
	})
	o := goSubmit(tg, key, body)
	<-arrived
	w := goSubmit(tg, key, body)
	<-waiting
	close(release)
	return <-o, <-w
}

func goSubmit(tg *testGate, key, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		res, err := tg.trySubmit(key, body)
		if err != nil {
			res = result{status: -1, body: []byte(err.Error())}
		}
		ch <- res
	}()
	return ch
}

// TestSubmitWaitsForPending: a duplicate of a PENDING submission waits for the
// owner's outcome and gets it as a replay; one forward.
func TestSubmitWaitsForPending(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	waiting := make(chan struct{}, 1)
	tg.testHookWaiting = func() { waiting <- struct{}{} }
	reserved, release := holdFirstSubmit(t, mgr)

	owner := goSubmit(tg, skey(1), invoiceBody)
	<-reserved
	dup := goSubmit(tg, skey(1), invoiceBodyReordered)
	<-waiting
	release()

	a, b := <-owner, <-dup
	wantJob(t, a, http.StatusCreated)
	wantHeader(t, a, api.HeaderReplayed, "false")
	wantJob(t, b, http.StatusCreated)
	wantHeader(t, b, api.HeaderReplayed, "true")
	if !bytes.Equal(a.body, b.body) {
		t.Fatalf("waiter got another body:\n%s\n%s", a.body, b.body)
	}
	wantHeader(t, b, api.HeaderLocation, a.header.Get(api.HeaderLocation))
	if n := mgr.Submits(); n != 1 {
		t.Fatalf("manager saw %d submissions, want 1", n)
	}
}

// TestSubmitPendingNoWait: with IDEMPOTENCY_WAIT_FOR_PENDING=false a duplicate
// of a PENDING submission is 409 request_in_progress with Retry-After at once;
// the owner's outcome is then replayed.
func TestSubmitPendingNoWait(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.WaitForPending = false })
	reserved, release := holdFirstSubmit(t, mgr)

	owner := goSubmit(tg, skey(1), invoiceBody)
	<-reserved
	res := tg.submit(t, skey(1), invoiceBody)
	wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	release()
	first := <-owner
	wantJob(t, first, http.StatusCreated)
	again := tg.submit(t, skey(1), invoiceBody)
	wantHeader(t, again, api.HeaderReplayed, "true")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay differs")
	}
}

// TestSubmitPendingWaitTimeout: a duplicate that waits longer than
// IDEMPOTENCY_PENDING_WAIT_TIMEOUT gets 409 request_in_progress.
func TestSubmitPendingWaitTimeout(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.Idempotency.PendingWaitTimeout = 150 * time.Millisecond
	})
	reserved, release := holdFirstSubmit(t, mgr)
	owner := goSubmit(tg, skey(1), invoiceBody)
	<-reserved
	start := time.Now()
	res := tg.submit(t, skey(1), invoiceBody)
	wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("answered after %v, before the wait timeout", waited)
	}
	release()
	wantJob(t, <-owner, http.StatusCreated)
}

// TestSubmitLedgerInProgress: a gate that does not wait forwards a duplicate
// with WaitMillis 0 while the key's Admit is in flight at the leader; the
// manager's in_progress is 409 request_in_progress.
func TestSubmitLedgerInProgress(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	g1 := startGate(t, []string{addr}, nil)
	g2 := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Idempotency.WaitForPending = false })
	reserved, release := holdInFlight(t, mgr)
	owner := goSubmit(g1, skey(1), invoiceBody)
	<-reserved
	res := g2.submit(t, skey(1), invoiceBody)
	wantProblem(t, res, http.StatusConflict, api.CodeRequestInProgress)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	release()
	first := <-owner
	wantJob(t, first, http.StatusCreated)
	// Not cached on g2: its next try reaches the ledger and replays.
	again := g2.submit(t, skey(1), invoiceBody)
	wantHeader(t, again, api.HeaderReplayed, "true")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("g2 replay differs:\n%s\n%s", again.body, first.body)
	}
}

// TestSubmitKeyExpired: once a structured key's entry expired, a retry of a
// committed sequence, the client's highest or one below it, is 409
// idempotency_key_expired and is not executed again; a higher sequence is a
// new job.
func TestSubmitKeyExpired(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now})
	tg := startGate(t, []string{addr}, func(_ *Config, deps *Deps) { deps.Now = clock.Now })

	wantJob(t, tg.submit(t, skey(4), invoiceBody), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(5), invoiceBody), http.StatusCreated)
	clock.Advance(301 * time.Second) // past IDEMPOTENCY_COMMITTED_TTL_SECONDS, in gate and ledger
	for _, seq := range []int{5, 4} {
		res := tg.submit(t, skey(seq), invoiceBody)
		p := wantProblem(t, res, http.StatusConflict, api.CodeIdempotencyKeyExpired)
		if !strings.Contains(p.Detail, fmt.Sprint(seq)) {
			t.Fatalf("detail %q does not name the sequence", p.Detail)
		}
	}
	if n := mgr.Jobs(); n != 2 {
		t.Fatalf("%d jobs, want 2: an expired key was executed again", n)
	}
	wantJob(t, tg.submit(t, skey(6), invoiceBody), http.StatusCreated)
}

// TestSubmitUnavailableNotCached: no leader before the deadline is 503
// unavailable with Retry-After; nothing is cached, so the same key forwards
// again and can succeed.
func TestSubmitUnavailableNotCached(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.ForwardTimeout = 200 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 100 * time.Millisecond
	})
	mgr.SetSubmitHook(func(context.Context, *rpcpb.SubmitRequest) error {
		return rpc.Errorf(rpc.CodeUnavailable, "no leader")
	})
	res := tg.submit(t, skey(1), invoiceBody)
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	wantNoHeader(t, res, api.HeaderReplayed)
	tried := mgr.Submits()
	if tried == 0 {
		t.Fatal("the gate never forwarded")
	}

	mgr.SetSubmitHook(nil)
	ok := tg.submit(t, skey(1), invoiceBody)
	wantJob(t, ok, http.StatusCreated)
	wantHeader(t, ok, api.HeaderReplayed, "false")
	if mgr.Submits() != tried+1 {
		t.Fatalf("submissions %d, want %d: the 503 was cached", mgr.Submits(), tried+1)
	}

	// A follower that knows no leader: the same.
	mgr.SetLeader(false)
	res = tg.submit(t, skey(2), invoiceBody)
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	mgr.SetLeader(true)
	wantJob(t, tg.submit(t, skey(2), invoiceBody), http.StatusCreated)
}

// TestSubmitLedgerFull: a full ledger is 503 at once (not retried until the
// deadline), with Retry-After of one cleanup interval, and is not cached.
func TestSubmitLedgerFull(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{Config: func(c *manager.Config) { c.LedgerMaxEntries = 1 }})
	tg := startGate(t, []string{addr}, nil)
	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	for range 2 {
		res := tg.submit(t, skey(2), invoiceBody)
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		wantHeader(t, res, api.HeaderRetryAfter, "10") // IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS
	}
	if n := mgr.Submits(); n != 3 {
		t.Fatalf("manager saw %d submissions, want 3 (503s are not cached)", n)
	}
}

// TestSubmitNoManager: with no reachable manager every submission is 503.
func TestSubmitNoManager(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, managers := range [][]string{{dead}, nil} {
		tg := startGate(t, managers, func(cfg *Config, _ *Deps) {
			cfg.ForwardTimeout = 100 * time.Millisecond
			cfg.Idempotency.PendingWaitTimeout = 100 * time.Millisecond
		})
		res := tg.submit(t, skey(1), invoiceBody)
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		wantHeader(t, res, api.HeaderRetryAfter, "1")
		wantProblem(t, tg.get(t, "/readyz"), http.StatusServiceUnavailable, api.CodeUnavailable)
	}
}

// TestSubmitWaitersShareTransientFailure: duplicates coalesced on an owner whose
// forward fails get the same 503; nothing is cached and the next try forwards.
func TestSubmitWaitersShareTransientFailure(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	// A definite failure: not retried.
	a, b := ownerAndWaiter(tg, mgr, skey(1), invoiceBody, func() error { return rpc.Errorf(rpc.CodeLedgerFull, "full") })
	wantProblem(t, a, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantProblem(t, b, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantNoHeader(t, b, api.HeaderReplayed)
	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("manager saw %d submissions, want 2", n)
	}
}

// TestConcurrentIdenticalSubmissions: 1000 concurrent identical submissions to
// one gate make exactly one forward and one job, and get 1000 identical bodies.
func TestConcurrentIdenticalSubmissions(t *testing.T) {
	const n = 1000
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		deps.Logger = nil // 1000 access log lines say nothing here
		// 1000 connections under the race detector on a small machine take
		// seconds to arrive: the waiters must outlast them.
		cfg.Idempotency.PendingWaitTimeout = time.Minute
	})
	// The forward is held until every other request is waiting on it.
	release := make(chan struct{})
	var waiters sync.WaitGroup
	waiters.Add(n - 1)
	tg.testHookWaiting = waiters.Done
	start := time.Now()
	go func() { waiters.Wait(); t.Logf("%d waiters after %v", n-1, time.Since(start)); close(release) }()
	mgr.SetSubmitHook(func(ctx context.Context, _ *rpcpb.SubmitRequest) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})

	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = tg.trySubmit(skey(1), invoiceBody) })
	}
	wg.Wait()
	fresh := 0
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if res.status != http.StatusCreated || !bytes.Equal(res.body, results[0].body) {
			t.Fatalf("request %d: %s, want the same 201 as request 0: %s", i, res, results[0])
		}
		if res.header.Get(api.HeaderReplayed) == "false" {
			fresh++
		}
	}
	wantJob(t, results[0], http.StatusCreated)
	if fresh != 1 {
		t.Fatalf("%d answers with Idempotent-Replayed: false, want 1", fresh)
	}
	if s, j := mgr.Submits(), mgr.Jobs(); s != 1 || j != 1 {
		t.Fatalf("manager saw %d submissions and made %d jobs, want 1 and 1", s, j)
	}
}

// TestTwoGatesSameKey: the same key sent concurrently through two gates that
// share a manager makes one job; every answer, through either gate, is the same
// bytes with the same job_id.
func TestTwoGatesSameKey(t *testing.T) {
	const perGate = 50
	mgr, addr := startManager(t, managertest.Options{})
	quiet := func(_ *Config, deps *Deps) { deps.Logger = nil }
	gates := []*testGate{startGate(t, []string{addr}, quiet), startGate(t, []string{addr}, quiet)}
	// The forwards are held until both gates have forwarded.
	release := make(chan struct{})
	var seen sync.WaitGroup
	seen.Add(2)
	go func() { seen.Wait(); close(release) }()
	var forwards atomic.Int32
	mgr.SetSubmitHook(func(ctx context.Context, _ *rpcpb.SubmitRequest) error {
		if forwards.Add(1) <= 2 {
			seen.Done()
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	bodies := []string{invoiceBody, invoiceBodyReordered}
	results := make([]result, 2*perGate)
	errs := make([]error, 2*perGate)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = gates[i%2].trySubmit(skey(9), bodies[i%2]) })
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if res.status != http.StatusCreated || !bytes.Equal(res.body, results[0].body) {
			t.Fatalf("request %d (gate %d): %s, want the same 201 as request 0: %s", i, i%2, res, results[0])
		}
	}
	wantJob(t, results[0], http.StatusCreated)
	if s, j := mgr.Submits(), mgr.Jobs(); s != 2 || j != 1 {
		t.Fatalf("manager saw %d submissions and made %d jobs, want 2 and 1", s, j)
	}
}

// TestSubmitOtherDatacenter: a job naming a datacenter outside the federation
// the gate knows is 400 invalid_request; nothing is forwarded or cached.
func TestSubmitOtherDatacenter(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	for _, dcs := range []string{`["dc2"]`, `["dc1","dc2"]`} {
		res := tg.submit(t, skey(1), `{"type":"x","datacenters":`+dcs+`}`)
		p := wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p.Detail, `"dc2"`) {
			t.Fatalf("detail %q does not name dc2", p.Detail)
		}
	}
	if n := mgr.Submits(); n != 0 {
		t.Fatalf("manager saw %d submissions, want 0", n)
	}
	job := wantJob(t, tg.submit(t, skey(1), `{"type":"x","datacenters":["dc1"]}`), http.StatusCreated)
	if len(job.Datacenters) != 1 || job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v", job.Datacenters)
	}
}

// A retry with the very bytes of its first attempt is answered from the
// cache by the raw body's hash, without canonicalizing it; one with other
// bytes of the same job by its fingerprint. Both must send exactly what the
// first answer sent (but Idempotent-Replayed), and a retry with another job
// under the key must still be refused, whichever bytes came first.
func TestReplayByRawBytesAnswersAsTheFirst(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	first := tg.submit(t, skey(1), invoiceBody)
	wantJob(t, first, http.StatusCreated)
	hits0 := tg.Gate.cache.Stats().Hits
	for i, body := range []string{invoiceBody, invoiceBodyReordered, invoiceBody} {
		again := tg.submit(t, skey(1), body)
		if again.status != first.status || !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay %d: %s, want %s", i, again, first)
		}
		for name := range first.header {
			if name == "Date" || name == api.HeaderReplayed {
				continue
			}
			if got, want := again.header.Values(name), first.header.Values(name); !slices.Equal(got, want) {
				t.Errorf("replay %d: %s %q, the first answer sent %q", i, name, got, want)
			}
		}
		if len(again.header) != len(first.header) {
			t.Errorf("replay %d: headers %v, the first answer's %v", i, again.header, first.header)
		}
		wantHeader(t, again, api.HeaderReplayed, "true")
	}
	if n := tg.Gate.cache.Stats().Hits - hits0; n != 3 {
		t.Fatalf("%d cache hits for 3 replays", n)
	}
	res := tg.submit(t, skey(1), `{"type":"send_invoice","payload":{"order":"ORD-124"}}`)
	wantProblem(t, res, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	if n := mgr.Submits(); n != 1 {
		t.Fatalf("manager saw %d submissions, want 1", n)
	}
}
