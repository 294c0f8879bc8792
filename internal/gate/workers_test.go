package gate

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// post sends body to path with the extra headers hdr.
func (tg *testGate) post(tb testing.TB, path, body string, hdr ...string) result {
	tb.Helper()
	return tg.do(tb, http.MethodPost, path, strings.NewReader(body), hdr...)
}

func decodeLeases(tb testing.TB, res result) []api.Lease {
	tb.Helper()
	wantStatus(tb, res, http.StatusOK)
	var l api.LeaseList
	if err := json.Unmarshal(res.body, &l); err != nil || l.Leases == nil {
		tb.Fatalf("lease answer %s: %v", res.body, err)
	}
	return l.Leases
}

func startWorkerGate(t *testing.T, clock *fakeClock) (*testManager, *testGate) {
	return startWorkerGateWith(t, clock, nil)
}

func startWorkerGateWith(t *testing.T, clock *fakeClock, config func(*manager.Config)) (*testManager, *testGate) {
	opts := managertest.Options{Config: config}
	if clock != nil {
		opts.Now = clock.Now
	}
	m, addr := startManager(t, opts)
	return m, startGate(t, []string{addr}, nil)
}

// The worker endpoints end to end through the gate: a lease hands out the
// oldest queued job of the type asked for, a heartbeat extends it, complete
// makes it succeeded (the same call again: the same answer), a stale lease is
// 409 lease_lost, an unknown job 404, and GET /v1/jobs?state= lists by state.
func TestWorkerLifecycleThroughTheGate(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	first := wantJob(t, g.submit(t, skey(1), `{"type":"email","payload":{"n":1}}`), http.StatusCreated)
	wantJob(t, g.submit(t, skey(2), `{"type":"sms"}`), http.StatusCreated)

	if l := decodeLeases(t, g.post(t, "/v1/leases", `{"types":["nothing"]}`)); len(l) != 0 {
		t.Fatalf("a lease for a type nobody submitted: %+v", l)
	}
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{"types":["email"],"max_jobs":5,"lease_seconds":60}`))
	if len(leases) != 1 || leases[0].Job.JobID != first.JobID || leases[0].Attempt != 1 || leases[0].Job.State != api.JobStatusRunning {
		t.Fatalf("leases %+v", leases)
	}
	lease := leases[0]
	hb := g.post(t, "/v1/jobs/"+first.JobID+"/heartbeat", `{"lease_id":"`+lease.LeaseID+`","lease_seconds":120}`)
	wantStatus(t, hb, http.StatusOK)
	var hbr api.HeartbeatResponse
	if err := json.Unmarshal(hb.body, &hbr); err != nil || hbr.ExpiresAt <= lease.ExpiresAt {
		t.Fatalf("heartbeat %s (lease expired at %s): %v", hb.body, lease.ExpiresAt, err)
	}

	wantProblem(t, g.post(t, "/v1/jobs/"+first.JobID+"/complete", `{"lease_id":"someone-else"}`), http.StatusConflict, api.CodeLeaseLost)
	wantProblem(t, g.post(t, "/v1/jobs/no-such-job/complete", `{"lease_id":"x"}`), http.StatusNotFound, api.CodeJobNotFound)

	done := g.post(t, "/v1/jobs/"+first.JobID+"/complete", `{"lease_id":"`+lease.LeaseID+`","result":{"sent":true}}`)
	job := wantJob(t, done, http.StatusOK)
	if job.State != api.JobStatusSucceeded || string(job.Result) != `{"sent":true}` {
		t.Fatalf("completed job %s", done.body)
	}
	again := g.post(t, "/v1/jobs/"+first.JobID+"/complete", `{"lease_id":"`+lease.LeaseID+`","result":{"sent":true}}`)
	if again.status != http.StatusOK || string(again.body) != string(done.body) {
		t.Fatalf("the same completion again: %s, want %s", again, done.body)
	}
	wantProblem(t, g.post(t, "/v1/jobs/"+first.JobID+"/heartbeat", `{"lease_id":"`+lease.LeaseID+`"}`), http.StatusConflict, api.CodeLeaseLost)

	var list api.JobList
	res := g.get(t, "/v1/jobs?state=succeeded")
	wantStatus(t, res, http.StatusOK)
	if err := json.Unmarshal(res.body, &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobID != first.JobID {
		t.Fatalf("succeeded jobs %s: %v", res.body, err)
	}
	res = g.get(t, "/v1/jobs?state=queued")
	if err := json.Unmarshal(res.body, &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].Type != "sms" {
		t.Fatalf("queued jobs %s: %v", res.body, err)
	}
	wantProblem(t, g.get(t, "/v1/jobs?state=sleeping"), http.StatusBadRequest, api.CodeInvalidRequest)
	wantProblem(t, g.get(t, "/v1/jobs?state=queued&status=committed"), http.StatusBadRequest, api.CodeInvalidRequest)
}

// Failing: retried until the last attempt makes the job dead; retry false
// makes it failed at once; both keep the error.
func TestWorkerFailAndDead(t *testing.T) {
	_, g := startWorkerGateWith(t, nil, func(c *manager.Config) {
		c.JobMaxAttempts = 3
		c.JobBackoffMin, c.JobBackoffMax = 0, 0 // a failed job is leasable again at once
	})
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	var last api.Job
	for attempt := 1; ; attempt++ {
		leases := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
		if len(leases) == 0 {
			break
		}
		if leases[0].Attempt != attempt {
			t.Fatalf("attempt %d, want %d", leases[0].Attempt, attempt)
		}
		last = wantJob(t, g.post(t, "/v1/jobs/"+j.JobID+"/fail", `{"lease_id":"`+leases[0].LeaseID+`","error":"boom"}`), http.StatusOK)
	}
	if last.State != api.JobStatusDead || last.Error != "boom" {
		t.Fatalf("after the last attempt: %+v", last)
	}
	var list api.JobList
	if err := json.Unmarshal(g.get(t, "/v1/jobs?state=dead").body, &list); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("dead jobs: %+v %v", list, err)
	}

	k := wantJob(t, g.submit(t, skey(2), `{"type":"x"}`), http.StatusCreated)
	l := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	failed := wantJob(t, g.post(t, "/v1/jobs/"+k.JobID+"/fail", `{"lease_id":"`+l[0].LeaseID+`","error":"bad input","retry":false}`), http.StatusOK)
	if failed.State != api.JobStatusFailed {
		t.Fatalf("retry false: %+v", failed)
	}
}

// A lease not heartbeated is lost when it expires: the job is leased again
// with attempt 2, and the first worker's completion is 409.
func TestWorkerLeaseExpires(t *testing.T) {
	clock := newFakeClock()
	_, g := startWorkerGate(t, clock)
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	first := decodeLeases(t, g.post(t, "/v1/leases", `{"lease_seconds":5}`))
	if l := decodeLeases(t, g.post(t, "/v1/leases", `{}`)); len(l) != 0 {
		t.Fatalf("a running job leased twice: %+v", l)
	}
	clock.Advance(6 * time.Second)
	second := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	if len(second) != 1 || second[0].Job.JobID != j.JobID || second[0].Attempt != 2 {
		t.Fatalf("after expiry: %+v", second)
	}
	wantProblem(t, g.post(t, "/v1/jobs/"+j.JobID+"/complete", `{"lease_id":"`+first[0].LeaseID+`"}`), http.StatusConflict, api.CodeLeaseLost)
}

// A long poll answers as soon as a job is queued, well before its wait.
func TestWorkerLongPoll(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	got := make(chan result, 1)
	go func() {
		res, _ := g.try(http.MethodPost, "/v1/leases", strings.NewReader(`{"wait_seconds":30}`))
		got <- res
	}()
	wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	select {
	case res := <-got:
		if l := decodeLeases(t, res); len(l) != 1 {
			t.Fatalf("long poll answered %s", res.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll did not answer when a job was queued")
	}
}

// A gate told to stop ends the worker long polls it holds at once, 503
// unavailable with Retry-After (the worker asks again, at another gate),
// keyed or not, instead of holding its shutdown for their wait and then
// cutting them with no answer; and it stops. The polls leased nothing: a job
// queued afterwards is still there for the next lease.
func TestShutdownEndsLongPolls(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ShutdownTimeout = time.Hour })
	polls := []string{"", "lease-at-shutdown"}
	got := make(chan result, len(polls))
	for _, key := range polls {
		go func() {
			var hdr []string
			if key != "" {
				hdr = []string{api.HeaderIdempotencyKey, key}
			}
			res, err := g.try(http.MethodPost, "/v1/leases", strings.NewReader(`{"wait_seconds":60}`), hdr...)
			if err != nil {
				res.body = []byte(err.Error())
			}
			got <- res
		}()
	}
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		n := mgr.leases.Load()
		return n == int64(len(polls)), fmt.Sprintf("%d long polls at the manager", n)
	})
	if err := g.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for range polls {
		res := <-got
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		if res.header.Get(api.HeaderRetryAfter) == "" {
			t.Errorf("no Retry-After: %s", res)
		}
	}
	g2 := startGate(t, []string{addr}, nil)
	wantJob(t, g2.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	if l := decodeLeases(t, g2.post(t, "/v1/leases", `{}`)); len(l) != 1 {
		t.Fatalf("after the shutdown, leased %+v", l)
	}
}

// A worker call retried with its Idempotency-Key gets the stored answer (a
// retried lease does not lease twice); the key with another request is 422.
func TestWorkerIdempotencyKey(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	wantJob(t, g.submit(t, skey(2), `{"type":"x"}`), http.StatusCreated)
	key := "lease-attempt-1"
	a := g.post(t, "/v1/leases", `{}`, api.HeaderIdempotencyKey, key)
	b := g.post(t, "/v1/leases", `{}`, api.HeaderIdempotencyKey, key)
	if len(decodeLeases(t, a)) != 1 || string(a.body) != string(b.body) {
		t.Fatalf("retried lease: %s then %s", a.body, b.body)
	}
	wantHeader(t, b, api.HeaderReplayed, "true")
	wantProblem(t, g.post(t, "/v1/leases", `{"max_jobs":2}`, api.HeaderIdempotencyKey, key), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	if l := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":5}`)); len(l) != 1 {
		t.Fatalf("the second job: %+v", l)
	}
}

// A worker call's optional Idempotency-Key is read as a submission's
// (docs/api.md, Idempotency keys and Choices 4 and 15): X-Idempotency-Key
// is another name for it (a retry under it is a replay, not a second
// lease), and an empty key, a key sent twice, or two names carrying
// different keys are 400 idempotency_key_invalid, never a call run as if
// it had no key.
func TestWorkerIdempotencyKeyHeaders(t *testing.T) {
	mgr, g := startWorkerGate(t, nil)
	for i := range 3 {
		wantJob(t, g.submit(t, skey(i+1), `{"type":"x"}`), http.StatusCreated)
	}
	for _, hdr := range [][]string{
		{api.HeaderIdempotencyKey, ""},
		{api.HeaderXIdempotencyKey, ""},
		{api.HeaderIdempotencyKey, "k1", api.HeaderIdempotencyKey, "k2"},
		{api.HeaderXIdempotencyKey, "k1", api.HeaderXIdempotencyKey, "k1"},
		{api.HeaderIdempotencyKey, "k1", api.HeaderXIdempotencyKey, "k2"},
	} {
		for _, path := range []string{"/v1/leases", "/v1/jobs/j1/heartbeat", "/v1/jobs/j1/complete", "/v1/jobs/j1/fail"} {
			res := g.post(t, path, `{"lease_id":"l"}`, hdr...)
			if res.status != http.StatusBadRequest {
				t.Fatalf("%s with %q: %s", path, hdr, res)
			}
			wantProblem(t, res, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
		}
		wantProblem(t, g.post(t, "/v1/completions", `{"completions":[{"job_id":"j1","lease_id":"l"}]}`, hdr...),
			http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
	}
	if n := mgr.Jobs(); n != 3 {
		t.Fatalf("%d jobs", n)
	}
	// Under its other name, and under both names alike (an sf-string is the
	// same key), the key makes a retry a replay.
	a := g.post(t, "/v1/leases", `{}`, api.HeaderXIdempotencyKey, "lease-x")
	b := g.post(t, "/v1/leases", `{}`, api.HeaderXIdempotencyKey, "lease-x")
	c := g.post(t, "/v1/leases", `{}`, api.HeaderIdempotencyKey, `"lease-x"`, api.HeaderXIdempotencyKey, "lease-x")
	if len(decodeLeases(t, a)) != 1 || string(a.body) != string(b.body) || string(a.body) != string(c.body) {
		t.Fatalf("a lease retried under X-Idempotency-Key: %s, then %s and %s", a.body, b.body, c.body)
	}
	wantNoHeader(t, a, api.HeaderReplayed)
	wantHeader(t, b, api.HeaderReplayed, "true")
	wantHeader(t, c, api.HeaderReplayed, "true")
	if l := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":5}`)); len(l) != 2 {
		t.Fatalf("after the retries, %d jobs leased; want the 2 no lease took", len(l))
	}
}

// once_gate_replays_total counts every answer sent with
// Idempotent-Replayed: true (docs/api.md, Operations): a worker call's and
// an action's replays too, not only a submission's.
func TestWorkerReplaysAreCounted(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	job := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	replayed := 0
	for _, c := range []struct{ path, key string }{
		{"/v1/leases", "lease-1"},
		{"/v1/jobs/" + job.JobID + "/cancel", skey(2)},
	} {
		for range 2 {
			if res := g.post(t, c.path, `{}`, api.HeaderIdempotencyKey, c.key); res.header.Get(api.HeaderReplayed) == "true" {
				replayed++
			}
		}
	}
	if replayed != 2 {
		t.Fatalf("%d answers replayed, want 2", replayed)
	}
	res := g.get(t, "/metrics")
	if want := `once_gate_replays_total{datacenter="dc1",node="test-gate"} 2`; !strings.Contains(string(res.body), want) {
		t.Fatalf("metrics lack %q:\n%s", want, res.body)
	}
}

// A lease retried with its Idempotency-Key through another gate is answered
// by the leader's memory of lease answers: the same leases, replayed; the
// key with another body is 422 there too.
func TestWorkerLeaseRetriedThroughAnotherGate(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g1, g2 := startGate(t, []string{addr}, nil), startGate(t, []string{addr}, nil)
	for i := range 3 {
		wantJob(t, g1.submit(t, skey(i+1), `{"type":"x"}`), http.StatusCreated)
	}
	key := "lease-through-two-gates"
	a := g1.post(t, "/v1/leases", `{"max_jobs":2}`, api.HeaderIdempotencyKey, key)
	if len(decodeLeases(t, a)) != 2 {
		t.Fatalf("first lease: %d %s", a.status, a.body)
	}
	wantProblem(t, g2.post(t, "/v1/leases", `{"max_jobs":3}`, api.HeaderIdempotencyKey, key),
		http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	b := g2.post(t, "/v1/leases", `{"max_jobs":2}`, api.HeaderIdempotencyKey, key)
	if string(a.body) != string(b.body) {
		t.Fatalf("the retry through another gate: %s, want %s", b.body, a.body)
	}
	wantHeader(t, b, api.HeaderReplayed, "true")
	if l := decodeLeases(t, g2.post(t, "/v1/leases", `{"max_jobs":5}`)); len(l) != 1 {
		t.Fatalf("after the retry, %d jobs leased; want the 1 no lease took", len(l))
	}
}

// Bad worker requests are 400 and reach no manager.
func TestWorkerBadRequests(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	for _, c := range []struct{ path, body string }{
		{"/v1/leases", `{"max_jobs":101}`},
		{"/v1/leases", `{"max_jobs":-1}`},
		{"/v1/leases", `{"lease_seconds":3601}`},
		{"/v1/leases", `{"wait_seconds":61}`},
		{"/v1/leases", `{"types":[""]}`},
		{"/v1/leases", `{"types":"x"}`},
		{"/v1/leases", `{"types":["t0"` + manyTypes(api.MaxLeaseTypes) + `]}`}, // api.MaxLeaseTypes + 1
		{"/v1/leases", `[1]`},
		{"/v1/jobs/j1/heartbeat", `{}`},
		{"/v1/jobs/j1/heartbeat", `{"lease_id":"l","lease_seconds":0.5}`},
		{"/v1/jobs/j1/complete", `{"result":1}`},
		{"/v1/jobs/j1/fail", `{"lease_id":"l","error":"` + strings.Repeat("e", api.MaxJobErrorBytes+1) + `"}`},
	} {
		wantProblem(t, g.post(t, c.path, c.body), http.StatusBadRequest, api.CodeInvalidRequest)
	}
}

// manyTypes is n more distinct job types for a JSON list that has one
// already.
func manyTypes(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(`,"t` + strconv.Itoa(i) + `"`)
	}
	return b.String()
}

// callFingerprint hashes route, NUL, body, from the stack or (past its
// buffer) a streaming hash, the same digest either way, without allocating
// for a small call.
func TestCallFingerprint(t *testing.T) {
	for _, n := range []int{0, 10, 400, 600, 5000} {
		body := []byte(strings.Repeat("b", n))
		want := sha256.Sum256(append([]byte("complete j-1\x00"), body...))
		if got := callFingerprint("complete j-1", body); got != want {
			t.Fatalf("body of %d bytes: %x, want %x", n, got, want)
		}
	}
	body := []byte(`{"lease_id":"l-0123456789","result":{"sent":true}}`)
	if a := testing.AllocsPerRun(100, func() { _ = callFingerprint("complete j-1", body) }); a != 0 {
		t.Fatalf("%v allocations for a small call, want 0", a)
	}
}

// A lease or heartbeat that names no lease_seconds gets the managers'
// MANAGER_JOB_LEASE_DEFAULT, within their bounds: the gate does not put
// its own 30 s in its place (which a MANAGER_JOB_LEASE_MAX under 30 s
// refused, 400, to every worker naming none).
func TestWorkerLeaseDefaultIsTheManagers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		def, min, max time.Duration
	}{
		{"longer", 2 * time.Minute, time.Second, time.Hour},
		{"max under 30s", 10 * time.Second, time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			_, g := startWorkerGateWith(t, clock, func(c *manager.Config) {
				c.JobLeaseDefault, c.JobLeaseMin, c.JobLeaseMax = tc.def, tc.min, tc.max
			})
			j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
			leases := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
			want := api.FormatTime(clock.Now().Add(tc.def))
			if len(leases) != 1 || leases[0].ExpiresAt != want {
				t.Fatalf("a lease naming no duration: %+v, want it to expire at %s", leases, want)
			}
			clock.Advance(time.Second)
			hb := g.post(t, "/v1/jobs/"+j.JobID+"/heartbeat", `{"lease_id":"`+leases[0].LeaseID+`"}`)
			wantStatus(t, hb, http.StatusOK)
			var hbr api.HeartbeatResponse
			if err := json.Unmarshal(hb.body, &hbr); err != nil || hbr.ExpiresAt != api.FormatTime(clock.Now().Add(tc.def)) {
				t.Fatalf("a heartbeat naming no duration: %s: %v; want it to extend the lease by %s", hb.body, err, tc.def)
			}
		})
	}
}

// TestLeaseAnswerIsBoundedInBytes: a lease answer is bounded in bytes. Jobs
// of payloads near GATE_MAX_BODY_BYTES, more of them than one answer
// carries, are asked for all at once: each lease hands out at least one and
// as many as fit, and the jobs left out stay queued with no attempt counted,
// for the next lease, which hands them out at their first attempt.
func TestLeaseAnswerIsBoundedInBytes(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	// Megabytes through the race detector: every call is given a minute.
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ForwardTimeout = time.Minute })
	const jobs, size = 12, 1_000_000 // 12 MB, over one answer's bytes
	body := `{"type":"blob","payload":"` + strings.Repeat("p", size) + `"}`
	queued := map[string]bool{}
	for i := range jobs {
		queued[wantJob(t, g.submit(t, skey(i+1), body), http.StatusCreated).JobID] = true
	}
	for round := 0; len(queued) > 0; round++ {
		if round == jobs {
			t.Fatalf("%d leases, %d jobs never handed out", round, len(queued))
		}
		leases := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":100,"lease_seconds":600}`))
		if len(leases) == 0 || (round == 0 && len(leases) == jobs) {
			t.Fatalf("lease %d handed out %d of %d jobs of %d bytes", round, len(leases), len(queued), size)
		}
		for _, l := range leases {
			if !queued[l.Job.JobID] || l.Attempt != 1 || l.Job.Attempts != 1 || len(l.Job.Payload) != size+2 {
				t.Fatalf("lease %d: job %s attempt %d/%d, payload of %d bytes", round, l.Job.JobID, l.Attempt, l.Job.Attempts, len(l.Job.Payload))
			}
			delete(queued, l.Job.JobID)
		}
		for id := range queued { // not handed out: untouched
			if j := wantJob(t, g.get(t, "/v1/jobs/"+id), http.StatusOK); j.State != api.JobStatusQueued || j.Attempts != 0 {
				t.Fatalf("job %s left out of lease %d: state %s, %d attempts", id, round, j.State, j.Attempts)
			}
		}
	}
}
