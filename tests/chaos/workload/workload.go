// Package workload drives a once cluster the way the chaos tests need: N
// logical clients, each with a structured client id and a random nonce, submit
// jobs through POST /v1/jobs with Idempotency-Key <client_id>:<seq>:<nonce> and
// increasing sequences. Every logical submission is retried with the same key
// and the same body after an indeterminate answer (transport error, timeout,
// 503, 409 request_in_progress) until it gets a definite one or its budget runs
// out, and a configurable fraction is deliberately sent again through a
// different gate, concurrently or after the first answer. Every attempt is
// recorded in a history.Recorder for the checker.
package workload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
	"github.com/once-dev/once/tests/chaos/history"
)

// Defaults of Config.
const (
	DefaultClients          = 4
	DefaultClientIDPrefix   = "chaos"
	DefaultJobType          = "chaos.noop"
	DefaultRequestTimeout   = 5 * time.Second
	DefaultSubmissionBudget = 30 * time.Second
	DefaultBackoffMin       = 20 * time.Millisecond
	DefaultBackoffMax       = time.Second
)

// maxResponse bounds the bytes read from one answer.
const maxResponse = 4 << 20

// Config configures a Workload. Zero values take the defaults.
type Config struct {
	// GateURLs are the gates' base URLs (http://127.0.0.1:8080). Required.
	GateURLs []string
	// Tokens maps tenant names to bearer tokens. Clients are spread over the
	// tenants round-robin (in name order). Empty: one tenant, "default", with
	// no Authorization header (a gate without a token file).
	Tokens map[string]string
	// Clients is the number of logical clients (default 4). Each has one
	// submission outstanding at a time (two paths when it is duplicated).
	Clients int
	// ClientIDPrefix starts every client id; client i is "<prefix>:c<i>" — a
	// client id with a colon, which the key format allows (default "chaos").
	ClientIDPrefix string
	// Submissions bounds the logical submissions of one Run, over all clients.
	// Duration bounds the time in which Run starts new ones. At least one of
	// the two must be set; submissions in flight when Duration ends still run
	// to their answer or budget. Cancelling Run's ctx stops everything at once.
	Submissions int
	Duration    time.Duration
	// DuplicateRate is the fraction of submissions, in [0, 1], that are also
	// sent through a different gate: half of them concurrently with the
	// primary, half after the primary's definite answer.
	DuplicateRate float64
	// JobType is the type of every job (default "chaos.noop").
	JobType string
	// Datacenters, when set, is sent in every request.
	Datacenters []string
	// DatacenterSets, when set (and Datacenters is not), are the lists a
	// submission draws from, uniformly (repeat a list to weigh it): each
	// key is sent with its drawn list every time; a nil list omits the
	// member (in a federation: the job runs in one home datacenter).
	DatacenterSets [][]string
	// GateDatacenters, when set, names the datacenter of each of GateURLs
	// (the same length): a retry after a transport error, a timeout or a
	// 5xx then goes to the next gate of another datacenter, as pkg/client
	// fails over, instead of the next gate.
	GateDatacenters []string
	// PayloadPad adds a string of this many bytes to every payload.
	PayloadPad int
	// RequestTimeout bounds one HTTP attempt (default 5s). An attempt that
	// runs out is recorded as a timeout and retried.
	RequestTimeout time.Duration
	// SubmissionBudget bounds the time one submission path keeps retrying
	// (default 30s); after it no new attempt is started and the submission
	// stays unresolved.
	SubmissionBudget time.Duration
	// MaxAttempts bounds the attempts of one submission path (0: no bound
	// but the budget).
	MaxAttempts int
	// BackoffMin and BackoffMax bound the jittered exponential backoff between
	// attempts (defaults 20ms and 1s). A Retry-After is honoured up to
	// BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// Seed makes gate choice, duplication and jitter reproducible. Nonces are
	// always random, so two workloads never share keys.
	Seed uint64
	// HTTPClient, when set, is used instead of the workload's own client.
	HTTPClient *http.Client
}

// Validate applies defaults and reports the first invalid field.
func (c *Config) Validate() error {
	if len(c.GateURLs) == 0 {
		return errors.New("workload: GateURLs: at least one gate URL is required")
	}
	for i, u := range c.GateURLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("workload: GateURLs[%d]: %q is not an http(s) base URL", i, u)
		}
		c.GateURLs[i] = strings.TrimRight(u, "/")
	}
	if len(c.GateDatacenters) != 0 && len(c.GateDatacenters) != len(c.GateURLs) {
		return fmt.Errorf("workload: GateDatacenters: %d names for %d gates", len(c.GateDatacenters), len(c.GateURLs))
	}
	if len(c.Datacenters) != 0 && len(c.DatacenterSets) != 0 {
		return errors.New("workload: Datacenters and DatacenterSets are exclusive")
	}
	if c.Clients == 0 {
		c.Clients = DefaultClients
	}
	if c.Clients < 0 {
		return fmt.Errorf("workload: Clients: %d is negative", c.Clients)
	}
	if c.ClientIDPrefix == "" {
		c.ClientIDPrefix = DefaultClientIDPrefix
	}
	if err := keys.ValidateClientID(clientID(c.ClientIDPrefix, max(c.Clients-1, 0))); err != nil {
		return fmt.Errorf("workload: ClientIDPrefix: %q does not make valid client ids: %w", c.ClientIDPrefix, err)
	}
	if c.Submissions < 0 || c.Duration < 0 {
		return errors.New("workload: Submissions and Duration must not be negative")
	}
	if c.Submissions == 0 && c.Duration == 0 {
		return errors.New("workload: Submissions or Duration must bound the run")
	}
	if c.DuplicateRate < 0 || c.DuplicateRate > 1 {
		return fmt.Errorf("workload: DuplicateRate: %v is outside [0, 1]", c.DuplicateRate)
	}
	if c.JobType == "" {
		c.JobType = DefaultJobType
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.SubmissionBudget == 0 {
		c.SubmissionBudget = DefaultSubmissionBudget
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.RequestTimeout < 0 || c.SubmissionBudget < 0 || c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin || c.MaxAttempts < 0 || c.PayloadPad < 0 {
		return errors.New("workload: timeouts, budget, backoff, attempts and pad must be positive, BackoffMax >= BackoffMin")
	}
	return nil
}

// Stats counts what one Run did.
type Stats struct {
	// Submissions is the number of logical submissions (keys) started.
	Submissions int64
	// Duplicated is how many of them were also sent through a second gate.
	Duplicated int64
	// Attempts is the number of HTTP requests sent.
	Attempts int64
	// Committed, Rejected and Failed count submission paths that ended with a
	// 201, a job_rejected, or another definite answer; Unresolved those that
	// ran out of budget or were cancelled without one.
	Committed, Rejected, Failed, Unresolved int64
}

// Workload is a set of logical clients. Keys never repeat across Runs of one
// Workload: every client keeps its nonce and its sequence continues. A new
// Workload is a restart: new nonces, sequences from 1.
type Workload struct {
	cfg     Config
	http    *http.Client
	owned   bool
	tenants []string
	clients []*client
	running atomic.Bool
}

type client struct {
	index  int
	id     string
	nonce  string
	tenant string
	token  string
	seq    uint64
	rng    *mrand.Rand
}

func clientID(prefix string, i int) string { return fmt.Sprintf("%s:c%d", prefix, i) }

// New validates cfg and creates the clients.
func New(cfg Config) (*Workload, error) {
	cfg.GateURLs = append([]string(nil), cfg.GateURLs...)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Workload{cfg: cfg, http: cfg.HTTPClient}
	if w.http == nil {
		w.owned = true
		w.http = newHTTPClient(cfg)
	}
	for t := range cfg.Tokens {
		w.tenants = append(w.tenants, t)
	}
	sort.Strings(w.tenants)
	if len(w.tenants) == 0 {
		w.tenants = []string{api.DefaultTenant}
	}
	for i := range cfg.Clients {
		nonce, err := keys.NewNonce()
		if err != nil {
			return nil, fmt.Errorf("workload: %w", err)
		}
		tenant := w.tenants[i%len(w.tenants)]
		w.clients = append(w.clients, &client{
			index:  i,
			id:     clientID(cfg.ClientIDPrefix, i),
			nonce:  nonce,
			tenant: tenant,
			token:  cfg.Tokens[tenant],
			rng:    mrand.New(mrand.NewPCG(cfg.Seed, uint64(i)+1)),
		})
	}
	return w, nil
}

// newHTTPClient builds the shared client: bounded dial, header and total
// times, keep-alive pools sized for the clients, no redirects, no proxy.
func newHTTPClient(cfg Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: min(cfg.RequestTimeout, 2*time.Second), KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          4 * cfg.Clients,
			MaxIdleConnsPerHost:   2 * cfg.Clients,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: cfg.RequestTimeout,
			TLSHandshakeTimeout:   min(cfg.RequestTimeout, 5*time.Second),
		},
		Timeout: cfg.RequestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Clients returns the client ids, in order.
func (w *Workload) Clients() []string {
	ids := make([]string, len(w.clients))
	for i, c := range w.clients {
		ids[i] = c.id
	}
	return ids
}

// Run submits until Submissions are started, Duration has passed, or ctx ends,
// waits for the submissions in flight (which ctx also ends), and returns what
// it did. Every attempt is recorded in rec. Cancelling ctx is a normal way to
// stop: Run then returns nil. Run may be called again after it returns, not
// concurrently.
func (w *Workload) Run(ctx context.Context, rec *history.Recorder) (Stats, error) {
	if !w.running.CompareAndSwap(false, true) {
		return Stats{}, errors.New("workload: Run is already running")
	}
	defer w.running.Store(false)
	if w.owned {
		defer w.http.CloseIdleConnections()
	}

	r := &run{w: w, rec: rec}
	if w.cfg.Duration > 0 {
		r.deadline = time.Now().Add(w.cfg.Duration)
	}
	var wg sync.WaitGroup
	for _, c := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.client(ctx, c)
		}()
	}
	wg.Wait()
	return r.stats(), nil
}

// run is the state of one Run.
type run struct {
	w        *Workload
	rec      *history.Recorder
	deadline time.Time
	issued   atomic.Int64

	submissions, duplicated, attempts       atomic.Int64
	committed, rejected, failed, unresolved atomic.Int64
}

func (r *run) stats() Stats {
	return Stats{
		Submissions: r.submissions.Load(), Duplicated: r.duplicated.Load(), Attempts: r.attempts.Load(),
		Committed: r.committed.Load(), Rejected: r.rejected.Load(), Failed: r.failed.Load(),
		Unresolved: r.unresolved.Load(),
	}
}

// next reports whether another submission may start.
func (r *run) next(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if !r.deadline.IsZero() && !time.Now().Before(r.deadline) {
		return false
	}
	if n := r.w.cfg.Submissions; n > 0 && r.issued.Add(1) > int64(n) {
		return false
	}
	return true
}

// submission is one logical submission: one key, one body.
type submission struct {
	c    *client
	seq  uint64
	key  string
	req  api.JobRequest
	body []byte
}

func (r *run) client(ctx context.Context, c *client) {
	cfg := r.w.cfg
	gates := len(cfg.GateURLs)
	for r.next(ctx) {
		c.seq++
		s := &submission{c: c, seq: c.seq, key: keys.Format(c.id, c.seq, c.nonce)}
		p := map[string]any{"client": c.id, "seq": c.seq, "nonce": c.nonce, "v": c.rng.Uint32()}
		if cfg.PayloadPad > 0 {
			p["pad"] = strings.Repeat("x", cfg.PayloadPad)
		}
		payload, err := json.Marshal(p)
		if err != nil {
			panic(err) // a map of strings and numbers always encodes
		}
		dcs := cfg.Datacenters
		if len(cfg.DatacenterSets) > 0 {
			dcs = cfg.DatacenterSets[c.rng.IntN(len(cfg.DatacenterSets))]
		}
		s.req = api.JobRequest{Type: cfg.JobType, Payload: payload, Datacenters: dcs}
		if s.body, err = json.Marshal(s.req); err != nil {
			panic(err)
		}
		r.submissions.Add(1)

		primary := (c.index + int(c.seq)) % gates
		if c.rng.Float64() >= cfg.DuplicateRate {
			r.path(ctx, s, primary, false, c.rng)
			continue
		}
		r.duplicated.Add(1)
		dup := primary
		if gates > 1 {
			dup = (primary + 1 + c.rng.IntN(gates-1)) % gates
		}
		dupRNG := mrand.New(mrand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))
		if c.rng.IntN(2) == 0 {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.path(ctx, s, dup, true, dupRNG)
			}()
			r.path(ctx, s, primary, false, c.rng)
			wg.Wait()
		} else {
			r.path(ctx, s, primary, false, c.rng)
			r.path(ctx, s, dup, true, dupRNG)
		}
	}
}

// path sends s until a definite answer, starting at gate index g and moving
// to the next gate on every retry (a real client behind a load balancer lands
// anywhere; a gate that is down or cut off must not eat the whole budget).
func (r *run) path(ctx context.Context, s *submission, g int, dup bool, rng *mrand.Rand) {
	cfg := r.w.cfg
	budget := time.Now().Add(cfg.SubmissionBudget)
	var out history.Outcome
	backoff := cfg.BackoffMin
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			g = r.nextGate(g, out)
		}
		gate := cfg.GateURLs[g]
		h := r.rec.Invoke(history.Op{
			Kind: history.KindSubmit, Client: s.c.id, Gate: gate, Tenant: s.c.tenant, Key: s.key, Seq: s.seq,
			Attempt: attempt, Dup: dup, Type: s.req.Type, Payload: s.req.Payload, Datacenters: s.req.Datacenters,
		})
		r.attempts.Add(1)
		out = r.send(ctx, gate, s)
		r.rec.Complete(h, out)

		if !out.Retryable() {
			switch out.Class() {
			case history.Committed:
				r.committed.Add(1)
			case history.Rejected:
				r.rejected.Add(1)
			default:
				r.failed.Add(1)
			}
			return
		}
		if ctx.Err() != nil || (cfg.MaxAttempts > 0 && attempt >= cfg.MaxAttempts) {
			r.unresolved.Add(1)
			return
		}
		// Equal jitter: half the backoff fixed, half random.
		d := backoff/2 + time.Duration(rng.Int64N(int64(backoff/2)+1))
		if ra, err := strconv.Atoi(out.RetryAfter); err == nil && ra > 0 {
			d = max(d, time.Duration(ra)*time.Second)
		}
		d = min(d, cfg.BackoffMax)
		backoff = min(2*backoff, cfg.BackoffMax)
		if !time.Now().Add(d).Before(budget) {
			r.unresolved.Add(1)
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			r.unresolved.Add(1)
			return
		case <-t.C:
		}
	}
}

// nextGate is the gate index of the retry after an attempt through gate g
// answered out: the next gate, or, with GateDatacenters and an answer that
// says the gate or its datacenter failed (a transport error, a timeout, a
// 5xx), the next gate of another datacenter.
func (r *run) nextGate(g int, out history.Outcome) int {
	cfg := r.w.cfg
	n := len(cfg.GateURLs)
	if len(cfg.GateDatacenters) == 0 || (out.Err == "" && out.Status < 500) {
		return (g + 1) % n
	}
	for i := 1; i < n; i++ {
		if next := (g + i) % n; cfg.GateDatacenters[next] != cfg.GateDatacenters[g] {
			return next
		}
	}
	return (g + 1) % n
}

// send makes one attempt and describes its outcome.
func (r *run) send(ctx context.Context, gate string, s *submission) history.Outcome {
	ctx, cancel := context.WithTimeout(ctx, r.w.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gate+"/v1/jobs", bytes.NewReader(s.body))
	if err != nil {
		return history.Outcome{Err: err.Error()}
	}
	req.Header.Set("Content-Type", api.ContentTypeJSON)
	req.Header.Set("Accept", api.ContentTypeJSON)
	req.Header.Set(api.HeaderIdempotencyKey, s.key)
	if s.c.token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+s.c.token)
	}
	resp, err := r.w.http.Do(req)
	if err != nil {
		return history.Outcome{Err: err.Error(), Timeout: isTimeout(err)}
	}
	defer resp.Body.Close()
	out := history.Outcome{
		Status:     resp.StatusCode,
		Replayed:   resp.Header.Get(api.HeaderReplayed),
		RetryAfter: resp.Header.Get(api.HeaderRetryAfter),
		ExpiresAt:  resp.Header.Get(api.HeaderIdempotencyExpiresAt),
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		// The status line arrived but the body did not: nothing is known.
		out.Err, out.Timeout = "reading body: "+err.Error(), isTimeout(err)
		return out
	}
	sum := sha256.Sum256(body)
	out.BodyHash = hex.EncodeToString(sum[:])
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		var j api.Job
		if json.Unmarshal(body, &j) == nil {
			out.JobID = j.JobID
		}
	} else {
		var p api.Problem
		if json.Unmarshal(body, &p) == nil {
			out.Code = string(p.Code)
		}
	}
	return out
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
