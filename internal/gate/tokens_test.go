package gate

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// A token revoked in the token file is refused once the gate has reloaded
// the file, without a restart; a token added is accepted. A file that cannot
// be used keeps the tokens loaded before.
func TestTokenFileReloadRevokesWithoutRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) { replaceFile(t, path, content) }
	write("tok-alpha alpha\ntok-beta beta\n")
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = path })
	status := func(token string) int {
		return tg.get(t, "/v1/jobs/x", "Authorization", "Bearer "+token).status
	}
	if s := status("tok-alpha"); s == http.StatusUnauthorized {
		t.Fatal("tok-alpha refused before the reload")
	}

	// The watcher, as Serve runs it, at a test's pace.
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); tg.tokens.Watch(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-watched }()

	write("tok-beta beta\ntok-gamma gamma\n")
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return status("tok-alpha") == http.StatusUnauthorized, "tok-alpha refused after the reload"
	})
	wantProblem(t, tg.get(t, "/v1/jobs/x", "Authorization", "Bearer tok-alpha"), http.StatusUnauthorized, api.CodeUnauthorized)
	for _, tok := range []string{"tok-beta", "tok-gamma"} {
		if s := status(tok); s == http.StatusUnauthorized {
			t.Fatalf("%s refused after the reload", tok)
		}
	}

	// An invalid file is not loaded: the tokens in use stay.
	write("tok-delta\n")
	loaded, err := tg.tokens.Reload()
	if loaded || !errors.Is(err, config.ErrInvalid) || !errors.Is(err, ErrTokenFile) {
		t.Fatalf("reload of an invalid file: %v, %v; want a GATE_TOKEN_FILE error", loaded, err)
	}
	if s := status("tok-gamma"); s == http.StatusUnauthorized {
		t.Fatal("tok-gamma refused after an invalid file")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.tokens.Reload(); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("reload of a missing file: %v", err)
	}
	if s := status("tok-gamma"); s == http.StatusUnauthorized {
		t.Fatal("tok-gamma refused after the file was removed")
	}
}

// An operator's token (GATE_OPERATOR_TOKEN_FILE) is no tenant's: a token
// file holding one is refused at start (exit 2 from Main: a config error
// naming GATE_TOKEN_FILE), and a reload that would bring one in keeps the
// tokens in use, so that a tenant's token never opens GET /v1/cluster.
func TestOperatorTokenIsNoTenantToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		replaceFile(t, p, content)
		return p
	}
	ops := write("operators", "tok-ops alice\n")
	shared := write("shared", "tok-alpha alpha\ntok-ops beta\n")
	cfg := DefaultConfig()
	cfg.Insecure = true
	cfg.OperatorTokenFile, cfg.TokenFile = ops, shared
	if _, err := New(cfg, Deps{}); !errors.Is(err, config.ErrInvalid) || !errors.Is(err, ErrTokenFile) {
		t.Fatalf("a token in both files: %v; want a GATE_TOKEN_FILE error", err)
	}

	tenants := write("tenants", "tok-alpha alpha\n")
	cfg.TokenFile = tenants
	g, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	write("tenants", "tok-alpha alpha\ntok-ops beta\n")
	if loaded, err := g.tokens.Reload(); loaded || !errors.Is(err, ErrTokenFile) {
		t.Fatalf("a reload bringing in an operator's token: loaded %v, err %v", loaded, err)
	}
	if _, ok := g.tokens.tenant("Bearer tok-ops"); ok {
		t.Fatal("an operator's token is a tenant's after the reload")
	}
	if _, ok := g.tokens.tenant("Bearer tok-alpha"); !ok {
		t.Fatal("tok-alpha refused after a reload that was not loaded")
	}
}

// A token replaced by another of the same length, at the same modification
// time (a revocation within one tick of the file system's clock, or a file
// restored with its old time), is seen: the gate reloads the file when its
// content changes, not only its modification time or size.
func TestTokenFileReloadSeesARewriteOfTheSameSizeAndTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("tok-alpha alpha\n")
	f, err := openTokenFiles(path, "", testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	write("tok-omega alpha\n")
	if loaded, err := f.Reload(); !loaded || err != nil {
		t.Fatalf("a rewrite of the same size and time: loaded %v, err %v", loaded, err)
	}
	if _, ok := f.tenant("Bearer tok-alpha"); ok {
		t.Fatal("the revoked token is still accepted")
	}
	if tenant, ok := f.tenant("Bearer tok-omega"); !ok || tenant != "alpha" {
		t.Fatalf("the new token: %q, %v", tenant, ok)
	}
	// The same content again is no change.
	write("tok-omega alpha\n")
	if loaded, err := f.Reload(); loaded || err != nil {
		t.Fatalf("the same content: loaded %v, err %v", loaded, err)
	}
}

// replaceFile writes content beside path and renames it over path, as a
// deployment does: a reader never sees a half-written file.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// An operator's token revoked in GATE_OPERATOR_TOKEN_FILE is refused once
// the gate has reloaded its token files, without a restart, and one added
// is accepted; an operators' file that would make a tenant's token an
// operator's is not loaded (the tokens in use stay), nor is one that cannot
// be used. A gate with operators' tokens and no tenants' file keeps its
// tenant routes open, as at start.
func TestOperatorTokenFileReloadRevokesWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	tenants, operators := filepath.Join(dir, "tenants"), filepath.Join(dir, "operators")
	replaceFile(t, tenants, "tok-alpha alpha\n")
	replaceFile(t, operators, "tok-ops alice\n")
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile, cfg.OperatorTokenFile = tenants, operators })
	cluster := func(token string) int {
		return tg.get(t, "/v1/cluster", "Authorization", "Bearer "+token).status
	}
	if s := cluster("tok-ops"); s != http.StatusOK {
		t.Fatalf("GET /v1/cluster with the operator's token before the reload: %d", s)
	}

	// The watcher, as Serve runs it, at a test's pace.
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); tg.tokens.Watch(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-watched }()

	replaceFile(t, operators, "tok-ops2 bob\n")
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return cluster("tok-ops") == http.StatusUnauthorized, "the revoked operator's token refused after the reload"
	})
	wantProblem(t, tg.get(t, "/v1/cluster", "Authorization", "Bearer tok-ops"), http.StatusUnauthorized, api.CodeUnauthorized)
	if s := cluster("tok-ops2"); s != http.StatusOK {
		t.Fatalf("GET /v1/cluster with the added operator's token: %d", s)
	}
	cancel()
	<-watched

	// A tenant's token made an operator's: not loaded; both files' tokens
	// in use stay as they were.
	replaceFile(t, operators, "tok-ops3 carol\ntok-alpha dave\n")
	if loaded, err := tg.tokens.Reload(); loaded || !errors.Is(err, config.ErrInvalid) || !errors.Is(err, ErrTokenFile) {
		t.Fatalf("an operators' file holding a tenant's token: loaded %v, err %v", loaded, err)
	}
	if s := cluster("tok-alpha"); s != http.StatusUnauthorized {
		t.Fatalf("a tenant's token opened GET /v1/cluster: %d", s)
	}
	if s := cluster("tok-ops3"); s != http.StatusUnauthorized {
		t.Fatalf("an operator's token of a file not loaded was accepted: %d", s)
	}
	if s := cluster("tok-ops2"); s != http.StatusOK {
		t.Fatalf("the operator's token in use refused after a file not loaded: %d", s)
	}
	// An operators' file that cannot be used names its variable.
	replaceFile(t, operators, "tok-ops4\n")
	var cerr *config.Error
	if _, err := tg.tokens.Reload(); !errors.Is(err, ErrTokenFile) || !errors.As(err, &cerr) || cerr.Env != EnvOperatorTokenFile {
		t.Fatalf("an invalid operators' file: %v; want a %s error", err, EnvOperatorTokenFile)
	}
	if s := cluster("tok-ops2"); s != http.StatusOK {
		t.Fatalf("the operator's token in use refused after an invalid file: %d", s)
	}

	// Operators' tokens alone: the tenant routes stay open (tenant
	// "default"), the cluster view takes an operator's token.
	replaceFile(t, operators, "tok-ops alice\n")
	opsOnly := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.OperatorTokenFile = operators })
	if r := opsOnly.get(t, "/v1/jobs/x"); r.status == http.StatusUnauthorized {
		t.Fatal("a gate with operators' tokens only refused a tenant route without a token")
	}
	wantProblem(t, opsOnly.get(t, "/v1/cluster"), http.StatusUnauthorized, api.CodeUnauthorized)
	wantStatus(t, opsOnly.get(t, "/v1/cluster", "Authorization", "Bearer tok-ops"), http.StatusOK)
}

// A token file that cannot be used (a bad line, an empty file) leaves the
// tokens loaded before valid, a revoked one among them: /metrics shows it,
// once_gate_token_files_last_reload_successful 0 and the time of the last
// load unchanged. A good file after makes it 1 and moves the time.
func TestTokenFileFailedReloadIsShownAtMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	replaceFile(t, path, "tok-alpha alpha\ntok-beta beta\n")
	_, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.TokenFile = path })
	gauge := func(name string) float64 {
		t.Helper()
		return gaugeValue(t, tg.metrics.reg, "once_gate_token_files_"+name, nil)
	}
	if ok := gauge("last_reload_successful"); ok != 1 {
		t.Fatalf("after the load at start: successful %v", ok)
	}
	loadedAt := gauge("last_reload_success_timestamp_seconds")
	if loadedAt == 0 {
		t.Fatal("no time of the load at start")
	}
	for _, bad := range []string{"tok-beta beta\nnot a line\n", ""} {
		// tok-alpha revoked, in a file that cannot be used.
		replaceFile(t, path, bad)
		if _, err := tg.tokens.Reload(); !errors.Is(err, ErrTokenFile) {
			t.Fatalf("%q: %v", bad, err)
		}
		if ok, at := gauge("last_reload_successful"), gauge("last_reload_success_timestamp_seconds"); ok != 0 || at != loadedAt {
			t.Fatalf("%q: successful %v, loaded at %v (before %v); want 0 and unchanged", bad, ok, at, loadedAt)
		}
		if _, ok := tg.tokens.tenant("Bearer tok-alpha"); !ok {
			t.Fatalf("%q: the tokens loaded before are no longer in use", bad)
		}
	}
	replaceFile(t, path, "tok-beta beta\n")
	if loaded, err := tg.tokens.Reload(); !loaded || err != nil {
		t.Fatalf("a good file: loaded %v, err %v", loaded, err)
	}
	if ok, at := gauge("last_reload_successful"), gauge("last_reload_success_timestamp_seconds"); ok != 1 || at <= loadedAt {
		t.Fatalf("a good file: successful %v, loaded at %v (before %v); want 1 and later", ok, at, loadedAt)
	}
	if _, ok := tg.tokens.tenant("Bearer tok-alpha"); ok {
		t.Fatal("the revoked token is still accepted")
	}
}

// gaugeValue is the value of the gauge name of reg whose labels include
// labels; the test fails without one.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s%v", name, labels)
	return 0
}
