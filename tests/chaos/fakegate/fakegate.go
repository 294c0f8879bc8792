// Package fakegate is an in-memory stand-in for a once gate and the cluster
// behind it, implementing the HTTP contract of docs/api.md simply: POST /v1/jobs
// deduplicated by (tenant, key) with byte-for-byte replays, and the read
// endpoints GET /v1/jobs, GET /v1/jobs/{id} and GET /v1/idempotency-keys/{key}.
//
// It exists to test the chaos workload and checker without real processes. Its
// faults are the contract's legitimate failures (503 before or after the job was
// created, 409 request_in_progress, a hang past the client's timeout, capacity
// rejections); its Bug knobs break the contract on purpose so tests can prove
// the checker notices. Crafted checker tests edit its table directly (PutJob,
// PutKey, DeleteJob, HideJob, ...).
//
// One Gate serves any number of httptest servers: each is "a gate URL" in front
// of the same shared state.
package fakegate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// Bug selects a deliberate contract violation.
type Bug uint8

// Bugs.
const (
	// NoBug: the fake keeps the contract.
	NoBug Bug = iota
	// ForgetKeyOn503 drops the idempotency entry when it answers 503 after the
	// job was created (Options.UnavailableAfterCommit), so the client's retry
	// creates a second job for the same key.
	ForgetKeyOn503
)

// Options configures a Gate. Probabilities are in [0, 1] and are rolled once per
// submission, in the order they are listed.
type Options struct {
	// Tokens maps bearer tokens to tenants. Empty: every request is tenant
	// "default" and Authorization is ignored.
	Tokens map[string]string
	// Seed makes the fault rolls reproducible.
	Seed uint64
	// HangBefore: the request hangs, doing nothing, until the client gives up.
	HangBefore float64
	// Unavailable: 503 unavailable before anything happens.
	Unavailable float64
	// InProgress: 409 request_in_progress, nothing happens.
	InProgress float64
	// Reject: a first-time submission is rejected by admission (429
	// job_rejected with Retry-After), and the rejection is replayed after.
	Reject float64
	// UnavailableAfterCommit: the job is created and committed, then the
	// answer is 503 (the client cannot know it succeeded).
	UnavailableAfterCommit float64
	// HangAfterCommit: the job is created and committed, then the request hangs
	// until the client gives up.
	HangAfterCommit float64
	// MaxPage caps the limit of GET /v1/jobs (default api.MaxListLimit), to
	// force pagination in tests.
	MaxPage int
	// Datacenter is the default datacenter of jobs (default "dc1").
	Datacenter string
	// Bug breaks the contract on purpose.
	Bug Bug
}

// Gate is the fake. It implements http.Handler.
type Gate struct {
	opts    Options
	mux     *http.ServeMux
	closing chan struct{}
	once    sync.Once

	mu      sync.Mutex
	rng     *rand.Rand
	nextID  int
	tenants map[string]*tenant
	submits int
	created int
}

type tenant struct {
	jobs []*stored // creation order: newest last
	byID map[string]*stored
	keys map[string]*entry
}

type stored struct {
	job      api.Job
	hideList bool
	hideGet  bool
}

type entry struct {
	info        api.KeyInfo
	fingerprint string
	status      int
	body        []byte
	retryAfter  string
}

// New returns a Gate with an empty table.
func New(opts Options) *Gate {
	if opts.MaxPage <= 0 || opts.MaxPage > api.MaxListLimit {
		opts.MaxPage = api.MaxListLimit
	}
	if opts.Datacenter == "" {
		opts.Datacenter = "dc1"
	}
	g := &Gate{
		opts:    opts,
		mux:     http.NewServeMux(),
		closing: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		tenants: map[string]*tenant{},
	}
	g.mux.HandleFunc("POST /v1/jobs", g.submit)
	g.mux.HandleFunc("GET /v1/jobs", g.list)
	g.mux.HandleFunc("GET /v1/jobs/{id}", g.getJob)
	g.mux.HandleFunc("GET /v1/idempotency-keys/{key}", g.getKey)
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, api.CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	return g
}

// ServeHTTP implements http.Handler.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Close releases every hanging request. Call it before closing the servers.
func (g *Gate) Close() { g.once.Do(func() { close(g.closing) }) }

// Counts returns how many submissions arrived and how many jobs were created.
func (g *Gate) Counts() (submits, created int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.submits, g.created
}

// Jobs returns the tenant's jobs in creation order, hidden ones included.
func (g *Gate) Jobs(tenantName string) []api.Job {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []api.Job
	for _, s := range g.tenant(tenantName).jobs {
		out = append(out, s.job)
	}
	return out
}

// PutJob stores job for the tenant, replacing one with the same id in place or
// appending it as the newest.
func (g *Gate) PutJob(tenantName string, job api.Job) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tenant(tenantName)
	if s, ok := t.byID[job.JobID]; ok {
		s.job = job
		return
	}
	s := &stored{job: job}
	t.jobs = append(t.jobs, s)
	t.byID[job.JobID] = s
}

// DeleteJob removes a job from every read path.
func (g *Gate) DeleteJob(tenantName, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tenant(tenantName)
	delete(t.byID, id)
	for i, s := range t.jobs {
		if s.job.JobID == id {
			t.jobs = append(t.jobs[:i], t.jobs[i+1:]...)
			break
		}
	}
}

// HideJob makes a job invisible to GET /v1/jobs (fromList) and/or to
// GET /v1/jobs/{id} (fromGet).
func (g *Gate) HideJob(tenantName, id string, fromList, fromGet bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.tenant(tenantName).byID[id]; ok {
		s.hideList, s.hideGet = fromList, fromGet
	}
}

// PutKey stores the idempotency entry that GET /v1/idempotency-keys/{key}
// shows. It is for crafted tests of the read path: a submission with that key
// is answered 422 idempotency_key_reused.
func (g *Gate) PutKey(tenantName string, info api.KeyInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tenant(tenantName).keys[info.Key] = &entry{info: info, status: http.StatusCreated}
}

// DeleteKey forgets an idempotency entry.
func (g *Gate) DeleteKey(tenantName, key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.tenant(tenantName).keys, key)
}

// tenant returns (creating) a tenant's state. g.mu is held.
func (g *Gate) tenant(name string) *tenant {
	t, ok := g.tenants[name]
	if !ok {
		t = &tenant{byID: map[string]*stored{}, keys: map[string]*entry{}}
		g.tenants[name] = t
	}
	return t
}

// auth maps the request to its tenant.
func (g *Gate) auth(w http.ResponseWriter, r *http.Request) (string, bool) {
	if len(g.opts.Tokens) == 0 {
		return api.DefaultTenant, true
	}
	tok, ok := strings.CutPrefix(r.Header.Get(api.HeaderAuthorization), "Bearer ")
	if name, known := g.opts.Tokens[tok]; ok && known {
		return name, true
	}
	problem(w, http.StatusUnauthorized, api.CodeUnauthorized, "missing or unknown bearer token")
	return "", false
}

func (g *Gate) roll(p float64) bool { return p > 0 && g.rng.Float64() < p }

// hang blocks until the client goes away or the Gate is closed.
func (g *Gate) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-g.closing:
	}
}

type fault uint8

const (
	faultNone fault = iota
	faultHang
	faultUnavailable
	faultInProgress
)

func (g *Gate) submit(w http.ResponseWriter, r *http.Request) {
	tenantName, ok := g.auth(w, r)
	if !ok {
		return
	}
	raw, present := r.Header[http.CanonicalHeaderKey(api.HeaderIdempotencyKey)]
	if !present || len(raw) == 0 {
		problem(w, http.StatusBadRequest, api.CodeIdempotencyKeyMissing, "Idempotency-Key is required")
		return
	}
	k, err := keys.Parse(raw[0])
	if err != nil {
		problem(w, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, err.Error())
		return
	}
	key := k.Raw
	info := api.KeyInfo{Key: key}
	if k.Structured {
		seq := k.Sequence
		info.ClientID, info.Sequence, info.Nonce = k.ClientID, &seq, k.Nonce
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		problem(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, err.Error())
		return
	}
	var req api.JobRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Type == "" {
		problem(w, http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf("bad job request: %v", err))
		return
	}
	canon, err := canonical(body)
	if err != nil {
		problem(w, http.StatusBadRequest, api.CodeInvalidRequest, err.Error())
		return
	}
	fingerprint := tenantName + "\x00POST /v1/jobs\x00" + canon

	g.mu.Lock()
	g.submits++
	f := faultNone
	switch {
	case g.roll(g.opts.HangBefore):
		f = faultHang
	case g.roll(g.opts.Unavailable):
		f = faultUnavailable
	case g.roll(g.opts.InProgress):
		f = faultInProgress
	}
	if f != faultNone {
		g.mu.Unlock()
		switch f {
		case faultHang:
			g.hang(r)
		case faultUnavailable:
			w.Header().Set(api.HeaderRetryAfter, "1")
			problem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "injected: no leader")
		case faultInProgress:
			w.Header().Set(api.HeaderRetryAfter, "1")
			problem(w, http.StatusConflict, api.CodeRequestInProgress, "injected: original in progress")
		}
		return
	}

	t := g.tenant(tenantName)
	if e, ok := t.keys[key]; ok {
		g.mu.Unlock()
		if e.fingerprint != fingerprint {
			problem(w, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused,
				"the key was used with a different request")
			return
		}
		if e.retryAfter != "" {
			w.Header().Set(api.HeaderRetryAfter, e.retryAfter)
		}
		write(w, e.status, contentType(e.status), "true", e.body, e.info.JobID)
		return
	}

	info.State = api.KeyStateCommitted
	info.ExpiresAt = api.FormatTime(time.Now().Add(5 * time.Minute))
	e := &entry{info: info, fingerprint: fingerprint}
	if g.roll(g.opts.Reject) {
		info.State = api.KeyStateRejected
		e.info = info
		e.status = http.StatusTooManyRequests
		e.retryAfter = "60"
		e.body = problemBody(e.status, api.CodeJobRejected, "injected: over capacity", "capacity")
		t.keys[key] = e
		g.mu.Unlock()
		w.Header().Set(api.HeaderRetryAfter, e.retryAfter)
		write(w, e.status, api.ContentTypeProblem, "false", e.body, nil)
		return
	}

	g.nextID++
	g.created++
	dcs := map[string]api.DatacenterStatus{}
	for _, dc := range req.Datacenters {
		dcs[dc] = api.DatacenterStatus{Status: api.JobStatusCommitted}
	}
	if len(dcs) == 0 {
		dcs[g.opts.Datacenter] = api.DatacenterStatus{Status: api.JobStatusCommitted}
	}
	job := api.Job{
		JobID:          fmt.Sprintf("job-%06d", g.nextID),
		Type:           req.Type,
		Status:         api.JobStatusCommitted,
		IdempotencyKey: key,
		CreatedAt:      api.FormatTime(time.Now()),
		Datacenters:    dcs,
		Payload:        req.Payload,
	}
	s := &stored{job: job}
	t.jobs = append(t.jobs, s)
	t.byID[job.JobID] = s
	id := job.JobID
	info.JobID = &id
	e.info = info
	e.status = http.StatusCreated
	e.body, _ = json.Marshal(job)
	t.keys[key] = e

	switch {
	case g.roll(g.opts.UnavailableAfterCommit):
		if g.opts.Bug == ForgetKeyOn503 {
			delete(t.keys, key)
		}
		g.mu.Unlock()
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "injected: timeout inside the cluster")
		return
	case g.roll(g.opts.HangAfterCommit):
		g.mu.Unlock()
		g.hang(r)
		return
	}
	g.mu.Unlock()
	write(w, http.StatusCreated, api.ContentTypeJSON, "false", e.body, &id)
}

func (g *Gate) list(w http.ResponseWriter, r *http.Request) {
	tenantName, ok := g.auth(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := api.DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > api.MaxListLimit {
			problem(w, http.StatusBadRequest, api.CodeInvalidRequest, "bad limit "+s)
			return
		}
		limit = n
	}
	limit = min(limit, g.opts.MaxPage)
	after := -1
	if s := q.Get("after"); s != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "c"))
		if err != nil || !strings.HasPrefix(s, "c") {
			problem(w, http.StatusBadRequest, api.CodeInvalidRequest, "bad cursor "+s)
			return
		}
		after = n
	}
	typ := q.Get("type")

	g.mu.Lock()
	t := g.tenant(tenantName)
	out := api.JobList{Jobs: []api.Job{}}
	i := after + 1
	for ; i < len(t.jobs) && len(out.Jobs) < limit; i++ {
		s := t.jobs[i]
		if s.hideList || (typ != "" && s.job.Type != typ) {
			continue
		}
		out.Jobs = append(out.Jobs, s.job)
	}
	if i < len(t.jobs) {
		next := "c" + strconv.Itoa(i-1)
		out.Next = &next
	}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (g *Gate) getJob(w http.ResponseWriter, r *http.Request) {
	tenantName, ok := g.auth(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	s, found := g.tenant(tenantName).byID[r.PathValue("id")]
	var job api.Job
	if found && !s.hideGet {
		job = s.job
	} else {
		found = false
	}
	g.mu.Unlock()
	if !found {
		problem(w, http.StatusNotFound, api.CodeJobNotFound, "no job "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, job)
}

func (g *Gate) getKey(w http.ResponseWriter, r *http.Request) {
	tenantName, ok := g.auth(w, r)
	if !ok {
		return
	}
	g.mu.Lock()
	e, found := g.tenant(tenantName).keys[r.PathValue("key")]
	var info api.KeyInfo
	if found {
		info = e.info
	}
	g.mu.Unlock()
	if !found {
		problem(w, http.StatusNotFound, api.CodeIdempotencyKeyNotFound, "no key "+r.PathValue("key"))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// canonical renders a JSON document with sorted keys and no whitespace.
func canonical(b []byte) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

func contentType(status int) string {
	if status >= 400 {
		return api.ContentTypeProblem
	}
	return api.ContentTypeJSON
}

func write(w http.ResponseWriter, status int, ctype, replayed string, body []byte, jobID *string) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set(api.HeaderReplayed, replayed)
	if status == http.StatusCreated && jobID != nil {
		w.Header().Set(api.HeaderLocation, "/v1/jobs/"+*jobID)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func problemBody(status int, code api.Code, detail, reason string) []byte {
	b, _ := json.Marshal(api.Problem{
		Type:   api.ProblemTypeBase + string(code),
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
		Reason: reason,
	})
	return b
}

func problem(w http.ResponseWriter, status int, code api.Code, detail string) {
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	w.WriteHeader(status)
	_, _ = w.Write(problemBody(status, code, detail, ""))
}
