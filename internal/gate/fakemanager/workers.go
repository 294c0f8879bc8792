package fakemanager

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// life is a fake job's place in the worker lifecycle (rpc.Workers): the
// real ledger's rules, kept simple — oldest first, one lease at a time, a
// lease that has expired is lost and its job leasable again, MaxAttempts 3.
type life struct {
	state    string // "" is queued
	attempts int
	leaseID  string
	leaseExp time.Time
	result   []byte
	err      string
}

// fakeMaxAttempts is when a failed or expired attempt makes a fake job dead.
const fakeMaxAttempts = 3

// render is a job as reads show it.
func (m *Manager) render(rec *jobRecord) *api.Job {
	j := rec.job
	if !m.opts.Workers {
		return &j
	}
	j.State, j.Attempts, j.Result, j.Error = rec.state(m.opts.Now()), rec.life.attempts, rec.life.result, rec.life.err
	return &j
}

// state is the record's lifecycle state at now.
func (rec *jobRecord) state(now time.Time) string {
	switch {
	case rec.life.state == "":
		return api.JobStatusQueued
	case rec.life.state == api.JobStatusRunning && !now.Before(rec.life.leaseExp):
		if rec.life.attempts >= fakeMaxAttempts {
			return api.JobStatusDead
		}
		return api.JobStatusQueued
	}
	return rec.life.state
}

// keptLease is a lease answer kept for its idempotency key.
type keptLease struct {
	fingerprint string
	resp        *rpc.LeaseResponse
}

// Lease implements rpc.Workers; with a Wait it polls the fake's own state
// (the real leader waits for a commit). A lease with a Request is answered
// once, as the real leader does: a repeat gets the same answer, replayed.
func (m *Manager) Lease(ctx context.Context, req *rpc.LeaseRequest) (*rpc.LeaseResponse, error) {
	id := req.Tenant + "\x00" + req.Request
	if req.Request != "" {
		m.mu.Lock()
		k, ok := m.leaseAnswers[id]
		m.mu.Unlock()
		switch {
		case ok && k.fingerprint != req.Fingerprint:
			return nil, rpc.ErrRequestReused
		case ok:
			out := *k.resp
			out.Replayed = true
			return &out, nil
		}
	}
	deadline := m.opts.Now().Add(req.Wait)
	for {
		resp, err := m.lease(req)
		if err != nil || len(resp.Leases) > 0 || !m.opts.Now().Before(deadline) {
			if err == nil && req.Request != "" {
				m.mu.Lock()
				if m.leaseAnswers == nil {
					m.leaseAnswers = map[string]keptLease{}
				}
				m.leaseAnswers[id] = keptLease{fingerprint: req.Fingerprint, resp: resp}
				m.mu.Unlock()
			}
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (m *Manager) lease(req *rpc.LeaseRequest) (*rpc.LeaseResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leader {
		return nil, m.notLeader()
	}
	now := m.opts.Now()
	out := &rpc.LeaseResponse{Leases: []api.Lease{}}
	for _, rec := range m.jobs {
		if len(out.Leases) == req.MaxJobs {
			break
		}
		if !m.opts.Workers || rec.tenant != req.Tenant || rec.state(now) != api.JobStatusQueued ||
			(len(req.Types) > 0 && !slices.Contains(req.Types, rec.job.Type)) {
			continue
		}
		m.leases++
		rec.life.state, rec.life.attempts = api.JobStatusRunning, rec.life.attempts+1
		rec.life.leaseID, rec.life.leaseExp = "lease-"+strconv.Itoa(m.leases), now.Add(req.LeaseFor)
		out.Leases = append(out.Leases, api.Lease{LeaseID: rec.life.leaseID, Job: *m.render(rec),
			Attempt: rec.life.attempts, ExpiresAt: api.FormatTime(rec.life.leaseExp)})
	}
	return out, nil
}

// held returns the job whose current lease is leaseID.
func (m *Manager) held(tenant, id, leaseID string) (*jobRecord, error) {
	if !m.leader {
		return nil, m.notLeader()
	}
	rec, ok := m.byID[id]
	if !ok || rec.tenant != tenant {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no job %q", id)
	}
	if rec.life.leaseID != leaseID || rec.state(m.opts.Now()) != api.JobStatusRunning {
		return rec, rpc.ErrLeaseLost
	}
	return rec, nil
}

// Heartbeat implements rpc.Workers.
func (m *Manager) Heartbeat(_ context.Context, req *rpc.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, err := m.held(req.Tenant, req.JobID, req.LeaseID)
	if err != nil {
		return nil, err
	}
	rec.life.leaseExp = m.opts.Now().Add(req.LeaseFor)
	return &api.HeartbeatResponse{LeaseID: req.LeaseID, ExpiresAt: api.FormatTime(rec.life.leaseExp)}, nil
}

// Complete implements rpc.Workers; the same completion again answers the
// same job.
func (m *Manager) Complete(_ context.Context, req *rpc.CompleteRequest) (*api.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, err := m.held(req.Tenant, req.JobID, req.LeaseID)
	if rec != nil && rec.life.state == api.JobStatusSucceeded && rec.life.leaseID == req.LeaseID {
		return m.render(rec), nil
	}
	if err != nil {
		return nil, err
	}
	if err := m.budget(len(req.Result)); err != nil {
		return nil, err
	}
	rec.life.state, rec.life.result = api.JobStatusSucceeded, req.Result
	return m.render(rec), nil
}

// budget refuses a result or error over Options.MaxResultBytes.
func (m *Manager) budget(n int) error {
	if m.opts.MaxResultBytes > 0 && n > m.opts.MaxResultBytes {
		return rpc.Errorf(rpc.CodeBudgetExceeded, "%d bytes over the fake's budget of %d", n, m.opts.MaxResultBytes)
	}
	return nil
}

// Fail implements rpc.Workers: queued again at once (the fake has no
// backoff), dead after fakeMaxAttempts, failed when Retry is false.
func (m *Manager) Fail(_ context.Context, req *rpc.FailRequest) (*api.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, err := m.held(req.Tenant, req.JobID, req.LeaseID)
	if err != nil {
		return nil, err
	}
	rec.life.err, rec.life.leaseID = req.Error, ""
	switch {
	case !req.Retry:
		rec.life.state = api.JobStatusFailed
	case rec.life.attempts >= fakeMaxAttempts:
		rec.life.state = api.JobStatusDead
	default:
		rec.life.state = ""
	}
	return m.render(rec), nil
}
