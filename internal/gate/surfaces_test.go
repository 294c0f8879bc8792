package gate

import (
	"net/http"
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
