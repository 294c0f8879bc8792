package gate

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/console"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// The console is served by the gate at /ui/ with its security headers; an
// unknown page is a 404 problem with them too.
func TestConsoleServed(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	r := tg.get(t, "/ui/")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "app.js") {
		t.Fatalf("GET /ui/: %v", r)
	}
	if got := r.header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
		t.Errorf("CSP %q", got)
	}
	if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", r.header)
	}
	if r := tg.get(t, "/ui/app.js"); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /ui/app.js: %d %s", r.status, r.header.Get("Content-Type"))
	}
	r = tg.get(t, "/ui/missing.js")
	if r.status != http.StatusNotFound || r.header.Get("Content-Type") != api.ContentTypeProblem ||
		r.header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /ui/missing.js: %v", r)
	}
	if r := tg.get(t, "/ui"); r.status/100 != 3 || r.header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %v, want a redirect to /ui/", r.status, r.header)
	}
}

// A method the console does not serve, on any of its paths, is a 405
// problem that carries the console's security headers as its 200s and 404s
// do: every answer under /ui/ does (docs/console.md).
func TestConsoleHeadersOnEveryMethod(t *testing.T) {
	tg := startGate(t, []string{"127.0.0.1:1"}, nil)
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/missing.js"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions} {
			r := tg.do(t, method, path, nil)
			wantProblem(t, r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
			want := http.Header{}
			console.SetHeaders(want)
			for name := range want {
				if got := r.header.Get(name); got != want.Get(name) {
					t.Errorf("%s %s: %s %q, want %q", method, path, name, got, want.Get(name))
				}
			}
		}
	}
}

// The console's file server answers its own errors, a failed If-Match
// (412) and a Range past the end of a file (416), as problems, as every
// error of the gate is (docs/api.md, Errors), with the console's security
// headers; a 416 keeps its Content-Range.
func TestConsoleErrorsAreProblems(t *testing.T) {
	tg := startGate(t, []string{"127.0.0.1:1"}, nil)
	for _, tc := range []struct {
		hdr    []string
		status int
	}{
		{[]string{"If-Match", `"not-the-etag"`}, http.StatusPreconditionFailed},
		{[]string{"Range", "bytes=99999999-"}, http.StatusRequestedRangeNotSatisfiable},
	} {
		r := tg.get(t, "/ui/app.js", tc.hdr...)
		wantProblem(t, r, tc.status, api.CodeInvalidRequest)
		want := http.Header{}
		console.SetHeaders(want)
		for name := range want {
			if got := r.header.Get(name); got != want.Get(name) {
				t.Errorf("%s: %s %q, want %q", tc.hdr, name, got, want.Get(name))
			}
		}
		if tc.status == http.StatusRequestedRangeNotSatisfiable && !strings.HasPrefix(r.header.Get("Content-Range"), "bytes */") {
			t.Errorf("%s: Content-Range %q", tc.hdr, r.header.Get("Content-Range"))
		}
	}
}

// writeFile writes a file in the test's directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// GET /v1/cluster takes an operator's token only; a tenant's is 401, and
// no token reaches the logs, whatever the route.
func TestClusterNeedsOperatorToken(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tenant-secret-token-1 acme\n")
	operators := writeFile(t, "operators", "operator-secret-token-9 alice\n")
	var logs testutil.Buffer
	tg := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		cfg.TokenFile, cfg.OperatorTokenFile = tenants, operators
		deps.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer tenant-secret-token-1"}, {"Authorization", "Bearer nope"}} {
		if r := tg.get(t, "/v1/cluster", hdr...); r.status != http.StatusUnauthorized {
			t.Errorf("GET /v1/cluster %v: %v", hdr, r)
		}
	}
	r := tg.get(t, "/v1/cluster", "Authorization", "Bearer operator-secret-token-9")
	if r.status != http.StatusOK {
		t.Fatalf("operator: %v", r)
	}
	var v api.Cluster
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Leader == nil || v.Leader.NodeID != "m1" || len(v.Managers) != 1 || v.Managers[0].Addr != addr ||
		v.Managers[0].Status == nil || len(v.Gates) != 1 || v.Gates[0].Name != "test-gate" ||
		len(v.Datacenters) != 1 || v.Datacenters[0].Name != "dc1" {
		t.Errorf("view %s", r.body)
	}
	// The tenant's calls (the console's included) log the tenant, never the token.
	tg.get(t, "/ui/", "Authorization", "Bearer tenant-secret-token-1")
	tg.get(t, "/v1/jobs", "Authorization", "Bearer tenant-secret-token-1")
	out := logs.String()
	if !strings.Contains(out, "tenant=acme") || !strings.Contains(out, "operator:alice") {
		t.Errorf("the access log lacks the tenant or operator:\n%s", out)
	}
	for _, secret := range []string{"tenant-secret-token-1", "operator-secret-token-9"} {
		if strings.Contains(out, secret) {
			t.Errorf("a token is in the logs:\n%s", out)
		}
	}
}

// A gate without any token file is open (development), and a manager that
// does not answer is listed with its error.
func TestClusterOpenWithoutTokens(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr, "127.0.0.1:1"}, nil)
	r := tg.get(t, "/v1/cluster")
	if r.status != http.StatusOK {
		t.Fatalf("%v", r)
	}
	var v api.Cluster
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	var down *api.ClusterManager
	for i := range v.Managers {
		if v.Managers[i].Addr == "127.0.0.1:1" {
			down = &v.Managers[i]
		}
	}
	if down == nil || down.Error == "" || down.Status != nil {
		t.Errorf("the unreachable manager: %s", r.body)
	}
}

// Only tenant tokens and no operator file: nobody reads the cluster.
func TestClusterClosedWithTenantTokensOnly(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tenants := writeFile(t, "tokens", "tenant-secret-token-1 acme\n")
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = tenants })
	if r := tg.get(t, "/v1/cluster", "Authorization", "Bearer tenant-secret-token-1"); r.status != http.StatusUnauthorized {
		t.Errorf("%v", r)
	}
}

func TestBadOperatorTokenFileStopsNew(t *testing.T) {
	for name, content := range map[string]string{"empty": "", "three fields": "a b c\n"} {
		cfg := DefaultConfig()
		cfg.Managers = []string{"127.0.0.1:1"}
		cfg.OperatorTokenFile = writeFile(t, "ops", content)
		if _, err := New(cfg, Deps{}); err == nil || !strings.Contains(err.Error(), EnvOperatorTokenFile) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
