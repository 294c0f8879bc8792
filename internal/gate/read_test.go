package gate

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// TestGetJob: a job reads back as the same bytes as its 201; an unknown ID is
// 404 job_not_found.
func TestGetJob(t *testing.T) {
	// Jobs outside the worker lifecycle (MANAGER_JOB_QUEUE=false): a
	// queued job's read would add its state.
	_, addr := startManager(t, managertest.Options{Config: func(c *manager.Config) { c.QueueJobs = false }})
	tg := startGate(t, []string{addr}, nil)
	created := tg.submit(t, skey(1), invoiceBody)
	wantJob(t, created, http.StatusCreated)

	res := tg.get(t, created.header.Get(api.HeaderLocation))
	wantJob(t, res, http.StatusOK)
	if !bytes.Equal(res.body, created.body) {
		t.Fatalf("GET body differs from the 201:\n%s\n%s", res.body, created.body)
	}
	wantNoHeader(t, res, api.HeaderReplayed)

	res = tg.get(t, "/v1/jobs/no-such-job")
	p := wantProblem(t, res, http.StatusNotFound, api.CodeJobNotFound)
	if !strings.Contains(p.Detail, "no-such-job") {
		t.Fatalf("detail %q", p.Detail)
	}
}

// listPage reads one page of GET /v1/jobs.
func listPage(t *testing.T, tg *testGate, query string) (api.JobList, map[string]json.RawMessage) {
	t.Helper()
	res := tg.get(t, "/v1/jobs"+query)
	wantStatus(t, res, http.StatusOK)
	wantHeader(t, res, "Content-Type", api.ContentTypeJSON)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &raw); err != nil {
		t.Fatalf("list body: %v: %s", err, res.body)
	}
	if _, ok := raw["jobs"]; !ok {
		t.Fatalf("list body lacks jobs: %s", res.body)
	}
	if _, ok := raw["next"]; !ok {
		t.Fatalf("list body lacks next: %s", res.body)
	}
	var list api.JobList
	if err := json.Unmarshal(res.body, &list); err != nil {
		t.Fatalf("list body: %v", err)
	}
	return list, raw
}

// TestListJobs: filtering by type, pagination with an opaque cursor until
// "next" is null, newest last; bad parameters are 400 invalid_request.
func TestListJobs(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)

	empty, raw := listPage(t, tg, "")
	if len(empty.Jobs) != 0 || empty.Next != nil || string(raw["jobs"]) != "[]" || string(raw["next"]) != "null" {
		t.Fatalf("empty list: %+v %s %s", empty, raw["jobs"], raw["next"])
	}

	var alphas []string
	for i := range 7 {
		typ := "alpha"
		if i%3 == 1 {
			typ = "beta"
		}
		job := wantJob(t, tg.submit(t, skey(i), `{"type":"`+typ+`"}`), http.StatusCreated)
		if typ == "alpha" {
			alphas = append(alphas, job.JobID)
		}
	}

	var got []string
	query := "?type=alpha&limit=2"
	pages := 0
	for {
		page, raw := listPage(t, tg, query)
		pages++
		for _, j := range page.Jobs {
			if j.Type != "alpha" {
				t.Fatalf("type filter let %+v through", j)
			}
			got = append(got, j.JobID)
		}
		if page.Next == nil {
			if string(raw["next"]) != "null" {
				t.Fatalf("next is %s, want null", raw["next"])
			}
			break
		}
		if len(page.Jobs) != 2 {
			t.Fatalf("a page before the last has %d jobs", len(page.Jobs))
		}
		query = "?type=alpha&limit=2&after=" + url.QueryEscape(*page.Next)
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if strings.Join(got, ",") != strings.Join(alphas, ",") {
		t.Fatalf("paged through %v, want %v (oldest first, newest last)", got, alphas)
	}
	all, _ := listPage(t, tg, "?limit=1000")
	if len(all.Jobs) != 7 || all.Next != nil {
		t.Fatalf("all jobs: %d, next %v", len(all.Jobs), all.Next)
	}
	def, _ := listPage(t, tg, "?status=committed")
	if len(def.Jobs) != 7 {
		t.Fatalf("status filter: %d jobs", len(def.Jobs))
	}
	// status is an exact match on the job's status, committed for every
	// job: any other value, a lifecycle state's name included, is no job's.
	for _, q := range []string{"?status=queued", "?status=rejected", "?status=bogus", "?status=queued&type=alpha"} {
		res := tg.get(t, "/v1/jobs"+q)
		if res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != `{"jobs":[],"next":null}` {
			t.Fatalf("%s: %d %s, want 200 and no job", q, res.status, res.body)
		}
	}

	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=-1", "?limit=abc", "?limit=%2B5", "?limit=1.5", "?limit=", "?limit=1&limit=2", "?after=not-a-cursor"} {
		p := wantProblem(t, tg.get(t, "/v1/jobs"+q), http.StatusBadRequest, api.CodeInvalidRequest)
		if q != "?after=not-a-cursor" && !strings.Contains(p.Detail, "limit") {
			t.Fatalf("%s: detail %q does not name limit", q, p.Detail)
		}
	}
	// order=asc is the default order; any other order but desc is refused,
	// naming the parameter.
	asc, _ := listPage(t, tg, "?limit=1000&order=asc")
	if len(asc.Jobs) != 7 || asc.Jobs[0].JobID != all.Jobs[0].JobID || asc.Jobs[6].JobID != all.Jobs[6].JobID {
		t.Fatalf("order=asc: %+v, want %+v", asc.Jobs, all.Jobs)
	}
	for _, q := range []string{"?order=", "?order=ASC", "?order=newest", "?order=asc&order=desc"} {
		p := wantProblem(t, tg.get(t, "/v1/jobs"+q), http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(p.Detail, `"order"`) {
			t.Fatalf("%s: detail %q does not name order", q, p.Detail)
		}
	}
}

// GET /v1/jobs?order=desc parses into a newest-first request.
func TestListQueryOrder(t *testing.T) {
	for q, desc := range map[string]bool{"": false, "?order=asc": false, "?order=desc": true, "?order=desc&type=a&limit=3": true} {
		req, _, err := parseListQuery(httptest.NewRequest(http.MethodGet, "/v1/jobs"+q, nil))
		if err != nil || req.Desc != desc {
			t.Fatalf("%q: desc %v, err %v; want desc %v", q, req != nil && req.Desc, err, desc)
		}
	}
}

// TestListJobsNewestFirst: order=desc pages newest first, through the
// manager, with cursors of its own order only.
func TestListJobsNewestFirst(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	var ids []string
	for i := range 5 {
		ids = append(ids, wantJob(t, tg.submit(t, skey(i), `{"type":"alpha"}`), http.StatusCreated).JobID)
	}
	var got []string
	query, ascCursor := "?order=desc&limit=2", ""
	for pages := 0; ; pages++ {
		page, _ := listPage(t, tg, query)
		for _, j := range page.Jobs {
			got = append(got, j.JobID)
		}
		if page.Next == nil {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		query = "?order=desc&limit=2&after=" + url.QueryEscape(*page.Next)
		if ascCursor == "" {
			// A newest-first cursor is not one for oldest first.
			wantProblem(t, tg.get(t, "/v1/jobs?limit=2&after="+url.QueryEscape(*page.Next)), http.StatusBadRequest, api.CodeInvalidRequest)
			asc, _ := listPage(t, tg, "?limit=2")
			ascCursor = *asc.Next
		}
	}
	slices.Reverse(ids)
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("paged newest first through %v, want %v", got, ids)
	}
	wantProblem(t, tg.get(t, "/v1/jobs?order=desc&after="+url.QueryEscape(ascCursor)), http.StatusBadRequest, api.CodeInvalidRequest)
}

// TestGetKey: key info for structured and opaque keys (escaped in the path),
// rejected keys with a null job_id, 404 for unknown keys, 400 for invalid ones.
func TestGetKey(t *testing.T) {
	_, addr := startManager(t, managertest.Options{Config: func(c *manager.Config) {
		c.AllowedJobTypes = []string{"send_invoice"} // "no" is refused
	}})
	tg := startGate(t, []string{addr}, nil)

	keyInfo := func(key string) (api.KeyInfo, map[string]json.RawMessage) {
		t.Helper()
		res := tg.get(t, "/v1/idempotency-keys/"+url.PathEscape(key))
		wantStatus(t, res, http.StatusOK)
		wantHeader(t, res, "Content-Type", api.ContentTypeJSON)
		var raw map[string]json.RawMessage
		var info api.KeyInfo
		if err := json.Unmarshal(res.body, &raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(res.body, &info); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(api.TimeFormat, info.ExpiresAt); err != nil {
			t.Fatalf("expires_at %q: %v", info.ExpiresAt, err)
		}
		return info, raw
	}

	job := wantJob(t, tg.submit(t, skey(42), invoiceBody), http.StatusCreated)
	info, raw := keyInfo(skey(42))
	if info.Key != skey(42) || info.State != api.KeyStateCommitted || info.JobID == nil || *info.JobID != job.JobID ||
		info.ClientID != "host1.dc1:12345" || info.Sequence == nil || *info.Sequence != 42 || info.Nonce != nonce {
		t.Fatalf("structured key info %+v", info)
	}
	for _, m := range []string{"key", "state", "job_id", "expires_at", "client_id", "sequence", "nonce"} {
		if _, ok := raw[m]; !ok {
			t.Fatalf("key info lacks %q", m)
		}
	}

	// "." and "..", escaped as url.PathEscape escapes them (as themselves),
	// are keys, not dot-segments of the path to clean away.
	for _, opaque := range []string{"0193a5c8-7d4e-7b2a-9f3c-1e2d3c4b5a69", "a/b?c%d#e:f", ".", ".."} {
		job := wantJob(t, tg.submit(t, opaque, invoiceBody), http.StatusCreated)
		info, raw := keyInfo(opaque)
		if info.Key != opaque || info.State != api.KeyStateCommitted || info.JobID == nil || *info.JobID != job.JobID {
			t.Fatalf("opaque key info %+v", info)
		}
		for _, m := range []string{"client_id", "sequence", "nonce"} {
			if _, ok := raw[m]; ok {
				t.Fatalf("opaque key info has %q", m)
			}
		}
	}

	wantProblem(t, tg.submit(t, skey(43), `{"type":"no"}`), http.StatusUnprocessableEntity, api.CodeJobRejected)
	info, raw = keyInfo(skey(43))
	if info.State != api.KeyStateRejected || string(raw["job_id"]) != "null" {
		t.Fatalf("rejected key info %+v, job_id %s", info, raw["job_id"])
	}

	// An sf-string in the path is the key without its quotes.
	info, _ = keyInfo(`"` + skey(42) + `"`)
	if info.Key != skey(42) {
		t.Fatalf("sf-string key info %+v", info)
	}

	wantProblem(t, tg.get(t, "/v1/idempotency-keys/"+url.PathEscape(skey(44))), http.StatusNotFound, api.CodeIdempotencyKeyNotFound)
	p := wantProblem(t, tg.get(t, "/v1/idempotency-keys/"+url.PathEscape("c:1:xyz")), http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
	if !strings.Contains(p.Detail, "nonce") {
		t.Fatalf("detail %q", p.Detail)
	}
}

// TestReadsUnavailable: reads that reach no leader are 503 with Retry-After; a
// manager failure is 500 internal.
func TestReadsUnavailable(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ForwardTimeout = 100 * time.Millisecond })
	mgr.SetReadError(rpc.Errorf(rpc.CodeUnavailable, "no leader"))
	for _, path := range []string{"/v1/jobs/x", "/v1/jobs", "/v1/idempotency-keys/k"} {
		res := tg.get(t, path)
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		wantHeader(t, res, api.HeaderRetryAfter, "1")
	}
	mgr.SetReadError(rpc.Errorf(rpc.CodeInternal, "boom"))
	wantProblem(t, tg.get(t, "/v1/jobs/x"), http.StatusInternalServerError, api.CodeInternal)
}

// TestTenancy: with a token file a missing or unknown token is 401; tenants are
// isolated (the same key is two submissions; another tenant's job or key is
// 404).
func TestTenancy(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(`# token tenant
tok-alpha alpha
	tok-alpha-2	  alpha   

tok-beta beta
  # an indented comment
`), 0o600); err != nil {
		t.Fatal(err)
	}
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = tokenFile })
	alpha := []string{"Authorization", "Bearer tok-alpha"}
	alpha2 := []string{"Authorization", "bearer tok-alpha-2"}
	beta := []string{"Authorization", "Bearer tok-beta"}

	for _, hdr := range [][]string{nil, {"Authorization", "Bearer nope"}, {"Authorization", "Basic dG9rLWFscGhhOg=="},
		{"Authorization", "Bearer"}, {"Authorization", "tok-alpha"}, {"Authorization", "Bearer tok-alpha", "Authorization", "Bearer tok-beta"}} {
		for _, req := range []func() result{
			func() result { return tg.submit(t, skey(1), invoiceBody, hdr...) },
			func() result { return tg.get(t, "/v1/jobs", hdr...) },
			func() result { return tg.get(t, "/v1/jobs/x", hdr...) },
			func() result { return tg.get(t, "/v1/idempotency-keys/x", hdr...) },
		} {
			res := req()
			wantProblem(t, res, http.StatusUnauthorized, api.CodeUnauthorized)
			wantHeader(t, res, "WWW-Authenticate", `Bearer realm="once"`)
		}
	}
	if mgr.Submits() != 0 {
		t.Fatal("an unauthenticated submission was forwarded")
	}
	wantStatus(t, tg.get(t, "/healthz"), http.StatusOK)

	a := tg.submit(t, skey(1), invoiceBody, alpha...)
	jobA := wantJob(t, a, http.StatusCreated)
	b := tg.submit(t, skey(1), invoiceBody, beta...)
	jobB := wantJob(t, b, http.StatusCreated)
	wantHeader(t, b, api.HeaderReplayed, "false")
	if jobA.JobID == jobB.JobID {
		t.Fatal("two tenants' submissions of one key share a job")
	}
	again := tg.submit(t, skey(1), invoiceBody, alpha2...)
	wantHeader(t, again, api.HeaderReplayed, "true")
	if !bytes.Equal(again.body, a.body) {
		t.Fatal("the tenant's second token got another answer")
	}

	wantJob(t, tg.get(t, "/v1/jobs/"+jobA.JobID, alpha...), http.StatusOK)
	wantProblem(t, tg.get(t, "/v1/jobs/"+jobA.JobID, beta...), http.StatusNotFound, api.CodeJobNotFound)
	wantJob(t, tg.submit(t, skey(2), invoiceBody, alpha...), http.StatusCreated)
	wantStatus(t, tg.get(t, "/v1/idempotency-keys/"+url.PathEscape(skey(2)), alpha...), http.StatusOK)
	wantProblem(t, tg.get(t, "/v1/idempotency-keys/"+url.PathEscape(skey(2)), beta...), http.StatusNotFound, api.CodeIdempotencyKeyNotFound)

	res := tg.get(t, "/v1/jobs", beta...)
	var list api.JobList
	if err := json.Unmarshal(res.body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 1 || list.Jobs[0].JobID != jobB.JobID {
		t.Fatalf("beta lists %+v, want only its own job", list.Jobs)
	}
}

// TestNoTokenFileIsDefaultTenant: without a token file every request is tenant
// "default", whatever Authorization says.
func TestNoTokenFileIsDefaultTenant(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	a := tg.submit(t, skey(1), invoiceBody)
	b := tg.submit(t, skey(1), invoiceBody, "Authorization", "Bearer whatever")
	wantHeader(t, b, api.HeaderReplayed, "true")
	if !bytes.Equal(a.body, b.body) {
		t.Fatal("Authorization changed the tenant without a token file")
	}
}
