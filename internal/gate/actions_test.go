package gate

import (
	"net/http"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// Cancel and retry through the gate: the job as GET shows it, the key
// required and checked as a submission's, a repeat of the key replayed
// (by this gate, and by the manager through another gate), the key with
// another action 422, the refusals 409 job_state_conflict, and another
// tenant's job 404.
func TestCancelRetryThroughTheGate(t *testing.T) {
	tokens, alpha, beta := twoTenants(t)
	_, addr := startManager(t, managertest.Options{})
	g, other := startGate(t, []string{addr}, tokens), startGate(t, []string{addr}, tokens)
	withKey := func(k string, hdr []string) []string { return append([]string{api.HeaderIdempotencyKey, k}, hdr...) }

	q := wantJob(t, g.submit(t, skey(1), `{"type":"email"}`, alpha...), http.StatusCreated)
	f := wantJob(t, g.submit(t, skey(2), `{"type":"email"}`, alpha...), http.StatusCreated)
	cancel := "/v1/jobs/" + q.JobID + "/cancel"

	// The key: required, checked, either header name.
	wantProblem(t, g.post(t, cancel, "", alpha...), http.StatusBadRequest, api.CodeIdempotencyKeyMissing)
	wantProblem(t, g.post(t, cancel, "", withKey("bad key", alpha)...), http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
	wantProblem(t, g.post(t, cancel, "[]", withKey(skey(10), alpha)...), http.StatusBadRequest, api.CodeInvalidRequest)
	// Another tenant: 404, as for a read.
	wantProblem(t, g.post(t, cancel, "", withKey(skey(10), beta)...), http.StatusNotFound, api.CodeJobNotFound)

	first := g.post(t, cancel, "", append([]string{api.HeaderXIdempotencyKey, skey(11)}, alpha...)...)
	job := wantJob(t, first, http.StatusOK)
	wantNoHeader(t, first, api.HeaderReplayed)
	if job.JobID != q.JobID || job.State != api.JobStatusCancelled {
		t.Fatalf("cancelled job %s", first.body)
	}
	readRes := g.get(t, "/v1/jobs/"+q.JobID, alpha...)
	if read := wantJob(t, readRes, http.StatusOK); read.State != api.JobStatusCancelled {
		t.Fatalf("read after cancel: %+v", read)
	}
	if string(readRes.body) != string(first.body) { // the job as GET shows it
		t.Fatalf("cancel answered %s, GET %s", first.body, readRes.body)
	}
	// The same key: the same answer, replayed, through this gate and another.
	for _, tg := range []*testGate{g, other} {
		again := tg.post(t, cancel, "{}", withKey(skey(11), alpha)...)
		wantHeader(t, again, api.HeaderReplayed, "true")
		if again.status != http.StatusOK || string(again.body) != string(first.body) {
			t.Fatalf("the same cancel again: %s, want %s", again, first.body)
		}
	}
	// The key with another action: 422; a cancelled job retried: 409.
	wantProblem(t, g.post(t, "/v1/jobs/"+q.JobID+"/retry", "", withKey(skey(11), alpha)...), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	wantProblem(t, g.post(t, "/v1/jobs/"+q.JobID+"/retry", "", withKey(skey(12), alpha)...), http.StatusConflict, api.CodeJobStateConflict)
	// A cancelled job is never leased: the other one is.
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":10}`, alpha...))
	if len(leases) != 1 || leases[0].Job.JobID != f.JobID {
		t.Fatalf("leases %+v", leases)
	}
	wantProblem(t, g.post(t, "/v1/jobs/"+f.JobID+"/cancel", "", withKey(skey(13), alpha)...), http.StatusConflict, api.CodeJobStateConflict)
	wantJob(t, g.post(t, "/v1/jobs/"+f.JobID+"/fail", `{"lease_id":"`+leases[0].LeaseID+`","retry":false}`, alpha...), http.StatusOK)

	// A failed job retried: queued again, leased, completed.
	retry := "/v1/jobs/" + f.JobID + "/retry"
	wantProblem(t, g.post(t, retry, "", withKey(skey(14), beta)...), http.StatusNotFound, api.CodeJobNotFound)
	retried := g.post(t, retry, "", withKey(skey(14), alpha)...)
	if r := wantJob(t, retried, http.StatusOK); r.State != api.JobStatusQueued || r.Attempts != 1 {
		t.Fatalf("retried job %+v", r)
	}
	if readRes := g.get(t, "/v1/jobs/"+f.JobID, alpha...); string(readRes.body) != string(retried.body) {
		t.Fatalf("retry answered %s, GET %s", retried.body, readRes.body)
	}
	leases = decodeLeases(t, g.post(t, "/v1/leases", `{}`, alpha...))
	if len(leases) != 1 || leases[0].Job.JobID != f.JobID || leases[0].Attempt != 2 {
		t.Fatalf("lease of the retried job %+v", leases)
	}
	// Through another gate (no kept answer there) the manager replays: the
	// job as it is now, never a second retry.
	again := other.post(t, retry, "", withKey(skey(14), alpha)...)
	wantHeader(t, again, api.HeaderReplayed, "true")
	if j := wantJob(t, again, http.StatusOK); j.State != api.JobStatusRunning {
		t.Fatalf("retry replayed through another gate: %+v", j)
	}
	wantProblem(t, g.post(t, retry, "", withKey(skey(15), alpha)...), http.StatusConflict, api.CodeJobStateConflict)
	wantProblem(t, g.post(t, "/v1/jobs/no-such-job/retry", "", withKey(skey(16), alpha)...), http.StatusNotFound, api.CodeJobNotFound)

	// Listed by the new state.
	res := g.get(t, "/v1/jobs?state=cancelled", alpha...)
	wantStatus(t, res, http.StatusOK)
}

// TestActionBodyIsEmptyOrAnObject: the body of a cancel or a retry is empty
// or a JSON object, whose members are ignored; anything else (docs/api.md,
// "Cancel and retry") is 400 invalid_request, and nothing is acted on.
func TestActionBodyIsEmptyOrAnObject(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	q := wantJob(t, g.submit(t, skey(1), `{"type":"email"}`), http.StatusCreated)
	seq := 100
	for _, action := range []string{"cancel", "retry"} {
		for _, body := range []string{"null", " null ", "[]", `"x"`, "1", "true", "{} {}", "{"} {
			seq++
			res := g.post(t, "/v1/jobs/"+q.JobID+"/"+action, body, api.HeaderIdempotencyKey, skey(seq))
			wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest)
		}
	}
	if j := wantJob(t, g.get(t, "/v1/jobs/"+q.JobID), http.StatusOK); j.State != api.JobStatusQueued {
		t.Fatalf("a refused action changed the job: %+v", j)
	}
	for i, body := range []string{"", " ", "{}", `{"reason":"not needed"}`} {
		res := g.post(t, "/v1/jobs/"+q.JobID+"/cancel", body, api.HeaderIdempotencyKey, skey(200+i))
		if j := wantJob(t, res, http.StatusOK); j.State != api.JobStatusCancelled {
			t.Fatalf("cancel with body %q: %+v", body, j)
		}
	}
}
