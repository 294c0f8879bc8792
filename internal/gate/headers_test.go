package gate

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// TestSubmitXIdempotencyKey: X-Idempotency-Key is another name for
// Idempotency-Key; both at once must carry the same key.
func TestSubmitXIdempotencyKey(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	post := func(hdr ...string) result {
		return tg.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(invoiceBody), hdr...)
	}

	first := post(api.HeaderXIdempotencyKey, skey(1))
	job := wantJob(t, first, http.StatusCreated)
	wantHeader(t, first, api.HeaderReplayed, "false")
	if job.IdempotencyKey != skey(1) {
		t.Fatalf("idempotency_key %q, want %q", job.IdempotencyKey, skey(1))
	}
	// The same key under either name, or both, is the same submission.
	for _, hdr := range [][]string{
		{api.HeaderIdempotencyKey, skey(1)},
		{api.HeaderXIdempotencyKey, skey(1)},
		{api.HeaderIdempotencyKey, skey(1), api.HeaderXIdempotencyKey, skey(1)},
		{api.HeaderIdempotencyKey, `"` + skey(1) + `"`, api.HeaderXIdempotencyKey, skey(1)},
	} {
		again := post(hdr...)
		wantStatus(t, again, http.StatusCreated)
		wantHeader(t, again, api.HeaderReplayed, "true")
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("%q: replay body differs:\n%s\n%s", hdr, again.body, first.body)
		}
	}
	if n := mgr.Submits(); n != 1 {
		t.Fatalf("manager saw %d submissions, want 1", n)
	}

	tests := []struct {
		name   string
		hdr    []string
		code   api.Code
		detail string
	}{
		{"different keys", []string{api.HeaderIdempotencyKey, skey(2), api.HeaderXIdempotencyKey, skey(3)},
			api.CodeIdempotencyKeyInvalid, "different keys"},
		{"two X headers", []string{api.HeaderXIdempotencyKey, skey(2), api.HeaderXIdempotencyKey, skey(2)},
			api.CodeIdempotencyKeyInvalid, "exactly one X-Idempotency-Key"},
		{"malformed X header", []string{api.HeaderXIdempotencyKey, "a b"},
			api.CodeIdempotencyKeyInvalid, "X-Idempotency-Key"},
		{"neither", nil, api.CodeIdempotencyKeyMissing, "X-Idempotency-Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wantProblem(t, post(tt.hdr...), http.StatusBadRequest, tt.code)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Fatalf("detail %q does not say %q", p.Detail, tt.detail)
			}
		})
	}
	if n := mgr.Submits(); n != 1 {
		t.Fatalf("manager saw %d submissions, want 1", n)
	}
}

// ttlRecorder records the ResultTTL of every submission the manager sees.
type ttlRecorder struct {
	mu   sync.Mutex
	ttls []time.Duration
}

func (r *ttlRecorder) hook(_ context.Context, req *rpcpb.SubmitRequest) error {
	r.mu.Lock()
	r.ttls = append(r.ttls, time.Duration(req.ResultTtlNanos))
	r.mu.Unlock()
	return nil
}

func (r *ttlRecorder) get() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.ttls...)
}

// TestSubmitIdempotencyTTL: Idempotency-TTL reaches the manager as ResultTTL,
// sets the key's expiry (Idempotency-Expires-At), and is fixed by the first
// admission: a retry asking another TTL is the same request and gets the same
// expiry. After the short TTL the key is judged afresh.
func TestSubmitIdempotencyTTL(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now})
	rec := &ttlRecorder{}
	mgr.SetSubmitHook(rec.hook)
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })
	const okey = "order-ORD-123" // an opaque key: no watermark refuses it once expired

	start := clock.Now()
	first := tg.submit(t, okey, invoiceBody, api.HeaderIdempotencyTTL, "5.5")
	job := wantJob(t, first, http.StatusCreated)
	wantHeader(t, first, api.HeaderIdempotencyExpiresAt, api.FormatTime(start.Add(5500*time.Millisecond)))
	if got := rec.get(); len(got) != 1 || got[0] != 5500*time.Millisecond {
		t.Fatalf("manager saw ResultTTL %v, want [5.5s]", got)
	}

	clock.Advance(2 * time.Second)
	for _, ttl := range []string{"100", ""} {
		var hdr []string
		if ttl != "" {
			hdr = []string{api.HeaderIdempotencyTTL, ttl}
		}
		again := tg.submit(t, okey, invoiceBody, hdr...)
		wantStatus(t, again, http.StatusCreated)
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, api.HeaderIdempotencyExpiresAt, first.header.Get(api.HeaderIdempotencyExpiresAt))
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, first.body)
		}
	}

	// Past the requested TTL (well before the default 300s) the entry is gone
	// from the cache and the ledger: the same opaque key is judged afresh. The
	// same request derives the same job ID, whose job is still retained: that
	// job is the answer, and no second job is made.
	clock.Advance(4 * time.Second)
	fresh := tg.submit(t, okey, invoiceBody)
	freshJob := wantJob(t, fresh, http.StatusCreated)
	if freshJob.JobID != job.JobID {
		t.Fatalf("resubmission after the TTL made job %s, want the retained job %s", freshJob.JobID, job.JobID)
	}
	if n := mgr.Jobs(); n != 1 {
		t.Fatalf("manager holds %d jobs, want 1", n)
	}
	wantHeader(t, fresh, api.HeaderIdempotencyExpiresAt, api.FormatTime(clock.Now().Add(300*time.Second)))
	if got := rec.get(); len(got) != 2 || got[1] != 0 {
		t.Fatalf("manager saw ResultTTL %v, want [5.5s 0]", got)
	}
}

// TestSubmitLongIdempotencyTTL: a TTL longer than the cache's own is kept by
// the ledger; once the cache has dropped the entry, a retry is answered by the
// ledger with the same job and the same Idempotency-Expires-At.
func TestSubmitLongIdempotencyTTL(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now})
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })

	first := tg.submit(t, skey(1), invoiceBody, api.HeaderIdempotencyTTL, "86400")
	wantJob(t, first, http.StatusCreated)
	expires := api.FormatTime(clock.Now().Add(24 * time.Hour))
	wantHeader(t, first, api.HeaderIdempotencyExpiresAt, expires)

	clock.Advance(time.Hour) // past IDEMPOTENCY_COMMITTED_TTL_SECONDS: the cache forgot it
	again := tg.submit(t, skey(1), invoiceBody)
	wantStatus(t, again, http.StatusCreated)
	wantHeader(t, again, api.HeaderReplayed, "true")
	wantHeader(t, again, api.HeaderIdempotencyExpiresAt, expires)
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("ledger replay differs:\n%s\n%s", again.body, first.body)
	}
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("manager saw %d submissions, want 2 (the retry is answered by the ledger)", n)
	}
}

// TestSubmitIdempotencyTTLInvalid: a malformed or out-of-range Idempotency-TTL
// is 400 invalid_request naming the range, and nothing reaches the manager.
func TestSubmitIdempotencyTTLInvalid(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { cfg.MaxTTL = time.Hour })
	for _, v := range [][]string{{"0"}, {"0.5"}, {"-1"}, {"abc"}, {"1e3"}, {"10s"}, {""}, {"3600.001"}, {"3601"}, {"5", "5"},
		// Out of range as written, although they round to 1 s and 3600 s.
		{"0.9999999999"}, {"3600.0000000001"}} {
		var hdr []string
		for _, x := range v {
			hdr = append(hdr, api.HeaderIdempotencyTTL, x)
		}
		res := tg.submit(t, skey(1), invoiceBody, hdr...)
		p := wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p.Detail, "Idempotency-TTL") || !strings.Contains(p.Detail, "from 1 to 3600") {
			t.Fatalf("Idempotency-TTL %q: detail %q does not name the header and the range", v, p.Detail)
		}
	}
	if n := mgr.Submits(); n != 0 {
		t.Fatalf("manager saw %d submissions, want 0", n)
	}
	wantJob(t, tg.submit(t, skey(1), invoiceBody, api.HeaderIdempotencyTTL, "3600"), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(2), invoiceBody, api.HeaderIdempotencyTTL, "1"), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(3), invoiceBody, api.HeaderIdempotencyTTL, "1.0000000001"), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(4), invoiceBody, api.HeaderIdempotencyTTL, "3600.000"), http.StatusCreated)
}

// TestSubmitExpiresAtOnStoredOutcomes: 201, 422 job_rejected and 429 carry
// Idempotency-Expires-At (the configured TTLs by default), the same on every
// replay, through this gate or another; transient answers do not.
func TestSubmitExpiresAtOnStoredOutcomes(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now, Config: func(c *manager.Config) {
		c.MaxQueuedJobs = 1
		c.AllowedJobTypes = []string{"fits", "too_many", "x"} // "forbidden" is refused
	}})
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })
	other := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now; cfg.ForwardTimeout = 300 * time.Millisecond })
	start := clock.Now()

	tests := []struct {
		key, body string
		status    int
		expires   time.Time
	}{
		{skey(1), `{"type":"fits"}`, http.StatusCreated, start.Add(300 * time.Second)},
		{skey(2), `{"type":"forbidden"}`, http.StatusUnprocessableEntity, start.Add(60 * time.Second)},
		{skey(3), `{"type":"too_many"}`, http.StatusTooManyRequests, start.Add(60 * time.Second)},
	}
	for _, tt := range tests {
		res := tg.submit(t, tt.key, tt.body)
		wantStatus(t, res, tt.status)
		wantHeader(t, res, api.HeaderIdempotencyExpiresAt, api.FormatTime(tt.expires))
		if _, err := time.Parse(time.RFC3339, res.header.Get(api.HeaderIdempotencyExpiresAt)); err != nil ||
			!strings.HasSuffix(res.header.Get(api.HeaderIdempotencyExpiresAt), "Z") {
			t.Fatalf("Idempotency-Expires-At %q is not RFC 3339 UTC: %v", res.header.Get(api.HeaderIdempotencyExpiresAt), err)
		}
	}
	clock.Advance(10 * time.Second)
	for _, g := range []*testGate{tg, other} {
		for _, tt := range tests {
			res := g.submit(t, tt.key, tt.body)
			wantStatus(t, res, tt.status)
			wantHeader(t, res, api.HeaderReplayed, "true")
			wantHeader(t, res, api.HeaderIdempotencyExpiresAt, api.FormatTime(tt.expires))
		}
	}

	// A transient answer carries no stored outcome, hence no expiry.
	mgr.SetLeader(false)
	res, err := other.trySubmit(skey(9), `{"type":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, http.StatusServiceUnavailable)
	wantNoHeader(t, res, api.HeaderIdempotencyExpiresAt)
}

// TestSubmitExpiringLedgerReplayNotCached: a ledger answer whose entry has
// already expired by the time it reaches the gate (a replay received in the
// entry's last nanosecond) is answered but not cached: once the ledger's
// entry has expired, a duplicate is forwarded and judged afresh, never
// replayed from the cache with an expiry in the past.
func TestSubmitExpiringLedgerReplayNotCached(t *testing.T) {
	clock := newFakeClock()
	mgr, addr := startManager(t, managertest.Options{Now: clock.Now})
	first := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })
	second := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) { deps.Now = clock.Now })
	const okey = "order-ORD-expiring"

	orig := first.submit(t, okey, invoiceBody, api.HeaderIdempotencyTTL, "5")
	wantJob(t, orig, http.StatusCreated)

	// One nanosecond before the ledger's entry expires, the other gate (whose
	// cache has not seen the key) gets the ledger's replay: by the time it
	// arrives, the entry has expired by the gate's clock.
	clock.Advance(5*time.Second - time.Nanosecond)
	late := second.submit(t, okey, invoiceBody)
	wantStatus(t, late, http.StatusCreated)
	wantHeader(t, late, api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("manager saw %d submissions, want 2", n)
	}

	clock.Advance(time.Nanosecond) // the ledger's entry has expired
	again := second.submit(t, okey, invoiceBody)
	wantStatus(t, again, http.StatusCreated)
	if n := mgr.Submits(); n != 3 {
		t.Fatalf("manager saw %d submissions, want 3: the duplicate was answered from a cache entry outliving the ledger's (Idempotency-Expires-At %s at %s)",
			n, again.header.Get(api.HeaderIdempotencyExpiresAt), api.FormatTime(clock.Now()))
	}
	wantHeader(t, again, api.HeaderIdempotencyExpiresAt, api.FormatTime(clock.Now().Add(300*time.Second)))
}
