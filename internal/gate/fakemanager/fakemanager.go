// Package fakemanager is an in-memory stand-in for a datacenter's manager
// leader, for the gate's tests and benchmarks: a small idempotency ledger that
// implements rpc.Service and is served with rpc.NewServer, so the gate talks to
// it through the real RPC client and protocol.
//
// It keeps what the real ledger promises at the gate's boundary: entries deduped
// by (tenant, key) with fingerprints; PENDING, COMMITTED and REJECTED states with
// per-state TTLs on an injectable clock; a duplicate of a PENDING entry waits up
// to the request's WaitMillis; per-client watermarks so that a structured key
// whose entry expired is refused (key_expired); validation and capacity
// rejections; a bound on live entries (ErrLedgerFull). Tests inject failures and
// delays through hooks and count Submit calls.
//
// It is not durable and has no Raft: it is the gate's test double, not a model
// of the manager.
package fakemanager

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/jobid"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// Options configure a Manager. Zero values take the defaults noted.
type Options struct {
	// Datacenter names the manager's datacenter (default dc1).
	Datacenter string
	// Now is the ledger's clock (default time.Now).
	Now func() time.Time
	// PendingTTL, CommittedTTL and RejectedTTL are the entries' lifetimes
	// (defaults 60s, 300s, 60s: those of the IDEMPOTENCY_* settings).
	PendingTTL, CommittedTTL, RejectedTTL time.Duration
	// Capacity bounds the committed jobs; a submission beyond it is rejected
	// with status 429 and reason "capacity" (0: unlimited).
	Capacity int
	// MaxEntries bounds the live entries; a new key beyond it gets
	// rpc.ErrLedgerFull (0: unlimited).
	MaxEntries int
	// Reject, when set, is the validation step of admission: a non-nil
	// Rejection refuses the job.
	Reject func(req *rpc.SubmitRequest) *rpc.Rejection
	// Workers queues committed jobs for workers (rpc.Workers, workers.go);
	// without it jobs stay outside the lifecycle and reads show no state.
	Workers bool
	// MaxResultBytes, when positive, refuses a longer result or error with
	// rpc.CodeBudgetExceeded, as the ledger's byte budgets do.
	MaxResultBytes int
}

// resultTTL is the lifetime of an outcome: the request's ResultTTL when
// positive (the first admission's: retries never reach this point), else the
// configured one.
func resultTTL(req *rpc.SubmitRequest, configured time.Duration) time.Duration {
	if req.ResultTTL > 0 {
		return req.ResultTTL
	}
	return configured
}

// expiryBasis is the instant an outcome's TTL counts from: the gate's
// ExpiryBasis when it is within 2s of the fake's clock (as the real manager
// bounds it), else now.
func expiryBasis(req *rpc.SubmitRequest, now time.Time) time.Time {
	if b := req.ExpiryBasis; !b.IsZero() && b.Sub(now).Abs() <= 2*time.Second {
		return b
	}
	return now
}

// SubmitHook runs at the start of every Submit call, before the ledger is
// looked at. It may block (honouring ctx) and may fail the call: the error is
// returned to the gate as the manager's answer (use *rpc.Error values).
type SubmitHook func(ctx context.Context, req *rpc.SubmitRequest) error

// ReservedHook runs after a new key was reserved PENDING and before admission
// decides it. It may block: the entry stays PENDING meanwhile.
type ReservedHook func(ctx context.Context, req *rpc.SubmitRequest)

// Manager is the fake manager leader. It is safe for concurrent use.
type Manager struct {
	opts Options

	submits atomic.Int64

	mu         sync.Mutex
	leader     bool
	submitHook SubmitHook
	reserved   ReservedHook
	readErr    error
	entries    map[string]*entry // by tenant "\x00" key
	jobs       []*jobRecord      // in creation order
	byID       map[string]*jobRecord
	watermarks map[string]uint64 // by tenant "\x00" client_id "\x00" nonce
	committed  int
	leases     int // lease ids handed out
	// leaseAnswers: leases asked with an idempotency key, by tenant and key.
	leaseAnswers map[string]keptLease
	// actionKeys: the job actions (cancel, retry) recorded by key, by tenant
	// and key.
	actionKeys map[string]keptAction
}

type entry struct {
	tenant, key string
	fp          string
	state       string // api.KeyState*
	home        string // a claim's (api.KeyStateClaimed)
	jobID       string
	job         *api.Job
	rejection   *rpc.Rejection
	expires     time.Time
	done        chan struct{} // closed when the entry leaves PENDING
}

type jobRecord struct {
	tenant string
	job    api.Job
	life   life
}

// New returns a leader with an empty ledger.
func New(opts Options) *Manager {
	if opts.Datacenter == "" {
		opts.Datacenter = "dc1"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PendingTTL <= 0 {
		opts.PendingTTL = 60 * time.Second
	}
	if opts.CommittedTTL <= 0 {
		opts.CommittedTTL = 300 * time.Second
	}
	if opts.RejectedTTL <= 0 {
		opts.RejectedTTL = 60 * time.Second
	}
	return &Manager{
		opts:       opts,
		leader:     true,
		entries:    map[string]*entry{},
		byID:       map[string]*jobRecord{},
		watermarks: map[string]uint64{},
	}
}

// Serve serves m over the RPC protocol (rpc.NewServer) on a port of
// 127.0.0.1, closed at the end of the test, and returns its address (host:port).
func Serve(tb testing.TB, m *Manager) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := rpc.NewServer(m, rpc.ServerConfig{})
	addr := ln.Addr().String()
	// The federation view of a manager alone in its datacenter.
	srv.SetFederation(func() *rpc.Federation {
		return &rpc.Federation{Datacenter: m.opts.Datacenter, Datacenters: map[string][]string{m.opts.Datacenter: {addr}}}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return addr
}

// Submits returns how many Submit calls reached the manager.
func (m *Manager) Submits() int64 { return m.submits.Load() }

// Jobs returns how many jobs exist, over all tenants.
func (m *Manager) Jobs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.jobs)
}

// SetLeader makes the manager a leader or a follower that knows no leader
// (every call then answers not_leader, which the gate's client retries until
// its deadline).
func (m *Manager) SetLeader(leader bool) {
	m.mu.Lock()
	m.leader = leader
	m.mu.Unlock()
}

// SetSubmitHook installs (or, with nil, removes) the hook run by every Submit.
func (m *Manager) SetSubmitHook(h SubmitHook) {
	m.mu.Lock()
	m.submitHook = h
	m.mu.Unlock()
}

// SetReservedHook installs (or, with nil, removes) the hook run after a new key
// is reserved.
func (m *Manager) SetReservedHook(h ReservedHook) {
	m.mu.Lock()
	m.reserved = h
	m.mu.Unlock()
}

// SetReadError makes every read (GetJob, ListJobs, GetKey) fail with err
// (nil: reads work).
func (m *Manager) SetReadError(err error) {
	m.mu.Lock()
	m.readErr = err
	m.mu.Unlock()
}

// SetCapacity changes the bound on committed jobs (0: unlimited).
func (m *Manager) SetCapacity(n int) {
	m.mu.Lock()
	m.opts.Capacity = n
	m.mu.Unlock()
}

// Expire removes the entry of (tenant, key) as its TTL would; the client's
// watermark stays. It reports whether there was an entry.
func (m *Manager) Expire(tenant, key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[entryKey(tenant, key)]
	if ok && e.state == api.KeyStatePending {
		close(e.done)
	}
	delete(m.entries, entryKey(tenant, key))
	return ok
}

func entryKey(tenant, key string) string { return tenant + "\x00" + key }

func (m *Manager) notLeader() error {
	return &rpc.Error{Code: rpc.CodeNotLeader, Message: "fake manager is a follower with no known leader"}
}

// live returns the unexpired entry under k, dropping an expired one. m.mu held.
func (m *Manager) live(k string, now time.Time) *entry {
	e, ok := m.entries[k]
	if !ok {
		return nil
	}
	if !now.Before(e.expires) {
		if e.state == api.KeyStatePending {
			close(e.done)
		}
		delete(m.entries, k)
		return nil
	}
	return e
}

// Submit implements rpc.Service. Like the real manager, it answers the time
// left on the entry (Remaining) by its own clock (Options.Now).
func (m *Manager) Submit(ctx context.Context, req *rpc.SubmitRequest) (*rpc.SubmitResponse, error) {
	resp, err := m.submit(ctx, req)
	if resp != nil && !resp.ExpiresAt.IsZero() {
		resp.Remaining = max(resp.ExpiresAt.Sub(m.opts.Now()), time.Nanosecond)
	}
	return resp, err
}

func (m *Manager) submit(ctx context.Context, req *rpc.SubmitRequest) (*rpc.SubmitResponse, error) {
	m.submits.Add(1)
	m.mu.Lock()
	hook := m.submitHook
	m.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, req); err != nil {
			return nil, err
		}
	}

	m.mu.Lock()
	if !m.leader {
		m.mu.Unlock()
		return nil, m.notLeader()
	}
	now := m.opts.Now()
	k := entryKey(req.Tenant, req.Key)
	if e := m.live(k, now); e != nil && e.fp == req.Fingerprint && e.state == api.KeyStateClaimed &&
		req.Home == m.opts.Datacenter && m.opts.Datacenter < e.home {
		delete(m.entries, k) // as the real manager: the home that sorts first wins the key
	}
	if e := m.live(k, now); e != nil {
		if e.fp != req.Fingerprint {
			m.mu.Unlock()
			return &rpc.SubmitResponse{Outcome: rpc.OutcomeKeyReused, Replayed: true, ExpiresAt: e.expires}, nil
		}
		if e.state != api.KeyStatePending {
			resp := e.response(true)
			m.mu.Unlock()
			return resp, nil
		}
		done := e.done
		m.mu.Unlock()
		return m.awaitPending(ctx, e, done, req)
	}
	key, err := keys.Parse(keys.Key{Raw: req.Key}.String())
	if err != nil {
		m.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInvalid, "key: %v", err)
	}
	if key.Structured {
		if w, ok := m.watermarks[watermarkKey(req.Tenant, key)]; ok && key.Sequence <= w {
			m.mu.Unlock()
			return &rpc.SubmitResponse{Outcome: rpc.OutcomeKeyExpired}, nil
		}
	}
	jobID := req.ProposedJobID
	if jobID == "" {
		jobID = jobid.Derive(req.Tenant, req.Key, req.Fingerprint)
	}
	if req.Home != "" && req.Home != m.opts.Datacenter {
		// A claim: the key held for the job of another datacenter, no job.
		e := &entry{tenant: req.Tenant, key: req.Key, fp: req.Fingerprint, state: api.KeyStateClaimed, home: req.Home,
			jobID: jobID, expires: expiryBasis(req, now).Add(resultTTL(req, m.opts.CommittedTTL)), done: make(chan struct{})}
		m.entries[k] = e
		m.mu.Unlock()
		return e.response(false), nil
	}
	if rec, ok := m.byID[jobID]; ok && rec.tenant == req.Tenant && !key.Structured {
		// As the real manager: the same (tenant, key, fingerprint) derives
		// the same job ID; its job, still retained after the entry expired,
		// is the answer, and no second job is made.
		job := rec.job
		m.mu.Unlock()
		return &rpc.SubmitResponse{Outcome: rpc.OutcomeCommitted, Replayed: true, JobID: jobID, Job: &job}, nil
	}
	if m.opts.MaxEntries > 0 && len(m.entries) >= m.opts.MaxEntries {
		m.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeLedgerFull, "fake ledger holds %d live entries", len(m.entries))
	}
	e := &entry{
		tenant:  req.Tenant,
		key:     req.Key,
		fp:      req.Fingerprint,
		state:   api.KeyStatePending,
		jobID:   jobID,
		expires: now.Add(m.opts.PendingTTL),
		done:    make(chan struct{}),
	}
	m.entries[k] = e
	reserved := m.reserved
	m.mu.Unlock()

	if reserved != nil {
		reserved(ctx, req)
	}

	var rej *rpc.Rejection
	if m.opts.Reject != nil {
		rej = m.opts.Reject(req)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.state != api.KeyStatePending || m.entries[k] != e {
		// Expired (or removed) while admission ran: the real ledger would
		// have resolved it on a new leader; the fake answers unavailable.
		return nil, rpc.Errorf(rpc.CodeUnavailable, "entry expired while pending")
	}
	now = m.opts.Now()
	if rej == nil && m.opts.Capacity > 0 && m.committed >= m.opts.Capacity {
		rej = &rpc.Rejection{Status: 429, Reason: "capacity", Detail: fmt.Sprintf("the datacenter holds its maximum of %d jobs", m.opts.Capacity)}
	}
	if rej != nil {
		e.state, e.rejection, e.expires = api.KeyStateRejected, rej, expiryBasis(req, now).Add(resultTTL(req, m.opts.RejectedTTL))
	} else {
		// As the real manager: this datacenter's outcome only; a gate
		// combining several datacenters merges the maps.
		dcs := map[string]api.DatacenterStatus{m.opts.Datacenter: {Status: api.JobStatusCommitted}}
		job := api.Job{
			JobID:          e.jobID,
			Type:           req.Job.Type,
			Status:         api.JobStatusCommitted,
			IdempotencyKey: req.Key,
			CreatedAt:      api.FormatTime(now),
			Datacenters:    dcs,
			Payload:        req.Job.Payload,
		}
		rec := &jobRecord{tenant: req.Tenant, job: job}
		m.jobs = append(m.jobs, rec)
		m.byID[job.JobID] = rec
		m.committed++
		e.state, e.job, e.expires = api.KeyStateCommitted, &rec.job, expiryBasis(req, now).Add(resultTTL(req, m.opts.CommittedTTL))
		if key.Structured {
			wk := watermarkKey(req.Tenant, key)
			if w, ok := m.watermarks[wk]; !ok || key.Sequence > w {
				m.watermarks[wk] = key.Sequence
			}
		}
	}
	close(e.done)
	return e.response(false), nil
}

// awaitPending answers a duplicate of a PENDING entry: its outcome if it comes
// within WaitMillis, else in_progress.
func (m *Manager) awaitPending(ctx context.Context, e *entry, done <-chan struct{}, req *rpc.SubmitRequest) (*rpc.SubmitResponse, error) {
	inProgress := func() (*rpc.SubmitResponse, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return &rpc.SubmitResponse{Outcome: rpc.OutcomeInProgress, JobID: e.jobID, ExpiresAt: e.expires}, nil
	}
	if req.WaitMillis <= 0 {
		return inProgress()
	}
	t := time.NewTimer(time.Duration(req.WaitMillis) * time.Millisecond)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return inProgress()
	case <-ctx.Done():
		return nil, rpc.Errorf(rpc.CodeUnavailable, "request cancelled while waiting")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.state == api.KeyStatePending {
		return nil, rpc.Errorf(rpc.CodeUnavailable, "entry expired while pending")
	}
	return e.response(true), nil
}

// response renders a resolved entry. m.mu held.
func (e *entry) response(replayed bool) *rpc.SubmitResponse {
	r := &rpc.SubmitResponse{Replayed: replayed, JobID: e.jobID, ExpiresAt: e.expires}
	switch e.state {
	case api.KeyStateCommitted:
		job := *e.job
		r.Outcome, r.Job = rpc.OutcomeCommitted, &job
	case api.KeyStateRejected:
		rej := *e.rejection
		r.Outcome, r.Rejection = rpc.OutcomeRejected, &rej
	case api.KeyStateClaimed:
		r.Outcome, r.Home = rpc.OutcomeClaimed, e.home
	}
	return r
}

func watermarkKey(tenant string, k keys.Key) string {
	return tenant + "\x00" + k.ClientID + "\x00" + k.Nonce
}

func (m *Manager) readCheck() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readErr != nil {
		return m.readErr
	}
	if !m.leader {
		return m.notLeader()
	}
	return nil
}

// GetJob implements rpc.Service.
func (m *Manager) GetJob(ctx context.Context, tenant, id string) (*api.Job, error) {
	if err := m.readCheck(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.byID[id]
	if !ok || rec.tenant != tenant {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no job %q", id)
	}
	return m.render(rec), nil
}

// ListJobs implements rpc.Service. The cursor is the creation index of the
// page's last job, in decimal.
func (m *Manager) ListJobs(ctx context.Context, req *rpc.ListJobsRequest) (*rpc.ListJobsResponse, error) {
	if err := m.readCheck(); err != nil {
		return nil, err
	}
	start := 0
	if req.After != "" {
		n, err := strconv.Atoi(req.After)
		if err != nil || n < 0 {
			return nil, rpc.Errorf(rpc.CodeInvalid, "after: %q is not a cursor", req.After)
		}
		start = n + 1
	}
	limit := req.Limit
	if limit <= 0 {
		limit = api.DefaultListLimit
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	resp := &rpc.ListJobsResponse{Jobs: []api.Job{}}
	last := -1
	for i := start; i < len(m.jobs); i++ {
		rec := m.jobs[i]
		job := m.render(rec)
		if rec.tenant != req.Tenant || (req.Type != "" && job.Type != req.Type) || (req.Status != "" && job.Status != req.Status && job.State != req.Status) {
			continue
		}
		if len(resp.Jobs) == limit {
			// Another job matches beyond the page: the cursor names the
			// page's last job.
			resp.Next = strconv.Itoa(last)
			return resp, nil
		}
		resp.Jobs = append(resp.Jobs, *job)
		last = i
	}
	return resp, nil
}

// GetKey implements rpc.Service.
func (m *Manager) GetKey(ctx context.Context, tenant, key string) (*api.KeyInfo, error) {
	if err := m.readCheck(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(entryKey(tenant, key), m.opts.Now())
	if e == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no entry for key %q", key)
	}
	info := &api.KeyInfo{Key: key, State: e.state, ExpiresAt: api.FormatTime(e.expires)}
	if e.state != api.KeyStateRejected {
		id := e.jobID
		info.JobID = &id
	}
	info.Home = e.home
	if k, err := keys.Parse(keys.Key{Raw: key}.String()); err == nil && k.Structured {
		seq := k.Sequence
		info.ClientID, info.Sequence, info.Nonce = k.ClientID, &seq, k.Nonce
	}
	return info, nil
}

// Status implements rpc.Service.
func (m *Manager) Status(ctx context.Context) (*rpc.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := &rpc.Status{NodeID: "fake-manager", Datacenter: m.opts.Datacenter, IsLeader: m.leader, RaftState: "Follower"}
	if m.leader {
		st.RaftState = "Leader"
	}
	return st, nil
}
