package gate

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/once-dev/once/internal/cache"
	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc"
)

// metricsNamespace prefixes every metric of the gate.
const metricsNamespace = "once_gate"

// durationBuckets are the buckets, in seconds, of the gate's duration
// histograms.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// metrics are the gate's Prometheus metrics, on a registry of their own (never
// the global one), served at GET /metrics.
type metrics struct {
	reg         *prometheus.Registry
	constLabels prometheus.Labels // node, datacenter

	requests        *prometheus.CounterVec   // route, method, status, code
	requestDuration *prometheus.HistogramVec // route
	forwardDuration *prometheus.HistogramVec // outcome
	replays         prometheus.Counter
	inflight        prometheus.Gauge
	workerDuration  *prometheus.HistogramVec // call, outcome
	leased          prometheus.Counter
}

// newMetrics registers the gate's metrics on reg (nil: a new registry).
func newMetrics(reg *prometheus.Registry, c *cache.Cache[*response], bodies *inflightBodies, node, datacenter string) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	constLabels := prometheus.Labels{"node": node, "datacenter": datacenter}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Name: name, Help: help, ConstLabels: constLabels}
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: name, Help: help,
			ConstLabels: constLabels, Buckets: buckets}, labels)
	}
	m := &metrics{
		reg:         reg,
		constLabels: constLabels,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts(opts("http_requests_total",
			"HTTP requests answered, by route pattern, method, status and problem code (none for successes).")),
			[]string{"route", "method", "status", "code"}),
		requestDuration: histogram("http_request_duration_seconds",
			"Time to answer HTTP requests, by route pattern.", durationBuckets, "route"),
		forwardDuration: histogram("forward_duration_seconds",
			"Time from forwarding a submission to the manager leader to its answer, by outcome.", durationBuckets, "outcome"),
		replays: prometheus.NewCounter(prometheus.CounterOpts(opts("replays_total",
			"Answers sent with Idempotent-Replayed: true."))),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts(opts("http_requests_in_flight",
			"HTTP requests being answered."))),
		workerDuration: histogram("worker_call_duration_seconds",
			"Time from forwarding a worker call (lease, heartbeat, complete, fail) to the leader to its answer, by call and outcome (ok, lease_lost, not_found, invalid, unavailable, error); a lease's includes its wait.",
			slices.Concat(durationBuckets, []float64{60}), // a lease waits up to a minute
			"call", "outcome"),
		leased: prometheus.NewCounter(prometheus.CounterOpts(opts("jobs_leased_total",
			"Jobs handed to workers through this gate."))),
	}
	reg.MustRegister(m.requests, m.requestDuration, m.forwardDuration, m.replays, m.inflight, m.workerDuration, m.leased,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// The cache's counters and size are read from it at scrape time.
	for _, k := range cacheCounters {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts(opts(k.name, k.help)),
			func() float64 { return float64(k.get(c.Stats())) }))
	}
	// The bound of bodies in flight (inflight.go), read at scrape time.
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("http_request_body_bytes_in_flight",
			"Bytes of request bodies reserved under GATE_MAX_IN_FLIGHT_BODY_BYTES by requests being answered.")),
			func() float64 { return float64(bodies.reserved.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("http_requests_refused_total",
			"Requests refused 503 unavailable, unread, because their bodies did not fit GATE_MAX_IN_FLIGHT_BODY_BYTES.")),
			func() float64 { return float64(bodies.refused.Load()) }),
	)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("cache_entries",
		"Entries in the idempotency cache (expired ones not yet swept included).")),
		func() float64 { return float64(c.Len()) }))
	return m
}

// registerReloads registers the outcome of the reloads of the files the
// gate reloads while it serves, as Prometheus tells its configuration's
// (prometheus_config_last_reload_successful and _success_timestamp_seconds):
// its token files (tokens, nil without), its HTTPS certificate (https, nil
// without) and its cluster TLS certificate files (cluster, nil without, or
// derived from the cluster secret: no files). A reload that fails leaves
// what was loaded before in use, a revoked token valid, an expiring
// certificate presented; these series let an alert say so.
func (m *metrics) registerReloads(tokens *tokenFiles, https *certs.Reloader, cluster *certs.Cluster) {
	if tokens != nil {
		m.reloadGauges("token_files", "the token files (GATE_TOKEN_FILE, GATE_OPERATOR_TOKEN_FILE)", nil, tokens.lastReload)
	}
	certificate := func(name string, last func() certs.ReloadStatus) {
		m.reloadGauges("tls_certificate", "the TLS certificate files named by the certificate label",
			prometheus.Labels{"certificate": name},
			func() (bool, time.Time) { s := last(); return s.OK, s.Loaded })
	}
	if https != nil {
		certificate("https", https.LastReload)
	}
	if cluster != nil && !cluster.Derived() {
		certificate("cluster", cluster.LastReload)
	}
}

// reloadGauges registers once_gate_<what>_last_reload_successful and
// _last_reload_success_timestamp_seconds, read from last at scrape time.
func (m *metrics) reloadGauges(what, files string, labels prometheus.Labels, last func() (bool, time.Time)) {
	constLabels := prometheus.Labels{}
	for _, l := range []prometheus.Labels{m.constLabels, labels} {
		for k, v := range l {
			constLabels[k] = v
		}
	}
	gauge := func(name, help string, value func() float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: what + name, Help: help,
			ConstLabels: constLabels}, value)
	}
	m.reg.MustRegister(
		gauge("_last_reload_successful",
			"1 if the last look at "+files+" loaded them or found them unchanged, 0 if they could not be used (what was loaded before stays in use).",
			func() float64 {
				if ok, _ := last(); ok {
					return 1
				}
				return 0
			}),
		gauge("_last_reload_success_timestamp_seconds",
			"Time, in seconds since the epoch, "+files+" were last loaded (at start, or by a reload that found them changed).",
			func() float64 { _, at := last(); return float64(at.UnixNano()) / 1e9 }),
	)
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer of the gate is nosniff (docs/api.md, Conventions);
		// promhttp sets no such header itself.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func (m *metrics) observeRequest(route, method string, status int, code string, d time.Duration) {
	if code == "" {
		code = "none"
	}
	m.requests.WithLabelValues(route, methodLabel(method), strconv.Itoa(status), code).Inc()
	m.requestDuration.WithLabelValues(route).Observe(d.Seconds())
}

// methodLabel is method as the requests counter's label: one of the
// methods of RFC 9110 (and PATCH) as it is, any other "other". The method
// is the client's to choose, unauthenticated: a label of each would let
// anyone who reaches the gate add series without end.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// cacheCounters name the cumulative counters of cache.Stats, exported at
// /metrics.
var cacheCounters = []struct {
	name, help string
	get        func(cache.Stats) uint64
}{
	{"cache_hits_total", "Lookups that found a COMMITTED or REJECTED entry (answered as replays).", func(s cache.Stats) uint64 { return s.Hits }},
	{"cache_misses_total", "Lookups that found no live entry (the request became the key's owner: forwarded, unless its datacenters were refused first).", func(s cache.Stats) uint64 { return s.Misses }},
	{"cache_waits_total", "Lookups that found a PENDING entry of the same fingerprint.", func(s cache.Stats) uint64 { return s.Waits }},
	{"cache_mismatches_total", "Lookups that found an entry of another fingerprint (422 idempotency_key_reused, or forwarded uncached when that entry is PENDING or may be the request's other form).", func(s cache.Stats) uint64 { return s.Mismatches }},
	{"cache_wait_timeouts_total", "Waits on a PENDING entry that ended before its outcome.", func(s cache.Stats) uint64 { return s.WaitTimeouts }},
	{"cache_abandons_total", "PENDING entries resolved with an answer that is not cached (a 503 or 500, a 409, a 422 idempotency_key_reused or _claimed, a refused datacenter); the next duplicate is forwarded.", func(s cache.Stats) uint64 { return s.Abandons }},
	{"cache_evictions_total", "Entries evicted by LRU pressure.", func(s cache.Stats) uint64 { return s.Evictions }},
	{"cache_pending_evictions_total", "PENDING entries evicted by LRU pressure.", func(s cache.Stats) uint64 { return s.PendingEvictions }},
	{"cache_expirations_total", "Expired entries removed.", func(s cache.Stats) uint64 { return s.Expirations }},
}

// workerCall records a worker call's forward.
func (m *metrics) workerCall(call string, err error, d time.Duration) {
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, rpc.ErrLeaseLost):
		outcome = "lease_lost"
	case errors.Is(err, rpc.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, rpc.ErrInvalid):
		outcome = "invalid"
	case errors.Is(err, rpc.ErrInternal):
		outcome = outcomeError
	default:
		outcome = outcomeUnavailable
	}
	m.workerDuration.WithLabelValues(call, outcome).Observe(d.Seconds())
}
