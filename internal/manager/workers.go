package manager

import (
	"context"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// The worker routes (rpc.Workers) on the leader's side: each call is one
// Raft command (jobs.go); a lease with a wait is held here until a job is
// queued (a long poll), so gates never poll the leader.

var _ rpc.Workers = (*Manager)(nil)

// Long-poll timing: how often a waiting lease looks at the ledger's queued
// count (a local read, no Raft), and how often it proposes a lease anyway
// while jobs are queued but none was leasable (a retry whose backoff ends,
// another tenant's jobs).
const (
	leaseWaitCheck = 20 * time.Millisecond
	leaseWaitRetry = time.Second
)

// Lease implements rpc.Workers.
func (m *Manager) Lease(ctx context.Context, req *rpc.LeaseRequest) (*rpc.LeaseResponse, error) {
	lr := LeaseRequest{Tenant: req.Tenant, Holder: req.Worker, Types: req.Types, Max: req.MaxJobs, Lease: req.LeaseFor}
	if lr.Holder == "" {
		lr.Holder = "worker"
	}
	deadline := time.Now().Add(req.Wait)
	for {
		queued := m.fsm.Stats().Queued
		jobs, err := m.LeaseJobs(ctx, lr)
		if err != nil {
			return nil, err
		}
		if len(jobs) > 0 || !time.Now().Before(deadline) {
			return m.leases(jobs), nil
		}
		if !m.awaitQueued(ctx, queued, deadline) {
			return m.leases(nil), nil
		}
	}
}

// awaitQueued waits until more jobs are queued than before, or jobs are
// queued and leaseWaitRetry has passed, or a lease has expired; false when
// the deadline or ctx came first (or this manager is no longer the leader).
func (m *Manager) awaitQueued(ctx context.Context, before int, deadline time.Time) bool {
	t := time.NewTicker(leaseWaitCheck)
	defer t.Stop()
	retry := time.Now().Add(leaseWaitRetry)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		now := time.Now()
		if !now.Before(deadline) || m.checkLeader() != nil {
			return false
		}
		q := m.fsm.Stats().Queued
		if q > before || (q > 0 && !now.Before(retry)) {
			return true
		}
		if next, ok := m.fsm.NextLeaseExpiry(); ok && next <= m.expiryNow().UnixNano() {
			return true
		}
	}
}

// leases renders leased jobs as the API shows them.
func (m *Manager) leases(jobs []ledger.Job) *rpc.LeaseResponse {
	out := &rpc.LeaseResponse{Leases: make([]api.Lease, 0, len(jobs))}
	for _, j := range jobs {
		l := api.Lease{Job: m.apiJobRead(j)}
		if j.Life != nil {
			l.LeaseID, l.Attempt = j.Life.LeaseID, int(j.Life.Attempts)
			l.ExpiresAt = api.FormatTime(time.Unix(0, j.Life.LeaseExpiresAt))
		}
		out.Leases = append(out.Leases, l)
	}
	return out
}

// Heartbeat implements rpc.Workers.
func (m *Manager) Heartbeat(ctx context.Context, req *rpc.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	j, err := m.HeartbeatJob(ctx, req.Tenant, req.JobID, req.LeaseID, req.LeaseFor)
	if err != nil {
		return nil, err
	}
	return &api.HeartbeatResponse{LeaseID: req.LeaseID, ExpiresAt: api.FormatTime(time.Unix(0, j.Life.LeaseExpiresAt))}, nil
}

// Complete implements rpc.Workers.
func (m *Manager) Complete(ctx context.Context, req *rpc.CompleteRequest) (*api.Job, error) {
	j, err := m.CompleteJob(ctx, req.Tenant, req.JobID, req.LeaseID, req.Result)
	if err != nil {
		return nil, err
	}
	out := m.apiJobRead(j)
	return &out, nil
}

// Fail implements rpc.Workers.
func (m *Manager) Fail(ctx context.Context, req *rpc.FailRequest) (*api.Job, error) {
	j, err := m.FailJob(ctx, req.Tenant, req.JobID, req.LeaseID, req.Error, req.Retry)
	if err != nil {
		return nil, err
	}
	out := m.apiJobRead(j)
	return &out, nil
}

// apiJobRead is a job as reads and worker calls show it: the admission
// answer's members (apiJob) and, for a job in the worker lifecycle, its
// state, attempts, result and error.
func (m *Manager) apiJobRead(j ledger.Job) api.Job {
	out := m.apiJob(j)
	if j.Life != nil {
		out.State, out.Attempts, out.Error = j.Life.State.String(), int(j.Life.Attempts), j.Life.Error
		if j.Life.State == ledger.JobSucceeded {
			out.Result = j.Life.Result
			if len(out.Result) == 0 {
				out.Result = []byte("null")
			}
		}
	}
	return out
}
