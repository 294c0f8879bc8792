// Package gate is once's HTTP API (v1): the server that job-submission clients
// talk to. docs/api.md is its contract.
//
// A gate authenticates the tenant, parses the Idempotency-Key, reads, decodes
// and fingerprints the body, then asks its idempotency cache (internal/cache):
// a COMMITTED or REJECTED entry is replayed byte for byte; an entry of another
// fingerprint is 422 idempotency_key_reused; a PENDING entry is waited on; a
// miss is forwarded to the datacenter's manager leader (internal/rpc), whose
// ledger is the authority, and its deterministic outcome is cached; a job
// naming several datacenters is forwarded to each one's leader and the
// outcomes combined (fanout.go, docs/multidc.md). Transient failures are
// answered 503 and never cached.
//
// Reads (GET /v1/jobs/{job_id}, GET /v1/jobs, GET /v1/idempotency-keys/{key})
// go to the leader. GET /healthz, /readyz and /metrics serve operators.
//
// Every error is an RFC 9457 problem (application/problem+json) with a stable
// code, including unknown paths, wrong methods and recovered panics.
package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/cache"
	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/console"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/replay"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// Deps are the gate's collaborators. Zero values take the defaults noted.
type Deps struct {
	// Resolver tells the gate where the datacenter's managers are (default: the
	// static list Config.Managers). Membership discovery plugs in here.
	Resolver rpc.Resolver
	// Logger receives access and error logs (default: discard).
	Logger *slog.Logger
	// Now is the clock of the idempotency cache and of Retry-After values
	// (default time.Now).
	Now func() time.Time
	// Federation lists the other datacenters and their managers (default:
	// none, a job may name only the gate's own datacenter).
	Federation Federation
	// ClusterSecret is the secret presented to the managers' RPC (default:
	// read from Config.ClusterSecretFile, if set).
	ClusterSecret string
	// ClusterTLS is the gate's side of the managers' mutual TLS (default:
	// loaded from Config.RPCTLS*, if set; nil: plain TCP).
	ClusterTLS *certs.Cluster
	// Registry is where the gate registers its metrics, served at /metrics
	// (default: a registry of its own). Main passes the one that also holds
	// memberlist's series (internal/telemetry).
	Registry *prometheus.Registry
	// Dial, when set, opens the gate's connections to managers, its own
	// datacenter's and the others' (rpc.ClientConfig.Dial; default: a plain
	// dial). A test seam: the tests module's fault layer cuts the network
	// between datacenters through it.
	Dial rpc.DialFunc
	// Gates, when set, lists the gates of the datacenter's gossip pool for
	// GET /v1/cluster (default: this gate alone).
	Gates func() []api.ClusterGate
}

// Gate is one gate: its idempotency cache, its client of the manager leader and
// its HTTP handler. Create it with New, serve it with Serve (or mount Handler),
// and Close it when done.
type Gate struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	tokens *tokenFiles     // nil: no token file, every request is tenant "default" and every route open
	secret string          // the cluster secret, "" for none
	certs  *certs.Reloader // GATE_TLS_*: nil serves plain HTTP
	rpcTLS *certs.Cluster  // GATE_RPC_TLS_*: nil reaches the managers over plain TCP
	dial   rpc.DialFunc    // Deps.Dial: nil dials plainly
	client *rpc.Client
	cache  *cache.Cache[*response]
	// workerReplays keeps worker calls' answers by Idempotency-Key (workers.go).
	workerReplays *replay.Memory[*workerAnswer]
	metrics       *metrics
	mux           *http.ServeMux
	// bodies bounds the bytes of request bodies held at once
	// (GATE_MAX_IN_FLIGHT_BODY_BYTES, inflight.go).
	bodies *inflightBodies

	federation Federation // nil: the gate's own datacenter only
	remote     dcClients  // clients of other datacenters' leaders

	// GET /v1/cluster (cluster.go): the datacenter's managers
	// (Deps.Resolver), the pool's gates (Deps.Gates).
	resolver rpc.Resolver
	gatesFn  func() []api.ClusterGate

	closeOnce sync.Once
	closed    chan struct{} // closed by Close
	// stopping is set when Serve's context ends: /readyz answers 503
	// through the shutdown delay (GATE_SHUTDOWN_DELAY_SECONDS) and after.
	stopping atomic.Bool
	// polls ends when the gate starts to stop (Serve) or closes: worker long
	// polls end with it (serveKeyedCall) rather than hold the shutdown.
	polls    context.Context
	endPolls context.CancelFunc

	// testHookWaiting, when set, is called by a duplicate submission after it
	// found a PENDING entry and before it waits (tests synchronise on it).
	testHookWaiting func()
	// testHookSubmitTo, when set, is called by submitTo before it sends to
	// dc, on the goroutine that sends (tests inject a panic there).
	testHookSubmitTo func(dc string)
}

// clusterTLSFor is the gate's side of the managers' mutual TLS:
// GATE_RPC_TLS_* when set, else a gate's leaf of the CA derived from the
// cluster secret, else nil (insecure mode: plain TCP).
func clusterTLSFor(cfg Config, secret string, log *slog.Logger) (*certs.Cluster, error) {
	c, err := certs.LoadCluster(cfg.rpcTLSFiles(), log)
	if err != nil || c != nil || secret == "" {
		return c, err
	}
	c, err = certs.ClusterFromSecret(secret, certs.RoleGate)
	if err != nil {
		return nil, config.Invalid(EnvClusterSecretFile, cfg.ClusterSecretFile, "a cluster secret", err)
	}
	return c, nil
}

// rpcTLSConfig is the TLS configuration of the gate's calls to managers
// (nil: plain TCP).
func (g *Gate) rpcTLSConfig() *tls.Config {
	if g.rpcTLS == nil {
		return nil
	}
	return g.rpcTLS.ClientConfig()
}

// newClient is a client of the managers resolver finds, with the gate's
// cluster secret, TLS and dialer.
func (g *Gate) newClient(resolver rpc.Resolver, log *slog.Logger) *rpc.Client {
	return rpc.NewClient(rpc.ClientConfig{Resolver: resolver, Logger: log, Secret: g.secret, TLS: g.rpcTLSConfig(), Dial: g.dial})
}

// New validates cfg, loads the token file and builds a gate. Configuration
// errors are *config.Error values (matching config.ErrInvalid) that name the
// variable.
func New(cfg Config, deps Deps) (*Gate, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	deps.Logger = logging.OrDiscard(deps.Logger)
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Resolver == nil {
		deps.Resolver = rpc.StaticResolver(append([]string(nil), cfg.Managers...))
	}
	if cfg.NodeName == "" {
		if h, err := os.Hostname(); err == nil {
			cfg.NodeName = h
		}
	}
	g := &Gate{cfg: cfg, log: deps.Logger, now: deps.Now, federation: deps.Federation, dial: deps.Dial,
		resolver: deps.Resolver, gatesFn: deps.Gates, secret: deps.ClusterSecret, rpcTLS: deps.ClusterTLS}
	g.polls, g.endPolls = context.WithCancel(context.Background())
	g.closed = make(chan struct{})
	var err error
	if cfg.TokenFile != "" || cfg.OperatorTokenFile != "" {
		if g.tokens, err = openTokenFiles(cfg.TokenFile, cfg.OperatorTokenFile, g.log.With(logging.KeyComponent, "tokens")); err != nil {
			return nil, err
		}
	}
	if cfg.TLSCertFile != "" {
		if g.certs, err = certs.New(cfg.TLSCertFile, cfg.TLSKeyFile, g.log.With(logging.KeyComponent, "tls")); err != nil {
			return nil, config.Invalid(EnvTLSCertFile, cfg.TLSCertFile, "a readable PEM certificate matching GATE_TLS_KEY_FILE", err)
		}
	}
	if g.secret == "" && cfg.ClusterSecretFile != "" {
		if g.secret, err = config.ReadSecretFile(EnvClusterSecretFile, cfg.ClusterSecretFile); err != nil {
			return nil, err
		}
	}
	if g.rpcTLS == nil {
		if g.rpcTLS, err = clusterTLSFor(cfg, g.secret, g.log); err != nil {
			return nil, err
		}
	}
	g.cache, err = cache.New[*response](cache.Config{
		MaxEntries:      cfg.Idempotency.MaxEntries,
		PendingTTL:      cfg.Idempotency.PendingTTL,
		CleanupInterval: cfg.Idempotency.CleanupInterval,
		Now:             deps.Now,
		MaxBytes:        cfg.CacheMaxBytes,
		Size:            responseSize,
	})
	if err != nil {
		return nil, fmt.Errorf("gate: idempotency cache: %w", err)
	}
	g.client = g.newClient(deps.Resolver, g.log.With(logging.KeyComponent, "rpc"))
	g.bodies = newInflightBodies(cfg.MaxInFlightBodyBytes, cfg.MaxBodyBytes)
	g.metrics = newMetrics(deps.Registry, g.cache, g.bodies, cfg.NodeName, cfg.Datacenter)
	g.metrics.registerReloads(g.tokens, g.certs, g.rpcTLS)
	g.workerReplays = replay.New(replay.Options[*workerAnswer]{MaxAnswers: workerReplayMax, MaxBytes: workerReplayBytes,
		TTL: workerReplayTTL, Now: g.now, Size: (*workerAnswer).size})
	g.mux = http.NewServeMux()
	g.routes()
	return g, nil
}

// routes registers every endpoint on the gate's own ServeMux.
func (g *Gate) routes() {
	g.route("POST /v1/jobs", g.tenantsOnly(g.handleSubmit))
	g.route("GET /v1/jobs", g.tenantsOnly(g.handleListJobs))
	g.route("GET /v1/jobs/{job_id}", g.tenantsOnly(g.handleGetJob))
	g.route("GET "+keysPath+"{key}", g.tenantsOnly(g.handleGetKey))
	g.route("POST /v1/leases", g.tenantsOnly(g.handleLease))
	g.route("POST /v1/jobs/{job_id}/heartbeat", g.tenantsOnly(g.handleHeartbeat))
	g.route("POST /v1/jobs/{job_id}/complete", g.tenantsOnly(g.handleComplete))
	g.route("POST /v1/jobs/{job_id}/fail", g.tenantsOnly(g.handleFail))
	g.route("POST /v1/completions", g.tenantsOnly(g.handleCompletions))
	g.route("POST /v1/jobs/{job_id}/cancel", g.tenantsOnly(g.handleCancel))
	g.route("POST /v1/jobs/{job_id}/retry", g.tenantsOnly(g.handleRetry))
	g.route("GET /healthz", g.handleHealthz)
	g.route("GET /readyz", g.handleReadyz)
	g.route("GET /metrics", g.metrics.handler().ServeHTTP)
	g.consoleRoutes()
	if g.cfg.Pprof {
		// On the public listener: with a token file, operators only, as
		// GET /v1/cluster (the command line, goroutine stacks and
		// profiles that cost CPU are no tenant's, nor anyone's).
		g.route("GET /debug/pprof/", g.operatorsOnly(pprof.Index))
		g.route("GET /debug/pprof/cmdline", g.operatorsOnly(pprof.Cmdline))
		g.route("GET /debug/pprof/profile", g.operatorsOnly(pprof.Profile))
		g.route("GET /debug/pprof/symbol", g.operatorsOnly(pprof.Symbol))
		g.route("GET /debug/pprof/trace", g.operatorsOnly(pprof.Trace))
	}
}

// tenantsOnly is h behind authenticate: it runs as the caller's tenant
// (tenant default on a gate with no GATE_TOKEN_FILE), else 401; then with
// its body's bytes reserved under GATE_MAX_IN_FLIGHT_BODY_BYTES until it has
// answered, else 503 unavailable (inflight.go). An unauthenticated request
// reserves nothing: it is answered 401 unread.
func (g *Gate) tenantsOnly(h func(w http.ResponseWriter, r *http.Request, tenant string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := g.authenticate(w, r)
		if !ok {
			return
		}
		n, body, ok := g.bodies.reserve(r)
		if !ok {
			g.refuseBody(w)
			return
		}
		defer g.bodies.done(n, body)
		h(w, r, tenant)
	}
}

// operatorsOnly is h behind authenticateOperator: open on a gate with no
// token file of either kind, else for operators' tokens only.
func (g *Gate) operatorsOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.authenticateOperator(w, r) {
			h(w, r)
		}
	}
}

// route registers h under pattern, marking the request's writer as owned so
// that what h writes is not mistaken for the ServeMux's own 404 or 405.
func (g *Gate) route(pattern string, h http.HandlerFunc) {
	g.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rw, ok := w.(*responseWriter); ok {
			rw.owned = true
		}
		h(w, r)
	}))
}

// Handler returns the gate's HTTP handler: the API, with access logs, metrics,
// panic recovery and problems in place of the ServeMux's plain-text errors.
func (g *Gate) Handler() http.Handler { return http.HandlerFunc(g.serveHTTP) }

func (g *Gate) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w}
	g.metrics.inflight.Inc()
	defer func() {
		g.metrics.inflight.Dec()
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			g.log.Error("panic serving request", logging.KeyMethod, r.Method, logging.KeyPath, r.URL.Path,
				logging.KeyPanic, fmt.Sprint(p), logging.KeyStack, string(debug.Stack()))
			if !rw.wroteHeader {
				rw.owned, rw.intercepted = true, false
				writeProblem(rw, http.StatusInternalServerError, api.CodeInternal, panicDetail)
			}
		}
		g.finish(rw, r, start)
	}()
	escapeDotKey(r.URL)
	if strings.HasPrefix(r.URL.Path, console.Prefix) {
		// Before the ServeMux, whose 405 to a method the console does not
		// serve would otherwise go without them: every answer under the
		// console's path carries its security headers.
		console.SetHeaders(rw.Header())
	}
	g.mux.ServeHTTP(rw, r)
}

// keysPath is the path under which GET /v1/idempotency-keys/{key} reads a key.
const keysPath = "/v1/idempotency-keys/"

// escapeDotKey keeps the keys "." and ".." keys: URL-escaped as RFC 3986
// escapes them, they are themselves, dot-segments, which the ServeMux would
// clean away and redirect to another path. Written %2E, they match the
// route's {key}, which PathValue unescapes.
func escapeDotKey(u *url.URL) {
	if !strings.HasSuffix(u.Path, ".") { // every other request: EscapedPath allocates
		return
	}
	if k, ok := strings.CutPrefix(u.EscapedPath(), keysPath); ok && (k == "." || k == "..") {
		u.RawPath = keysPath + strings.Repeat("%2E", len(k))
	}
}

// finish writes the access log line and the request metrics.
func (g *Gate) finish(rw *responseWriter, r *http.Request, start time.Time) {
	d := time.Since(start)
	status := rw.status
	if !rw.wroteHeader {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	route := r.Pattern
	if route == "" || !rw.owned || rw.intercepted {
		route = "unmatched"
	}
	g.metrics.observeRequest(route, r.Method, status, string(rw.code), d)
	level := slog.LevelInfo
	switch {
	case status == http.StatusInternalServerError:
		level = slog.LevelError
	case status >= 500:
		level = slog.LevelWarn // 503: the cause was logged where it happened
	case route == "GET /healthz" || route == "GET /readyz" || route == "GET /metrics":
		level = slog.LevelDebug
	}
	if !g.log.Enabled(r.Context(), level) {
		return
	}
	attrs := append(make([]slog.Attr, 0, 10),
		slog.String(logging.KeyMethod, r.Method),
		slog.String(logging.KeyPath, r.URL.Path),
		slog.String(logging.KeyRoute, route),
		slog.Int(logging.KeyStatus, status),
		slog.String(logging.KeyCode, string(rw.code)),
		slog.Int64(logging.KeyBytes, rw.bytes),
		slog.Float64(logging.KeyDurationMS, float64(d.Microseconds())/1000),
		slog.String(logging.KeyRemote, r.RemoteAddr),
	)
	if rw.tenant != "" {
		attrs = append(attrs, slog.String(logging.KeyTenant, rw.tenant))
	}
	if rw.key != "" {
		attrs = append(attrs, slog.String(logging.KeyIdemKey, rw.key))
	}
	g.log.LogAttrs(r.Context(), level, "http request", attrs...)
}

// certReloadInterval is how often a TLS gate looks at its certificate files,
// and a gate with GATE_TOKEN_FILE at its token file.
const certReloadInterval = 10 * time.Second

// Serve serves the gate on ln until ctx ends, then shuts down gracefully:
// /readyz answers 503 from then on; with a ShutdownDelay it serves on for
// that long (or until Close), closing each connection after its answer; it
// then stops accepting, ends the worker long polls in flight at once (503 with
// Retry-After: the worker asks again, at another gate), lets the other
// requests in flight finish (connections still busy after ShutdownTimeout are
// closed) and returns nil. It returns the server's error if
// serving fails. Serve does not close the gate: call Close after it returns.
// With GATE_TLS_* set it serves HTTPS, reloading the certificate when its
// files change; with GATE_TOKEN_FILE it reloads the tokens when the file
// changes.
func (g *Gate) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		ReadTimeout:       g.cfg.ReadTimeout,
		WriteTimeout:      g.cfg.writeTimeout(),
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          logging.ErrorLog(g.log, "http"),
	}
	// The certificates, tokens and cluster TLS in use are reloaded when
	// their files change, until Serve returns.
	wctx, stopWatch := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	defer func() { stopWatch(); watchers.Wait() }()
	watch := func(w func(context.Context, time.Duration)) {
		watchers.Go(func() { w(wctx, certReloadInterval) })
	}
	if g.certs != nil {
		ln = tls.NewListener(ln, g.certs.ServerConfig())
		watch(g.certs.Watch)
	}
	if g.tokens != nil {
		watch(g.tokens.Watch)
	}
	if g.rpcTLS != nil {
		watch(g.rpcTLS.Watch)
	}
	addr := ln.Addr().String()
	g.log.Info("gate serving", logging.KeyAddr, addr,
		logging.KeyDatacenter, g.cfg.Datacenter, logging.KeyManagers, g.cfg.Managers, "auth", g.tokens.tenants(), "tls", g.certs != nil)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gate: serve: %w", err)
	case <-ctx.Done():
	}
	g.stopping.Store(true)
	if d := g.cfg.ShutdownDelay; d > 0 {
		// As kube-apiserver's --shutdown-delay-duration: the gate serves on,
		// /readyz 503, each answer closing its connection, so that load
		// balancers take it out of rotation and clients reconnect to
		// another gate before it stops accepting. Close ends the delay.
		g.log.Info("gate stopping: serving on with /readyz 503 for the shutdown delay", logging.KeyAddr, addr, logging.KeyDuration, d)
		srv.SetKeepAlivesEnabled(false)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-g.closed:
			t.Stop()
		}
	}
	g.log.Info("gate shutting down", logging.KeyAddr, addr)
	g.endPolls()
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	serr := <-errc
	if err != nil {
		// Requests still in flight after ShutdownTimeout are cut off; their
		// clients retry, and their keys are still deduplicated by the ledger.
		g.log.Warn("graceful shutdown timed out; closing the remaining connections",
			logging.KeyAddr, addr, logging.KeyError, err)
		_ = srv.Close()
	}
	if !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("gate: serve: %w", serr)
	}
	g.log.Info("gate stopped", logging.KeyAddr, addr)
	return nil
}

// Close releases the gate's resources: the cache's sweeper and the
// connections and submit streams to managers. It is idempotent and returns nil.
func (g *Gate) Close() error {
	g.closeOnce.Do(func() {
		close(g.closed)
		g.endPolls()
		g.cache.Close()
		g.client.Close()
		g.closeRemote()
	})
	return nil
}

// handleHealthz answers 200 while the process serves.
func (g *Gate) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 only when the gate is not stopping, the
// federation has formed once (formingFederation) and the datacenter's
// manager leader answers within ReadyTimeout.
func (g *Gate) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if g.stopping.Load() {
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the gate is stopping")
		return
	}
	if !g.federationFormedOnce() {
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			"the gate has not yet read the federation of datacenters from its managers (or it is still forming)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ReadyTimeout)
	defer cancel()
	st, err := g.client.LeaderStatus(ctx)
	if err != nil {
		g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			"the gate cannot reach its datacenter's manager leader")
		return
	}
	writeJSON(w, map[string]string{"status": "ready", "leader": st.NodeID, "datacenter": g.cfg.Datacenter})
}
