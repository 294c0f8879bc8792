package manager

import (
	"context"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

var _ rpc.Service = (*Manager)(nil)

// checkRead makes reads linearizable: only a leader that a quorum still follows
// (VerifyLeader) answers, so a deposed leader cannot serve a stale "not found".
func (m *Manager) checkRead() error {
	if err := m.CheckLeader(); err != nil {
		return err
	}
	release, err := m.holdRaft() // Close waits for the answer before Raft stops
	if err != nil {
		return err
	}
	defer release()
	if err := m.raft.VerifyLeader().Error(); err != nil {
		return m.notLeader()
	}
	return nil
}

// GetJob implements rpc.Service.
func (m *Manager) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	if err := m.checkRead(); err != nil {
		return nil, err
	}
	j, ok := m.fsm.Job(tenant, id)
	if !ok || j.Gone(m.expiryNow().UnixNano()) {
		return nil, rpc.Errorf(rpc.CodeNotFound, "job %q not found", id)
	}
	return m.pbJobRead(j), nil
}

// encodeCursor makes a ledger sequence an opaque cursor, for a page in the
// order desc says: "v1:SEQ" oldest first, "v1:dSEQ" newest first.
func encodeCursor(seq uint64, desc bool) string {
	s := "v1:"
	if desc {
		s += "d"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s + strconv.FormatUint(seq, 10)))
}

// decodeCursor reads a cursor of encodeCursor's, and the order it pages in.
func decodeCursor(s string) (seq uint64, desc, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 4 || string(b[:3]) != "v1:" {
		return 0, false, false
	}
	b = b[3:]
	if b[0] == 'd' {
		desc, b = true, b[1:]
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	return n, desc, err == nil
}

// ListJobs implements rpc.Service.
func (m *Manager) ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	if err := m.checkRead(); err != nil {
		return nil, err
	}
	// A job past its retention, not yet removed by an Expire, is left out
	// as GetJob leaves it out, by the same clock: a job listed is one a
	// read at that instant finds (TestListAgreesWithReadAtRetentionsEnd).
	opts := ledger.ListOptions{Type: req.Type, Status: req.Status, Limit: int(req.Limit), MaxBytes: rpc.ListPageBytes, Desc: req.Desc,
		Now: m.expiryNow().UnixNano()}
	if req.Status == api.JobStatusCommitted {
		opts.Status = "" // every job is a committed one, in the lifecycle or not
	}
	if req.Limit < 0 || req.Limit > api.MaxListLimit {
		return nil, rpc.Errorf(rpc.CodeInvalid, "limit %d: want 1 to %d (0: the default)", req.Limit, api.MaxListLimit)
	}
	if _, ok := ledger.ParseJobState(req.Status); req.Status != "" && !ok {
		return nil, rpc.Errorf(rpc.CodeInvalid, "status %q: not a job status", req.Status)
	}
	if req.After != "" {
		// A cursor pages in the order of the page that returned it.
		after, desc, ok := decodeCursor(req.After)
		if !ok || desc != req.Desc {
			return nil, rpc.Errorf(rpc.CodeInvalid, "after: not a cursor this API returned")
		}
		opts.After = after
	}
	jobs, next, more := m.fsm.ListJobs(req.Tenant, opts)
	if len(jobs) == 1 && ledger.ListJobBytes(&jobs[0]) > rpc.MaxJobBytes {
		return nil, rpc.Errorf(rpc.CodeTooLarge, "job %s is too large to be listed (%d bytes; a page carries at most %d)",
			jobs[0].ID, ledger.ListJobBytes(&jobs[0]), rpc.MaxJobBytes)
	}
	resp := &rpcpb.ListJobsResponse{Jobs: make([]*rpcpb.Job, 0, len(jobs))}
	for _, j := range jobs {
		resp.Jobs = append(resp.Jobs, m.pbJobRead(j))
	}
	if more {
		resp.Next = encodeCursor(next, req.Desc)
	}
	return resp, nil
}

// GetKey implements rpc.Service.
func (m *Manager) GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error) {
	if err := m.checkRead(); err != nil {
		return nil, err
	}
	e, ok := m.liveEntry(tenant, key)
	if !ok {
		return nil, rpc.Errorf(rpc.CodeNotFound, "idempotency key not found")
	}
	info := &rpcpb.KeyInfo{Key: e.Key, State: e.State.String(), ExpiresAt: api.FormatTime(time.Unix(0, e.ExpiresAt))}
	if e.State != ledger.StateRejected {
		id := e.JobID
		info.JobId = &id
	}
	info.Home = e.Home()
	if e.Structured {
		seq := e.Sequence
		info.ClientId, info.Sequence, info.Nonce = e.ClientID, &seq, e.Nonce
	} else if k, err := keys.Parse(e.Key); err == nil && k.Structured {
		seq := k.Sequence
		info.ClientId, info.Sequence, info.Nonce = k.ClientID, &seq, k.Nonce
	}
	return info, nil
}

// Status implements rpc.Service: this node's view, answered by every manager.
func (m *Manager) Status(ctx context.Context) (*rpc.Status, error) {
	_, id := m.raft.LeaderWithID()
	st := &rpc.Status{
		NodeID:       m.cfg.NodeID,
		Datacenter:   m.cfg.Datacenter,
		RaftState:    m.raft.State().String(),
		IsLeader:     m.CheckLeader() == nil,
		LeaderID:     string(id),
		Term:         m.raft.CurrentTerm(),
		CommitIndex:  m.raft.CommitIndex(),
		AppliedIndex: m.raft.AppliedIndex(),
	}
	if id != "" {
		st.LeaderRPC = m.peerRPC(string(id))
	}
	st.LastIndex = m.raft.LastIndex()
	st.LogBatches = m.logStore.batches.Load()
	fs := m.fsm.Stats()
	st.LedgerEntries, st.Jobs = fs.Entries, fs.Jobs
	st.Queues = &rpc.QueueCounts{Queued: fs.Queued, Running: fs.Running, Succeeded: fs.Succeeded, Failed: fs.Failed, Dead: fs.Dead, Cancelled: fs.Cancelled}
	st.Budgets = &rpc.Budgets{Entries: fs.Entries, MaxEntries: m.cfg.LedgerMaxEntries, Bytes: fs.Bytes, MaxBytes: m.cfg.LedgerMaxBytes,
		TenantMaxBytes: m.cfg.LedgerTenantMaxBytes, Queued: fs.Queued, MaxQueued: m.cfg.MaxQueuedJobs,
		Outbox: m.fsm.OutboxLen(), OutboxMax: m.cfg.OutboxMaxEntries}
	m.clockStatus(st)
	st.Voters, _ = m.voterIDs()
	if ap := m.autopilot.Load(); ap != nil {
		// raft-autopilot's state, on the leader once it has computed one.
		st.Autopilot, st.RefusedServers = ap.Health(), ap.Refused()
	}
	st.ConfigMismatches = []rpc.ConfigMismatch{}
	if m.deps.ConfigMismatches != nil {
		st.ConfigMismatches = m.deps.ConfigMismatches()
	}
	return st, nil
}
