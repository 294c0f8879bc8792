package gate

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// GATE_PPROF's profiles are served on the public listener: with a token
// file they take an operator's token, as GET /v1/cluster does (a tenant's,
// an unknown one or none is 401, and nothing is profiled); with no token
// file of either kind (development) they are open.
func TestPprofNeedsAnOperatorTokenWithTokenFiles(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tok-alpha alpha\n")
	operators := writeFile(t, "operators", "tok-ops alice\n")
	paths := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/goroutine?debug=1",
		"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"}

	both := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.Pprof, cfg.TokenFile, cfg.OperatorTokenFile = true, tenants, operators
	})
	tenantsOnly := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Pprof, cfg.TokenFile = true, tenants })
	for _, p := range paths {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer tok-alpha"}, {"Authorization", "Bearer nope"}} {
			for _, tg := range []*testGate{both, tenantsOnly} {
				r := tg.get(t, p, hdr...)
				wantProblem(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
				wantHeader(t, r, "WWW-Authenticate", `Bearer realm="once"`)
			}
		}
	}
	wantStatus(t, both.get(t, "/debug/pprof/cmdline", "Authorization", "Bearer tok-ops"), http.StatusOK)
	wantStatus(t, both.get(t, "/debug/pprof/goroutine?debug=1", "Authorization", "Bearer tok-ops"), http.StatusOK)

	open := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.Pprof = true })
	wantStatus(t, open.get(t, "/debug/pprof/cmdline"), http.StatusOK)
	// Without GATE_PPROF there is no such route, whoever asks.
	off := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile, cfg.OperatorTokenFile = tenants, operators })
	wantProblem(t, off.get(t, "/debug/pprof/cmdline", "Authorization", "Bearer tok-ops"), http.StatusNotFound, api.CodeNotFound)
}

// The method label of the requests counter is one of HTTP's methods or
// "other": a method is the client's to choose, and a series for each
// would let anyone who reaches the gate, without a token, grow its memory
// and its /metrics answer without end.
func TestMetricsMethodLabelIsBounded(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tok-alpha alpha\n")
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = tenants })
	for _, m := range []string{"PROBE1", "PROBE2", "PROBE3"} {
		wantProblem(t, tg.do(t, m, "/v1/jobs", nil), http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
	}
	wantStatus(t, tg.do(t, http.MethodDelete, "/v1/jobs", nil), http.StatusMethodNotAllowed)
	text := string(tg.get(t, "/metrics").body)
	if strings.Contains(text, "PROBE") {
		t.Errorf("a client's method is a label value:\n%s", text)
	}
	for _, want := range []string{
		`once_gate_http_requests_total{code="method_not_allowed",datacenter="dc1",method="other",node="test-gate",route="unmatched",status="405"} 3`,
		`once_gate_http_requests_total{code="method_not_allowed",datacenter="dc1",method="DELETE",node="test-gate",route="unmatched",status="405"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// A listing's cursor positions a walk of the caller's own jobs only: a
// cursor minted for one tenant, given by another (as it is, or forged from
// another position or order), lists none of the first tenant's jobs.
func TestListCursorStaysInItsCallersTenant(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tok-alpha alpha\ntok-beta beta\n")
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = tenants })
	alpha := []string{"Authorization", "Bearer tok-alpha"}
	beta := []string{"Authorization", "Bearer tok-beta"}
	own := map[string]bool{}
	for i := 1; i <= 3; i++ {
		wantJob(t, tg.submit(t, skey(i), `{"type":"x"}`, alpha...), http.StatusCreated)
		own[wantJob(t, tg.submit(t, skey(10+i), `{"type":"x"}`, beta...), http.StatusCreated).JobID] = true
	}
	var page api.JobList
	res := tg.get(t, "/v1/jobs?limit=1", alpha...)
	wantStatus(t, res, http.StatusOK)
	if err := json.Unmarshal(res.body, &page); err != nil || page.Next == nil {
		t.Fatalf("alpha's first page: %s", res.body)
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte("v1:0"))
	for _, q := range []string{"?after=" + url.QueryEscape(*page.Next), "?type=x&after=" + url.QueryEscape(*page.Next), "?after=" + forged} {
		res := tg.get(t, "/v1/jobs"+q, beta...)
		wantStatus(t, res, http.StatusOK)
		var got api.JobList
		if err := json.Unmarshal(res.body, &got); err != nil {
			t.Fatal(err)
		}
		for _, j := range got.Jobs {
			if !own[j.JobID] {
				t.Fatalf("beta lists %s with %s: %s", j.JobID, q, res.body)
			}
		}
	}
}

// Another tenant's job, even with its lease, answers every job route
// exactly as an unknown job of an id as long does: the same status and
// the same bytes but for the id, and it stays untouched.
func TestAnotherTenantsJobIsAnUnknownJob(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tok-alpha alpha\ntok-beta beta\n")
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = tenants })
	alpha := []string{"Authorization", "Bearer tok-alpha"}
	beta := []string{"Authorization", "Bearer tok-beta"}
	a := wantJob(t, tg.submit(t, skey(1), `{"type":"x"}`, alpha...), http.StatusCreated)
	leases := decodeLeases(t, tg.post(t, "/v1/leases", `{}`, alpha...))
	if len(leases) != 1 {
		t.Fatalf("leases %+v", leases)
	}
	unknown := strings.Repeat("0", len(a.JobID))
	lease := `{"lease_id":"` + leases[0].LeaseID + `","lease_seconds":60}`
	for i, c := range []struct{ method, path, body string }{
		{http.MethodGet, "", ""},
		{http.MethodPost, "/heartbeat", lease},
		{http.MethodPost, "/complete", lease},
		{http.MethodPost, "/fail", lease},
		{http.MethodPost, "/cancel", ""},
		{http.MethodPost, "/retry", ""},
	} {
		ask := func(id string, seq int) result {
			hdr := append([]string{api.HeaderIdempotencyKey, skey(seq)}, beta...)
			return tg.do(t, c.method, "/v1/jobs/"+id+c.path, strings.NewReader(c.body), hdr...)
		}
		theirs, none := ask(a.JobID, 100+2*i), ask(unknown, 101+2*i)
		wantProblem(t, theirs, http.StatusNotFound, api.CodeJobNotFound)
		if want := strings.ReplaceAll(string(none.body), unknown, a.JobID); string(theirs.body) != want {
			t.Errorf("%s %s: another tenant's job answers\n%s\nan unknown one\n%s", c.method, c.path, theirs.body, none.body)
		}
	}
	if j := wantJob(t, tg.get(t, "/v1/jobs/"+a.JobID, alpha...), http.StatusOK); j.State != api.JobStatusRunning || j.Attempts != 1 {
		t.Fatalf("alpha's job after beta's calls: %+v", j)
	}
}
