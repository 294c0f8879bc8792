package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// batchItem is one item of a completions body.
func batchItem(jobID, leaseID, result string) string {
	s := `{"job_id":"` + jobID + `","lease_id":"` + leaseID + `"`
	if result != "" {
		s += `,"result":` + result
	}
	return s + "}"
}

func batchBody(items ...string) string {
	return `{"completions":[` + strings.Join(items, ",") + `]}`
}

// decodeResults checks a 200 completions answer and returns each item's raw
// member: {"job":…} or {"error":…}.
func decodeResults(tb testing.TB, res result, n int) []map[string]json.RawMessage {
	tb.Helper()
	wantStatus(tb, res, http.StatusOK)
	var out struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil || len(out.Results) != n {
		tb.Fatalf("completions answer %s: %v (want %d results)", res.body, err, n)
	}
	for i, r := range out.Results {
		if len(r) != 1 || (r["job"] == nil && r["error"] == nil) {
			tb.Fatalf("result %d is neither a job nor an error: %s", i, res.body)
		}
	}
	return out.Results
}

// sameAsSingle checks that a batch item's member is the bytes the single
// call answered.
func sameAsSingle(tb testing.TB, item map[string]json.RawMessage, single result) {
	tb.Helper()
	member, raw := "job", item["job"]
	if single.status != http.StatusOK {
		member, raw = "error", item["error"]
	}
	if want := bytes.TrimRight(single.body, "\n"); !bytes.Equal(raw, want) {
		tb.Fatalf("batch item %s %s, want the single call's %s", member, raw, want)
	}
}

// A batch of several leased jobs completes them all, each answered with the
// job as its single call answers it; the same batch again is the same
// answer, and nothing is recorded twice.
func TestCompletionsCompleteAll(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	for i := 1; i <= 4; i++ {
		wantJob(t, g.submit(t, skey(i), fmt.Sprintf(`{"type":"x","payload":{"n":%d}}`, i)), http.StatusCreated)
	}
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":4}`))
	if len(leases) != 4 {
		t.Fatalf("leases %+v", leases)
	}
	var items []string
	for i, l := range leases {
		items = append(items, batchItem(l.Job.JobID, l.LeaseID, fmt.Sprintf(`{"i":%d}`, i)))
	}
	body := batchBody(items...)
	first := g.post(t, "/v1/completions", body)
	wantNoHeader(t, first, api.HeaderReplayed)
	results := decodeResults(t, first, 4)
	for i, l := range leases {
		var job api.Job
		if err := json.Unmarshal(results[i]["job"], &job); err != nil || job.JobID != l.Job.JobID ||
			job.State != api.JobStatusSucceeded || string(job.Result) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("result %d: %s (%v)", i, results[i]["job"], err)
		}
		// The single call with the same lease: the same job, the same bytes.
		single := g.post(t, "/v1/jobs/"+l.Job.JobID+"/complete", `{"lease_id":"`+l.LeaseID+`","result":{"i":`+fmt.Sprint(i)+`}}`)
		sameAsSingle(t, results[i], single)
		// The read shows it as the completion left it.
		read := wantJob(t, g.get(t, "/v1/jobs/"+l.Job.JobID), http.StatusOK)
		if read.State != api.JobStatusSucceeded || read.Attempts != 1 {
			t.Fatalf("read after the batch: %+v", read)
		}
	}
	again := g.post(t, "/v1/completions", body)
	if again.status != http.StatusOK || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the same batch again: %s, want %s", again, first.body)
	}
	var list api.JobList
	if err := json.Unmarshal(g.get(t, "/v1/jobs?state=succeeded").body, &list); err != nil || len(list.Jobs) != 4 {
		t.Fatalf("succeeded jobs: %+v %v", list, err)
	}
}

// Mixed outcomes in one batch: a lost lease, an unknown job and a good
// completion, each answered as its single call answers; the same batch
// again replays the same answers.
func TestCompletionsMixedOutcomes(t *testing.T) {
	_, g := startWorkerGate(t, nil)
	for i := 1; i <= 2; i++ {
		wantJob(t, g.submit(t, skey(i), `{"type":"x"}`), http.StatusCreated)
	}
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{"max_jobs":2}`))
	if len(leases) != 2 {
		t.Fatalf("leases %+v", leases)
	}
	lost, ok := leases[0], leases[1]
	body := batchBody(
		batchItem(lost.Job.JobID, "someone-else", ""),
		batchItem("no-such-job", "x", `"r"`),
		batchItem(ok.Job.JobID, ok.LeaseID, `{"done":true}`),
	)
	first := g.post(t, "/v1/completions", body)
	results := decodeResults(t, first, 3)

	var p api.Problem
	if err := json.Unmarshal(results[0]["error"], &p); err != nil || p.Status != http.StatusConflict || p.Code != api.CodeLeaseLost {
		t.Fatalf("lost lease item: %s", results[0]["error"])
	}
	if err := json.Unmarshal(results[1]["error"], &p); err != nil || p.Status != http.StatusNotFound || p.Code != api.CodeJobNotFound {
		t.Fatalf("unknown job item: %s", results[1]["error"])
	}
	sameAsSingle(t, results[0], wantProblemRes(t, g.post(t, "/v1/jobs/"+lost.Job.JobID+"/complete", `{"lease_id":"someone-else"}`), http.StatusConflict, api.CodeLeaseLost))
	sameAsSingle(t, results[1], wantProblemRes(t, g.post(t, "/v1/jobs/no-such-job/complete", `{"lease_id":"x","result":"r"}`), http.StatusNotFound, api.CodeJobNotFound))
	sameAsSingle(t, results[2], g.post(t, "/v1/jobs/"+ok.Job.JobID+"/complete", `{"lease_id":"`+ok.LeaseID+`","result":{"done":true}}`))

	// The lost lease's job is untouched: still running under its lease.
	if j := wantJob(t, g.get(t, "/v1/jobs/"+lost.Job.JobID), http.StatusOK); j.State != api.JobStatusRunning {
		t.Fatalf("the lost lease's job: %+v", j)
	}
	again := g.post(t, "/v1/completions", body)
	if again.status != http.StatusOK || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the same batch again: %s, want %s", again, first.body)
	}

	// With an Idempotency-Key: the same key and batch replay, marked; the
	// key with another batch is 422.
	k := []string{api.HeaderIdempotencyKey, skey(50)}
	keyed := g.post(t, "/v1/completions", body, k...)
	wantNoHeader(t, keyed, api.HeaderReplayed)
	if !bytes.Equal(keyed.body, first.body) {
		t.Fatalf("keyed batch %s, want %s", keyed.body, first.body)
	}
	replay := g.post(t, "/v1/completions", body, k...)
	wantHeader(t, replay, api.HeaderReplayed, "true")
	if !bytes.Equal(replay.body, first.body) {
		t.Fatalf("replayed batch %s, want %s", replay.body, first.body)
	}
	wantProblem(t, g.post(t, "/v1/completions", batchBody(batchItem(ok.Job.JobID, ok.LeaseID, "")), k...),
		http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	wantProblem(t, g.post(t, "/v1/completions", body, api.HeaderIdempotencyKey, "bad key"),
		http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
}

// wantProblemRes checks a problem answer and returns it.
func wantProblemRes(tb testing.TB, res result, status int, code api.Code) result {
	tb.Helper()
	wantProblem(tb, res, status, code)
	return res
}

// Another tenant's job is 404 inside the batch, and stays untouched.
func TestCompletionsTenantScoped(t *testing.T) {
	tokens, alpha, beta := twoTenants(t)
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, tokens)

	a := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`, alpha...), http.StatusCreated)
	b := wantJob(t, g.submit(t, skey(2), `{"type":"x"}`, beta...), http.StatusCreated)
	la := decodeLeases(t, g.post(t, "/v1/leases", `{}`, alpha...))
	lb := decodeLeases(t, g.post(t, "/v1/leases", `{}`, beta...))
	if len(la) != 1 || la[0].Job.JobID != a.JobID || len(lb) != 1 || lb[0].Job.JobID != b.JobID {
		t.Fatalf("leases %+v %+v", la, lb)
	}
	wantProblem(t, g.post(t, "/v1/completions", batchBody(batchItem(a.JobID, la[0].LeaseID, ""))), http.StatusUnauthorized, api.CodeUnauthorized)

	res := decodeResults(t, g.post(t, "/v1/completions",
		batchBody(batchItem(a.JobID, la[0].LeaseID, ""), batchItem(b.JobID, lb[0].LeaseID, "")), beta...), 2)
	var p api.Problem
	if err := json.Unmarshal(res[0]["error"], &p); err != nil || p.Status != http.StatusNotFound || p.Code != api.CodeJobNotFound {
		t.Fatalf("another tenant's job: %s", res[0]["error"])
	}
	var j api.Job
	if err := json.Unmarshal(res[1]["job"], &j); err != nil || j.JobID != b.JobID || j.State != api.JobStatusSucceeded {
		t.Fatalf("the tenant's own job: %s", res[1]["job"])
	}
	if j := wantJob(t, g.get(t, "/v1/jobs/"+a.JobID, alpha...), http.StatusOK); j.State != api.JobStatusRunning {
		t.Fatalf("alpha's job after beta's batch: %+v", j)
	}
}

// An invalid request is 400 invalid_request (a body over the limit 413
// body_too_large, as for every call) and completes nothing, not even its
// valid items.
func TestCompletionsInvalidCompleteNothing(t *testing.T) {
	_, g := startWorkerGateWith(t, nil, nil)
	j := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{}`))
	good := batchItem(j.JobID, leases[0].LeaseID, `"r"`)
	many := make([]string, api.MaxCompletions+1)
	for i := range many {
		many[i] = good
	}
	for name, body := range map[string]string{
		"not JSON":            `{"completions":[`,
		"not an object":       `[]`,
		"empty body":          ``,
		"no items":            `{"completions":[]}`,
		"no completions":      `{}`,
		"too many items":      batchBody(many...),
		"an item no job_id":   batchBody(good, `{"lease_id":"l"}`),
		"an item no lease":    batchBody(good, `{"job_id":"`+j.JobID+`"}`),
		"a long job_id":       batchBody(good, batchItem(strings.Repeat("j", api.MaxTypeLen+1), "l", "")),
		"items of wrong type": `{"completions":[1,2]}`,
	} {
		res := g.post(t, "/v1/completions", body)
		if p := wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest); p.Detail == "" {
			t.Errorf("%s: a problem without detail", name)
		}
	}
	big := batchBody(good, batchItem(j.JobID, leases[0].LeaseID, `"`+strings.Repeat("a", int(DefaultConfig().MaxBodyBytes))+`"`))
	wantProblem(t, g.post(t, "/v1/completions", big), http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)

	if got := wantJob(t, g.get(t, "/v1/jobs/"+j.JobID), http.StatusOK); got.State != api.JobStatusRunning {
		t.Fatalf("after invalid batches the job is %+v, want running", got)
	}
	// The lease still completes the job.
	res := decodeResults(t, g.post(t, "/v1/completions", batchBody(good)), 1)
	sameAsSingle(t, res[0], g.post(t, "/v1/jobs/"+j.JobID+"/complete", `{"lease_id":"`+leases[0].LeaseID+`","result":"r"}`))
}
