package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestRoutingProblems: unknown paths are 404 not_found, wrong methods 405
// method_not_allowed with Allow, panics 500 internal — all problems, never the
// ServeMux's plain text.
func TestRoutingProblems(t *testing.T) {
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)
	tg.route("GET /test/panic", func(http.ResponseWriter, *http.Request) { panic("test panic") })

	for _, path := range []string{"/", "/nope", "/v1", "/v1/jobs/", "/v1/idempotency-keys/", "/v2/jobs", "/v1/jobs/a/b"} {
		wantProblem(t, tg.get(t, path), http.StatusNotFound, api.CodeNotFound)
	}
	wantProblem(t, tg.do(t, http.MethodPost, "/v1/jobs/", nil), http.StatusNotFound, api.CodeNotFound)

	tests := []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/v1/jobs", "GET, HEAD, POST"},
		{http.MethodDelete, "/v1/jobs", "GET, HEAD, POST"},
		{http.MethodPatch, "/v1/jobs/x", "GET, HEAD"},
		{http.MethodPost, "/v1/jobs/x", "GET, HEAD"},
		{http.MethodPost, "/v1/idempotency-keys/k", "GET, HEAD"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodDelete, "/metrics", "GET, HEAD"},
		{http.MethodOptions, "/readyz", "GET, HEAD"},
	}
	for _, tt := range tests {
		res := tg.do(t, tt.method, tt.path, nil)
		wantProblem(t, res, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
		wantHeader(t, res, "Allow", tt.allow)
	}

	// A path that needs cleaning is redirected, without a text body.
	res := tg.get(t, "/v1//jobs")
	if res.status != http.StatusTemporaryRedirect || res.header.Get("Location") != "/v1/jobs" || len(res.body) != 0 {
		t.Fatalf("unclean path: %s", res)
	}

	res = tg.get(t, "/test/panic")
	wantProblem(t, res, http.StatusInternalServerError, api.CodeInternal)
	// The gate still serves.
	wantStatus(t, tg.get(t, "/healthz"), http.StatusOK)
}

// TestEveryAnswerIsNosniff: docs/api.md, Conventions: "Every answer has
// X-Content-Type-Options: nosniff" — the redirects the gate writes in the
// ServeMux's place (a path that needs cleaning, /ui to /ui/) and /metrics
// included, not only the problems and JSON bodies.
func TestEveryAnswerIsNosniff(t *testing.T) {
	tg := startGate(t, nil, nil)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/v1//jobs", http.StatusTemporaryRedirect},
		{"/ui", http.StatusTemporaryRedirect},
		{"/metrics", http.StatusOK},
		{"/healthz", http.StatusOK},
		{"/nope", http.StatusNotFound},
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			res := tg.do(t, method, tc.path, nil)
			wantStatus(t, res, tc.status)
			wantHeader(t, res, "X-Content-Type-Options", "nosniff")
		}
	}
}

// TestHealthReadyMetrics: /healthz is 200 while serving; /readyz follows the
// manager leader; /metrics is Prometheus text with the gate's, the cache's, the
// Go runtime's and the process's metrics.
func TestHealthReadyMetrics(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, nil)

	res := tg.get(t, "/healthz")
	wantStatus(t, res, http.StatusOK)
	wantHeader(t, res, "Content-Type", api.ContentTypeJSON)
	wantStatus(t, tg.get(t, "/readyz"), http.StatusOK)
	mgr.SetLeader(false)
	res = tg.get(t, "/readyz")
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	wantStatus(t, tg.get(t, "/healthz"), http.StatusOK)
	mgr.SetLeader(true)
	wantStatus(t, tg.get(t, "/readyz"), http.StatusOK)

	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	wantJob(t, tg.submit(t, skey(1), invoiceBody), http.StatusCreated)
	tg.get(t, "/nope")
	res = tg.get(t, "/metrics")
	wantStatus(t, res, http.StatusOK)
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("metrics Content-Type %q", ct)
	}
	text := string(res.body)
	for _, want := range []string{
		`once_gate_http_requests_total{code="none",datacenter="dc1",method="POST",node="test-gate",route="POST /v1/jobs",status="201"} 2`,
		`once_gate_http_requests_total{code="not_found",datacenter="dc1",method="GET",node="test-gate",route="unmatched",status="404"} 1`,
		`once_gate_http_requests_total{code="unavailable",datacenter="dc1",method="GET",node="test-gate",route="GET /readyz",status="503"} 1`,
		`once_gate_cache_hits_total{datacenter="dc1",node="test-gate"} 1`,
		`once_gate_cache_misses_total{datacenter="dc1",node="test-gate"} 1`,
		`once_gate_cache_entries{datacenter="dc1",node="test-gate"} 1`,
		`once_gate_replays_total{datacenter="dc1",node="test-gate"} 1`,
		`once_gate_forward_duration_seconds_count{datacenter="dc1",node="test-gate",outcome="committed"} 1`,
		"once_gate_http_request_duration_seconds_bucket",
		"once_gate_cache_waits_total",
		"once_gate_cache_evictions_total",
		"go_goroutines",
		"process_start_time_seconds",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestParseTokens: the token file's format and its errors.
func TestParseTokens(t *testing.T) {
	tt, err := parseTokens(strings.NewReader("# c\n\n t1 alpha \nt2\tbeta\nYWJj+/_-.~== gamma\n"))
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]string{"Bearer t1": "alpha", "BEARER t2": "beta", "Bearer  YWJj+/_-.~==": "gamma"} {
		if got, ok := tt.tenant(header); !ok || got != want {
			t.Errorf("tenant(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
	for _, header := range []string{"", "Bearer", "Bearer ", "Bearer t3", "Basic t1", "t1", "Bearer t1 x"} {
		if got, ok := tt.tenant(header); ok {
			t.Errorf("tenant(%q) = %q, want none", header, got)
		}
	}

	bad := []struct {
		name, file string
		line       int
	}{
		{"one field", "t1\n", 1},
		{"three fields", "# x\nt1 alpha extra\n", 2},
		{"bad token", "t1 alpha\nt@2 beta\n", 2},
		{"only equals", "== alpha\n", 1},
		{"bad tenant", "t1 al/pha\n", 1},
		{"duplicate token", "t1 alpha\nt1 beta\n", 2},
		{"no tokens", "# nothing\n\n", 0},
		{"empty", "", 0},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := parseTokens(strings.NewReader(b.file))
			var te *TokenFileError
			if !errors.Is(err, ErrTokenFile) || !errors.As(err, &te) || te.Line != b.line {
				t.Fatalf("err = %v, want a TokenFileError on line %d", err, b.line)
			}
		})
	}
}

// TestNewRejectsBadTokenFile: a missing or invalid token file stops New with an
// error naming GATE_TOKEN_FILE.
func TestNewRejectsBadTokenFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("only-a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), bad} {
		cfg := DefaultConfig()
		cfg.TokenFile = path
		_, err := New(cfg, Deps{})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), EnvTokenFile) {
			t.Fatalf("New with token file %s: %v, want an invalid-config error naming %s", path, err, EnvTokenFile)
		}
	}
}

// TestConfigValidate: Validate names the variable of a bad field.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		env    string
		change func(*Config)
	}{
		{EnvListenAddr, func(c *Config) { c.ListenAddr = "nowhere" }},
		{EnvDatacenter, func(c *Config) { c.Datacenter = "dc 1" }},
		{EnvManagers, func(c *Config) { c.Managers = []string{"127.0.0.1:1", "no-port"} }},
		{EnvMaxBodyBytes, func(c *Config) { c.MaxBodyBytes = 10 }},
		{EnvForwardTimeout, func(c *Config) { c.ForwardTimeout = 0 }},
		{config.EnvMaxEntries, func(c *Config) { c.Idempotency.MaxEntries = 0 }},
		{config.EnvPendingWaitTimeout, func(c *Config) { c.Idempotency.PendingWaitTimeout = -1 }},
		{EnvLogLevel, func(c *Config) { c.LogLevel = "loud" }},
		{EnvGossipAdvertise, func(c *Config) { c.GossipAdvertise = "0.0.0.0:7300" }},
		{EnvGossipAdvertise, func(c *Config) { c.GossipAdvertise = "gate1" }},
		{EnvLogFormat, func(c *Config) { c.LogFormat = "xml" }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.change(&cfg)
		err := cfg.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Env != tt.env || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want a *config.Error naming it", tt.env, err)
		}
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// TestValidateAsLoadConfig: a Config built in code with a value out of its
// range or form fails Validate, and New, with the same *config.Error as
// LoadConfig gives for that value in the environment.
func TestValidateAsLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		set        func(*Config)
	}{
		{EnvMaxBodyBytes, "10", func(c *Config) { c.MaxBodyBytes = 10 }},
		{EnvCacheMaxBytes, "1024", func(c *Config) { c.CacheMaxBytes = 1024 }},
		{EnvForwardTimeout, "0.05", func(c *Config) { c.ForwardTimeout = 50 * time.Millisecond }},
		{config.EnvCleanupInterval, "0.5", func(c *Config) { c.Idempotency.CleanupInterval = 500 * time.Millisecond }},
		{EnvMaxTTL, "31536001", func(c *Config) { c.MaxTTL = MaxMaxTTL + time.Second }},
		{EnvGossipProfile, "wan", func(c *Config) { c.GossipProfile = "wan" }},
		{EnvManagers, "127.0.0.1:1,no-port", func(c *Config) { c.Managers = []string{"127.0.0.1:1", "no-port"} }},
	} {
		_, loaded := LoadConfig(nil, config.MapLookup(map[string]string{tc.env: tc.value}), io.Discard)
		cfg := DefaultConfig()
		tc.set(&cfg)
		err := cfg.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Env != tc.env || ce.Value != tc.value || !reflect.DeepEqual(err, loaded) {
			t.Errorf("%s: Validate() = %v, LoadConfig with %s=%s: %v; want the same *config.Error", tc.env, err, tc.env, tc.value, loaded)
		}
		if _, err := New(cfg, Deps{}); !reflect.DeepEqual(err, loaded) {
			t.Errorf("%s: New = %v, want %v", tc.env, err, loaded)
		}
	}
}

// signalHandler is a slog handler that passes records on and closes a channel
// when a record with the message msg goes through.
type signalHandler struct {
	slog.Handler
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h signalHandler) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// TestServeDrainsInFlight: when Serve's context ends, a submission in flight
// still gets its answer before Serve returns nil.
func TestServeDrainsInFlight(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	shuttingDown := make(chan struct{})
	logger := slog.New(signalHandler{Handler: testutil.Logger(t).Handler(), msg: "gate shutting down", once: new(sync.Once), ch: shuttingDown})
	cfg := DefaultConfig()
	cfg.Managers = []string{addr}
	g, err := New(cfg, Deps{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()

	reserved, release := holdFirstSubmit(t, mgr)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	answer := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/jobs", strings.NewReader(invoiceBody))
		req.Header.Set(api.HeaderIdempotencyKey, skey(1))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Errorf("submit: %v", err)
		}
		answer <- resp
	}()
	<-reserved
	cancel()
	<-shuttingDown
	release()
	resp := <-answer
	if resp == nil {
		t.FailNow()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("in-flight submission got HTTP %d", resp.StatusCode)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener still accepts after Serve returned")
	}
}
