package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// The bounds of the contract at their edges, each accepted at its limit and
// refused past it where the refusal is not checked elsewhere: the key's
// parts (an opaque key of 255 characters, as an sf-string too; a client_id
// of 128; a sequence up to 2^64-1, without a sign), and the default
// Idempotency-TTL bound of 30 days.
func TestContractKeyAndTTLBounds(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil) // the default IDEMPOTENCY_MAX_TTL_SECONDS
	const nonce16 = "0123456789abcdef"
	for _, c := range []struct {
		name, key string
		ok        bool
	}{
		{"opaque, 255 characters", strings.Repeat("k", 255), true},
		{"opaque, 255 characters as an sf-string", `"` + strings.Repeat("q", 255) + `"`, true},
		{"opaque, 256 characters as an sf-string", `"` + strings.Repeat("q", 256) + `"`, false},
		{"an sf-string with parameters", `"with-params";p=1`, false},
		{"opaque, a quote not at its start", `abc"`, true},
		{"opaque, one colon", "tenant-key:1", true},
		{"client_id of 128 characters", strings.Repeat("c", 128) + ":1:" + nonce16, true},
		{"client_id of 129 characters", strings.Repeat("c", 129) + ":1:" + nonce16, false},
		{"client_id with a colon", "host1.dc1:12345:7:" + nonce16, true},
		{"client_id with a slash", "host1/dc1:7:" + nonce16, false},
		{"empty client_id", ":7:" + nonce16, false},
		{"sequence 2^64-1", "big:18446744073709551615:" + nonce16, true},
		{"sequence 2^64", "big2:18446744073709551616:" + nonce16, false},
		{"sequence with a plus", "plus:+7:" + nonce16, false},
		{"sequence with a minus", "minus:-7:" + nonce16, false},
		{"empty sequence", "none::" + nonce16, false},
		{"nonce in upper case", "up:7:0123456789ABCDEF", false},
		{"nonce of 17", "long:7:" + nonce16 + "0", false},
	} {
		res := g.submit(t, c.key, `{"type":"email"}`)
		if !c.ok {
			if p := wantProblem(t, res, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid); p.Detail == "" {
				t.Fatalf("%s: no detail", c.name)
			}
			continue
		}
		if res.status != http.StatusCreated {
			t.Fatalf("%s: %s", c.name, res)
		}
		wantJob(t, res, http.StatusCreated)
	}
	// An opaque key (fewer than two colons) has no client_id, sequence or
	// nonce in its key info.
	res := g.get(t, "/v1/idempotency-keys/"+url.PathEscape("tenant-key:1"))
	wantStatus(t, res, http.StatusOK)
	var info map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &info); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"client_id", "sequence", "nonce"} {
		if _, ok := info[m]; ok {
			t.Fatalf("opaque key info has %q: %s", m, res.body)
		}
	}

	// Idempotency-TTL: at most IDEMPOTENCY_MAX_TTL_SECONDS, by default
	// 2592000 (30 days).
	before := time.Now()
	res = g.submit(t, skey(1), `{"type":"email"}`, api.HeaderIdempotencyTTL, "2592000")
	wantJob(t, res, http.StatusCreated)
	exp, err := time.Parse(api.TimeFormat, res.header.Get(api.HeaderIdempotencyExpiresAt))
	if err != nil {
		t.Fatalf("Idempotency-Expires-At: %v: %s", err, res)
	}
	if d := exp.Sub(before); d < 30*24*time.Hour-time.Minute || d > 30*24*time.Hour+time.Minute {
		t.Fatalf("Idempotency-TTL 2592000 expires in %s", d)
	}
	p := wantProblem(t, g.submit(t, skey(2), `{"type":"email"}`, api.HeaderIdempotencyTTL, "2592001"), http.StatusBadRequest, api.CodeInvalidRequest)
	if !strings.Contains(p.Detail, "2592000") {
		t.Fatalf("detail %q does not name the bound", p.Detail)
	}
}

// POST /v1/leases: every member optional (every type, one job, oldest
// queued first), accepted at its upper bounds (100 jobs, 3600 s, a wait of
// 60 s that ends at once when jobs are queued); a heartbeat at 3600 s; a
// heartbeat or a fail of an unknown job is 404.
func TestContractLeaseDefaultsAndBounds(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	var ids []string
	for i, typ := range []string{"alpha", "beta", "gamma"} {
		ids = append(ids, wantJob(t, g.submit(t, skey(i+1), `{"type":"`+typ+`"}`), http.StatusCreated).JobID)
	}
	first := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	if len(first) != 1 || first[0].Job.JobID != ids[0] || first[0].Attempt != 1 {
		t.Fatalf("a lease with no members: %+v, want the oldest job (%s), one", first, ids[0])
	}

	start := time.Now()
	rest := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":100,"lease_seconds":3600,"wait_seconds":60}`))
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("a lease with queued jobs waited %s", waited)
	}
	if len(rest) != 2 || rest[0].Job.JobID != ids[1] || rest[1].Job.JobID != ids[2] {
		t.Fatalf("leases %+v, want %s then %s", rest, ids[1], ids[2])
	}
	exp, err := time.Parse(api.TimeFormat, rest[0].ExpiresAt)
	if err != nil {
		t.Fatal(err)
	}
	if d := exp.Sub(start); d < time.Hour-time.Minute || d > time.Hour+time.Minute {
		t.Fatalf("lease_seconds 3600: the lease ends in %s", d)
	}

	res := g.post(t, "/v1/jobs/"+ids[0]+"/heartbeat", `{"lease_id":"`+first[0].LeaseID+`","lease_seconds":3600}`)
	wantStatus(t, res, http.StatusOK)
	var hb api.HeartbeatResponse
	if err := json.Unmarshal(res.body, &hb); err != nil || hb.LeaseID != first[0].LeaseID {
		t.Fatalf("heartbeat %s: %v", res.body, err)
	}
	if exp, err := time.Parse(api.TimeFormat, hb.ExpiresAt); err != nil || exp.Sub(start) < time.Hour-time.Minute {
		t.Fatalf("heartbeat expires_at %q: %v", hb.ExpiresAt, err)
	}

	for _, call := range []string{"heartbeat", "fail"} {
		wantProblem(t, g.post(t, "/v1/jobs/no-such-job/"+call, `{"lease_id":"x"}`), http.StatusNotFound, api.CodeJobNotFound)
	}
}

// While the federation is forming, a list or a key read naming a
// datacenter the gate does not know yet is 503 with Retry-After, never 400;
// once formed, 400 invalid_request.
func TestContractReadsNamingAnUnknownDatacenterWhileForming(t *testing.T) {
	_, a1 := startManager(t, managertest.Options{Datacenter: "dc1"})
	fed := &formingView{StaticFederation: StaticFederation{"dc1": {a1}}}
	fed.forming.Store(true)
	g := startGate(t, []string{a1}, func(cfg *Config, deps *Deps) { deps.Federation = fed })
	paths := []string{"/v1/jobs?datacenter=dc2", "/v1/idempotency-keys/" + skey(1) + "?datacenter=dc2"}
	for _, p := range paths {
		res := g.get(t, p)
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		if res.header.Get(api.HeaderRetryAfter) == "" {
			t.Fatalf("%s: 503 without Retry-After", p)
		}
	}
	fed.forming.Store(false)
	fed.formedOnce.Store(true)
	for _, p := range paths {
		wantProblem(t, g.get(t, p), http.StatusBadRequest, api.CodeInvalidRequest)
	}
}

// A job for two datacenters that one rejects for capacity: the first
// answer is that datacenter's 429 job_rejected, a stored outcome like any
// other — Idempotent-Replayed false, Idempotency-Expires-At the earliest of
// the datacenters' expiries (the REJECTED entry's), Retry-After the time left
// until that entry expires — and its replays through the gates of both
// datacenters carry the same expiry and a Retry-After within it.
func TestContractMultiDCCapacityRejectionHeaders(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{Config: func(c *manager.Config) {
		c.MaxQueuedJobs = 1
	}}, nil)
	wantJob(t, f.g2.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated) // dc2 is full
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	start := time.Now()
	first := f.g1.submit(t, skey(2), body)
	wantStatus(t, first, http.StatusTooManyRequests)
	var ext rejectionProblem
	decodeJSON(t, first.body, &ext)
	if ext.Code != api.CodeJobRejected || ext.Reason != "capacity" || ext.JobID == "" {
		t.Fatalf("answer %s", first.body)
	}
	wantHeader(t, first, api.HeaderReplayed, "false")
	wantNoHeader(t, first, api.HeaderLocation)
	exp, err := time.Parse(api.TimeFormat, first.header.Get(api.HeaderIdempotencyExpiresAt))
	if err != nil {
		t.Fatalf("Idempotency-Expires-At: %v: %s", err, first)
	}
	// managertest's REJECTED TTL is 60 s, its COMMITTED TTL 300 s: the
	// combined answer expires with dc2's rejection.
	k2, err := f.m2.GetKey(context.Background(), api.DefaultTenant, skey(2))
	if err != nil || k2.GetState() != api.KeyStateRejected || k2.GetExpiresAt() != api.FormatTime(exp) {
		t.Fatalf("dc2's entry %+v (%v), answer expires %s", k2, err, api.FormatTime(exp))
	}
	if d := exp.Sub(start); d > 61*time.Second {
		t.Fatalf("the rejection expires in %s, want the REJECTED TTL (60 s)", d)
	}
	retry := func(res result) int {
		t.Helper()
		n, err := strconv.Atoi(res.header.Get(api.HeaderRetryAfter))
		if err != nil || n < 1 || n > 60 {
			t.Fatalf("Retry-After %q, want 1..60: %s", res.header.Get(api.HeaderRetryAfter), res)
		}
		return n
	}
	retry(first)
	for _, tg := range []*testGate{f.g2, f.g1} {
		again := tg.submit(t, skey(2), `{"datacenters":["dc2","dc1"],"type":"x"}`)
		wantStatus(t, again, http.StatusTooManyRequests)
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, api.HeaderIdempotencyExpiresAt, first.header.Get(api.HeaderIdempotencyExpiresAt))
		retry(again)
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, first.body)
		}
	}
}

// The fingerprint is taken over the body's canonical form: member order and
// whitespace do not change it, and an absent payload made "payload":null
// does (docs/api.md, "The fingerprint"), although the job is the same.
func TestContractFingerprintOfAnAbsentPayload(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	first := g.submit(t, skey(1), `{"type":"x"}`)
	if job := wantJob(t, first, http.StatusCreated); string(job.Payload) != "null" {
		t.Fatalf("payload %s, want null", job.Payload)
	}
	again := g.submit(t, skey(1), " { \"type\" : \"x\" } ")
	wantHeader(t, again, api.HeaderReplayed, "true")
	if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the same body with whitespace: %s", again)
	}
	wantProblem(t, g.submit(t, skey(1), `{"payload":null,"type":"x"}`), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
}

// Workers are authenticated like any client and see only their tenant's
// jobs: without a token a worker call is 401; another tenant's job is 404
// job_not_found to heartbeat, complete, fail, cancel and retry — even with
// the job's lease — and stays as it was.
func TestContractWorkerCallsAreTenantScoped(t *testing.T) {
	tokens, alpha, beta := twoTenants(t)
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, tokens)

	a := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`, alpha...), http.StatusCreated)
	wantProblem(t, g.post(t, "/v1/leases", `{}`), http.StatusUnauthorized, api.CodeUnauthorized)
	if l := decodeLeases(t, g.post(t, "/v1/leases", `{}`, beta...)); len(l) != 0 {
		t.Fatalf("beta leased alpha's job: %+v", l)
	}
	la := decodeLeases(t, g.post(t, "/v1/leases", `{}`, alpha...))
	if len(la) != 1 || la[0].Job.JobID != a.JobID {
		t.Fatalf("alpha's leases %+v", la)
	}
	lease := `{"lease_id":"` + la[0].LeaseID + `"}`
	for _, call := range []string{"heartbeat", "complete", "fail"} {
		p := "/v1/jobs/" + a.JobID + "/" + call
		wantProblem(t, g.post(t, p, lease), http.StatusUnauthorized, api.CodeUnauthorized)
		wantProblem(t, g.post(t, p, lease, beta...), http.StatusNotFound, api.CodeJobNotFound)
	}
	for i, action := range []string{"cancel", "retry"} {
		wantProblem(t, g.post(t, "/v1/jobs/"+a.JobID+"/"+action, "", api.HeaderIdempotencyKey, skey(10+i)), http.StatusUnauthorized, api.CodeUnauthorized)
	}
	if j := wantJob(t, g.get(t, "/v1/jobs/"+a.JobID, alpha...), http.StatusOK); j.State != api.JobStatusRunning || j.Attempts != 1 {
		t.Fatalf("alpha's job after beta's calls: %+v", j)
	}
	if j := wantJob(t, g.post(t, "/v1/jobs/"+a.JobID+"/complete", lease, alpha...), http.StatusOK); j.State != api.JobStatusSucceeded {
		t.Fatalf("alpha's own completion: %+v", j)
	}
}

// A refused action records nothing in the ledger (docs/api.md, "Cancel and
// retry"): the gate that answered replays its refusal for the key, and
// through another gate the key is free and acts on the job as it is now.
func TestContractActionRefusalIsKeptByItsGateOnly(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g, other := startGate(t, []string{addr}, nil), startGate(t, []string{addr}, nil)
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	retry := "/v1/jobs/" + j.JobID + "/retry"
	refused := g.post(t, retry, "", api.HeaderIdempotencyKey, skey(50)) // a queued job: nothing to retry
	wantProblem(t, refused, http.StatusConflict, api.CodeJobStateConflict)
	wantNoHeader(t, refused, api.HeaderReplayed)

	l := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	if len(l) != 1 {
		t.Fatalf("leases %+v", l)
	}
	if f := wantJob(t, g.post(t, "/v1/jobs/"+j.JobID+"/fail", `{"lease_id":"`+l[0].LeaseID+`","retry":false}`), http.StatusOK); f.State != api.JobStatusFailed {
		t.Fatalf("failed job %+v", f)
	}
	again := g.post(t, retry, "", api.HeaderIdempotencyKey, skey(50))
	wantHeader(t, again, api.HeaderReplayed, "true")
	if again.status != http.StatusConflict || !bytes.Equal(again.body, refused.body) {
		t.Fatalf("the refused key again at its gate: %s, want the refusal replayed", again)
	}
	if r := wantJob(t, other.post(t, retry, "", api.HeaderIdempotencyKey, skey(50)), http.StatusOK); r.State != api.JobStatusQueued {
		t.Fatalf("the key through another gate: %+v, want the job queued again", r)
	}
}

// A long poll that finds nothing answers 200 {"leases":[]} once its wait
// has passed, however long the wait (at most 60 s), also past the HTTP
// server's write timeout, which bounds a submission (twice the forward
// timeout + the pending wait + 10 s): here 11 s, for a wait of 12 s. The
// write timeout counted from the request cut the answer (EOF) before.
func TestContractLongPollOutlastsTheWriteTimeout(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.ForwardTimeout = 500 * time.Millisecond
		cfg.Idempotency.WaitForPending = false
	})
	const wait = 12 * time.Second
	if wt := g.cfg.writeTimeout(); wt >= wait {
		t.Fatalf("write timeout %s, want it under the wait %s", wt, wait)
	}
	start := time.Now()
	res, err := g.try(http.MethodPost, "/v1/leases", strings.NewReader(`{"wait_seconds":12}`))
	if err != nil {
		t.Fatalf("a long poll of %s, after %s: %v", wait, time.Since(start), err)
	}
	if l := decodeLeases(t, res); len(l) != 0 {
		t.Fatalf("leases %+v, want none", l)
	}
	if d := time.Since(start); d < wait {
		t.Fatalf("the long poll answered after %s, want its wait %s", d, wait)
	}
}

// A read's query string that does not parse (a malformed %-escape, a ';')
// is 400 invalid_request, never read as if the parameter were absent:
// limit=%zz was a page of the default 100 jobs, datacenter=%zz a read of
// the gate's own datacenter.
func TestContractReadQueryThatDoesNotParse(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	for _, path := range []string{
		"/v1/jobs?limit=%zz",
		"/v1/jobs?limit=5;order=desc",
		"/v1/jobs?type=x%",
		"/v1/jobs/" + j.JobID + "?datacenter=%zz",
		"/v1/idempotency-keys/" + skey(1) + "?datacenter=dc1;x",
	} {
		p := wantProblem(t, g.get(t, path), http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p.Detail, "query") {
			t.Fatalf("%s: detail %q does not name the query", path, p.Detail)
		}
	}
	wantStatus(t, g.get(t, "/v1/jobs?limit=5&unknown=1"), http.StatusOK)
}

// The body of a worker call or an action is one JSON object, checked as a
// submission's is: a member name given twice (at the top or inside a
// result), null, or invalid UTF-8 is 400 invalid_request, and nothing is
// done. Every parser of the body reads it alike; the last of two lease_id
// members, or of two results, was taken before.
func TestContractWorkerBodyIsOneJSONObject(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	for _, body := range []string{`null`, `{"max_jobs":1,"max_jobs":2}`, "{\"worker\":\"w\xff\"}"} {
		wantProblem(t, g.post(t, "/v1/leases", body), http.StatusBadRequest, api.CodeInvalidRequest)
	}
	wantProblem(t, g.post(t, "/v1/jobs/"+j.JobID+"/cancel", `{"a":1,"a":2}`, api.HeaderIdempotencyKey, skey(2)),
		http.StatusBadRequest, api.CodeInvalidRequest)
	l := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	if len(l) != 1 || l[0].Job.JobID != j.JobID {
		t.Fatalf("leases %+v, want the job, still queued", l)
	}
	lease := `"lease_id":"` + l[0].LeaseID + `"`
	path := "/v1/jobs/" + j.JobID
	for _, c := range []struct{ call, body string }{
		{"/heartbeat", `{` + lease + `,` + lease + `}`},
		{"/complete", `{` + lease + `,"result":{"a":1,"a":2}}`},
		{"/complete", `{` + lease + `,"result":1,"result":2}`},
		{"/fail", `{` + lease + `,"retry":true,"retry":false}`},
	} {
		wantProblem(t, g.post(t, path+c.call, c.body), http.StatusBadRequest, api.CodeInvalidRequest)
	}
	wantProblem(t, g.post(t, "/v1/completions", `{"completions":[{"job_id":"`+j.JobID+`",`+lease+`,"result":{"a":1,"a":2}}]}`),
		http.StatusBadRequest, api.CodeInvalidRequest)
	if got := wantJob(t, g.get(t, path), http.StatusOK); got.State != api.JobStatusRunning {
		t.Fatalf("the job after refused calls: %+v", got)
	}
}

// A key read takes the key URL-escaped as one path segment, however the
// client escaped it: ':' as it is or as %3A (encodeURIComponent,
// url.QueryEscape), '/' as %2F. A structured key whose client_id holds a
// colon reads back split at its last two colons.
func TestContractKeyReadOfAnEscapedKey(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	for _, key := range []string{skey(1), "tenant/a:b"} {
		job := wantJob(t, g.submit(t, key, `{"type":"x"}`), http.StatusCreated)
		for _, path := range []string{url.PathEscape(key), url.QueryEscape(key), strings.ReplaceAll(url.PathEscape(key), ":", "%3a")} {
			res := g.get(t, "/v1/idempotency-keys/"+path)
			wantStatus(t, res, http.StatusOK)
			var info api.KeyInfo
			decodeJSON(t, res.body, &info)
			if info.Key != key || info.JobID == nil || *info.JobID != job.JobID || info.State != api.KeyStateCommitted {
				t.Fatalf("%s: %s", path, res.body)
			}
			if key == skey(1) && (info.ClientID != "host1.dc1:12345" || info.Sequence == nil || *info.Sequence != 1 || info.Nonce != nonce) {
				t.Fatalf("%s: the key's parts %s", path, res.body)
			}
		}
	}
}

// Cancel is for a queued job and retry for a failed or dead one: a retry
// of a succeeded job, and a cancel of it, are 409 job_state_conflict, and
// the job stays as it was.
func TestContractRetryOfASucceededJob(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	l := leaseOne(t, g)
	path := "/v1/jobs/" + l.Job.JobID
	done := wantJob(t, g.post(t, path+"/complete", `{"lease_id":"`+l.LeaseID+`","result":{"ok":true}}`), http.StatusOK)
	for i, action := range []string{"/retry", "/cancel"} {
		res := g.post(t, path+action, "", api.HeaderIdempotencyKey, skey(100+i))
		wantProblem(t, res, http.StatusConflict, api.CodeJobStateConflict)
		wantNoHeader(t, res, api.HeaderReplayed)
	}
	if j := wantJob(t, g.get(t, path), http.StatusOK); j.State != api.JobStatusSucceeded || j.Attempts != done.Attempts {
		t.Fatalf("the job after a refused retry and cancel: %+v", j)
	}
}

// An unknown job is 404 job_not_found to every job route, also when its id
// is longer than any job's (128 bytes): heartbeat, complete, fail, cancel
// and retry answered 400 invalid_request for such an id, GET 404.
func TestContractJobRoutesAnswerALongIDUnknown(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	path := "/v1/jobs/" + strings.Repeat("j", api.MaxTypeLen+1)
	wantProblem(t, g.get(t, path), http.StatusNotFound, api.CodeJobNotFound)
	for _, call := range []string{"/heartbeat", "/complete", "/fail"} {
		wantProblem(t, g.post(t, path+call, `{"lease_id":"l"}`), http.StatusNotFound, api.CodeJobNotFound)
	}
	for i, action := range []string{"/cancel", "/retry"} {
		wantProblem(t, g.post(t, path+action, "", api.HeaderIdempotencyKey, skey(1+i)), http.StatusNotFound, api.CodeJobNotFound)
	}
}
