package fakemanager

import (
	"context"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// keptAction is a job action recorded under its idempotency key, as the
// real ledger records it: a repeat of the key is a replay (the job as it is
// now), the key with another fingerprint is refused.
type keptAction struct {
	fingerprint, jobID string
}

var _ rpc.JobActions = (*Manager)(nil)

// Cancel implements rpc.JobActions: a queued job ends cancelled; a
// cancelled one answers as it is (replayed).
func (m *Manager) Cancel(_ context.Context, req *rpc.JobActionRequest) (*rpc.JobActionResponse, error) {
	return m.jobAction(req, func(st string) (bool, error) {
		switch st {
		case api.JobStatusQueued:
			return true, nil
		case api.JobStatusCancelled:
			return false, nil
		}
		return false, rpc.Errorf(rpc.CodeConflict, "cancel: the job is %s", st)
	}, func(l *life) { l.state, l.leaseID = api.JobStatusCancelled, "" })
}

// Retry implements rpc.JobActions: a failed or dead job is queued again,
// its attempts kept.
func (m *Manager) Retry(_ context.Context, req *rpc.JobActionRequest) (*rpc.JobActionResponse, error) {
	return m.jobAction(req, func(st string) (bool, error) {
		if st == api.JobStatusFailed || st == api.JobStatusDead {
			return true, nil
		}
		return false, rpc.Errorf(rpc.CodeConflict, "retry: the job is %s", st)
	}, func(l *life) { l.state, l.leaseID = "", "" })
}

func (m *Manager) jobAction(req *rpc.JobActionRequest, judge func(state string) (bool, error), change func(*life)) (*rpc.JobActionResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leader {
		return nil, m.notLeader()
	}
	if req.Tenant == "" || req.JobID == "" || req.Key == "" || req.Fingerprint == "" {
		return nil, rpc.Errorf(rpc.CodeInvalid, "tenant, job ID, key and fingerprint are required")
	}
	k := req.Tenant + "\x00" + req.Key
	if kept, ok := m.actionKeys[k]; ok {
		if kept.fingerprint != req.Fingerprint {
			return nil, rpc.ErrRequestReused
		}
		return &rpc.JobActionResponse{Job: *m.render(m.byID[kept.jobID]), Replayed: true}, nil
	}
	if _, ok := m.entries[k]; ok {
		return nil, rpc.ErrRequestReused // a submission's key
	}
	rec, ok := m.byID[req.JobID]
	if !ok || rec.tenant != req.Tenant || !m.opts.Workers {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no job %q", req.JobID)
	}
	changes, err := judge(rec.state(m.opts.Now()))
	if err != nil {
		return nil, err
	}
	if !changes {
		return &rpc.JobActionResponse{Job: *m.render(rec), Replayed: true}, nil
	}
	change(&rec.life)
	if m.actionKeys == nil {
		m.actionKeys = map[string]keptAction{}
	}
	m.actionKeys[k] = keptAction{fingerprint: req.Fingerprint, jobID: req.JobID}
	return &rpc.JobActionResponse{Job: *m.render(rec)}, nil
}
