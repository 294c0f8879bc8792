package manager

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The worker lifecycle at the leader (docs/ledger.md, "Job lifecycle"): what
// the RPC layer calls to lease, heartbeat, complete and fail jobs, and the
// leader's ExpireLeases loop. The leader decides every lease ID, time and
// retry delay (with its jitter) here and stamps them into the command; the
// ledger applies it deterministically. Each call is one Raft entry, at the
// leader only (rpc.CodeNotLeader elsewhere).

// Config.QueueJobs (MANAGER_JOB_QUEUE, default on) is the switch to the
// worker lifecycle: with it, the leader proposes Commits with Queue
// (ledger.QueueCommit), whose jobs are QUEUED for workers and never expire
// before they finish; without it, Commits whose jobs are outside the
// lifecycle and expire after MANAGER_JOB_RETENTION_SECONDS, for a
// deployment without workers.

// leaseJobs hands out up to req.MaxJobs queued jobs of the tenant (the oldest
// first; expired leases of the tenant first of all) to holder (recorded on
// each job), each under a new lease until now + the lease duration. An
// empty answer is not an error: nothing is due. Of req it reads the tenant,
// the types, MaxJobs (0: 1), the lease (0: MANAGER_JOB_LEASE_DEFAULT) and,
// when Request is set, Request and Fingerprint: the lease IDs are then
// derived from them, so a retry of the request, on this leader or the next,
// proposes the same ones and is answered with the jobs the first attempt
// leased while their leases last (ledger.Lease.Replay, the answer's
// Replayed). Errors are *rpc.Error values: CodeInvalid for a bad request
// (validateLease, which Lease has checked before it waits, and an empty
// holder), CodeNotLeader / CodeUnavailable as for a submission.
func (m *Manager) leaseJobs(ctx context.Context, req *rpcpb.LeaseRequest, holder string) (*ledger.LeaseResult, error) {
	if err := m.CheckLeader(); err != nil {
		return nil, err
	}
	if holder == "" {
		return nil, rpc.Errorf(rpc.CodeInvalid, "lease: worker is required")
	}
	if err := validateLease(req); err != nil {
		return nil, err
	}
	n := max(int(req.MaxJobs), 1) // 0: 1
	d, err := m.leaseDuration(leaseFor(req))
	if err != nil {
		return nil, err
	}
	now := m.ledgerNow()
	ids := make([]string, n)
	if req.Request != "" {
		// A retry of a request whose jobs are still held under its leases
		// is answered with them, from the ledger (after this term's
		// Barrier, it holds every lease an earlier leader gave). Else the
		// lease IDs are new: a job leased again (its lease expired, the
		// same request retried) never gets a lease ID it held before, which
		// a worker still holding the old lease could use.
		prefix := replayLeasePrefix(req.Tenant, req.Request+"\x00"+req.Fingerprint)
		if held := m.fsm.HeldLeases(req.Tenant, prefix, now.UnixNano()); len(held) > 0 {
			return &ledger.LeaseResult{Jobs: held[:min(len(held), n)], Replayed: true}, nil
		}
		for i := range ids {
			ids[i] = replayLeaseID(prefix, i)
		}
	} else {
		for i := range ids {
			ids[i] = newLeaseID()
		}
	}
	res, err := m.workers.apply(ctx, ledger.Lease{Tenant: req.Tenant, Holder: holder, Types: req.Types, Max: uint64(n),
		LeaseIDs: ids, Now: now.UnixNano(), Expiry: now.Add(d).UnixNano(), MaxAttempts: uint64(m.cfg.JobMaxAttempts),
		Replay: req.Request != "", MaxBytes: rpc.LeaseAnswerBytes})
	if err != nil {
		return nil, err
	}
	if res.Outcome != ledger.OutcomeLeased || res.Lease == nil {
		return nil, rpc.Errorf(rpc.CodeInternal, "lease: unexpected outcome %s", res.Outcome)
	}
	return res.Lease, nil
}

// HeartbeatJob extends the job's current lease leaseID to now + lease (0:
// MANAGER_JOB_LEASE_DEFAULT). CodeLeaseLost when leaseID is not the job's
// current lease (the worker must stop), CodeNotFound without the job.
func (m *Manager) HeartbeatJob(ctx context.Context, tenant, jobID, leaseID string, lease time.Duration) (ledger.Job, error) {
	return m.leaseCall(ctx, tenant, jobID, leaseID, ledger.OutcomeExtended, func() (ledger.Command, error) {
		d, err := m.leaseDuration(lease)
		if err != nil {
			return nil, err
		}
		now := m.ledgerNow()
		return ledger.Heartbeat{Tenant: tenant, JobID: jobID, LeaseID: leaseID,
			Now: now.UnixNano(), Expiry: now.Add(d).UnixNano()}, nil
	}, nil)
}

// CompleteJob ends the job's attempt under leaseID with its result:
// SUCCEEDED. Applied once: the same call again answers the same job.
// CodeLeaseLost when leaseID is not the job's current lease (the result is
// not recorded), CodeNotFound without the job, CodeBudgetExceeded when the
// ledger's byte budget (IDEMPOTENCY_LEDGER_MAX_BYTES) or the tenant's share
// cannot hold the result (nothing recorded; the job still runs under the
// lease).
func (m *Manager) CompleteJob(ctx context.Context, tenant, jobID, leaseID string, result json.RawMessage) (ledger.Job, error) {
	return m.leaseCall(ctx, tenant, jobID, leaseID, ledger.OutcomeCompleted, func() (ledger.Command, error) {
		if len(result) > 0 {
			// Stored as every answer writes it (compact, with encoding/json's
			// escapes), so what the ledger charges is what a read carries.
			b, err := json.Marshal(json.RawMessage(result))
			if err != nil {
				return nil, rpc.Errorf(rpc.CodeInvalid, "complete: the result is not JSON")
			}
			result = b
		}
		return ledger.Complete{Tenant: tenant, JobID: jobID, LeaseID: leaseID, Result: result,
			Now: m.ledgerNow().UnixNano(), MaxBytes: uint64(m.cfg.LedgerMaxBytes), MaxTenantBytes: uint64(m.cfg.LedgerTenantMaxBytes)}, nil
	}, nil)
}

// FailJob ends the job's attempt under leaseID with an error: with retry the
// job is queued again after a backoff (MANAGER_JOB_BACKOFF_MIN doubled per
// attempt up to MANAGER_JOB_BACKOFF_MAX, with jitter), or dead once it used
// MANAGER_JOB_MAX_ATTEMPTS; without retry it is failed. Errors as
// CompleteJob's.
func (m *Manager) FailJob(ctx context.Context, tenant, jobID, leaseID, errMsg string, retry bool) (ledger.Job, error) {
	return m.leaseCall(ctx, tenant, jobID, leaseID, ledger.OutcomeFailed, func() (ledger.Command, error) {
		// The attempt's number, for its backoff: the job as this leader has
		// applied it (the command itself judges the lease).
		attempts := uint64(1)
		if j, ok := m.fsm.Job(tenant, jobID); ok && j.Life != nil {
			attempts = max(j.Life.Attempts, 1)
		}
		now := m.ledgerNow()
		return ledger.Fail{Tenant: tenant, JobID: jobID, LeaseID: leaseID, Error: errMsg, Retry: retry,
			Now: now.UnixNano(), RetryAt: now.Add(m.backoff(attempts, rand.Float64())).UnixNano(),
			MaxAttempts: uint64(m.cfg.JobMaxAttempts), MaxBytes: uint64(m.cfg.LedgerMaxBytes), MaxTenantBytes: uint64(m.cfg.LedgerTenantMaxBytes)}, nil
	}, func(res ledger.Result) {
		if res.Job.State() == ledger.JobQueued {
			// Queued again (after its backoff): leases waiting at this
			// leader on a queue they found empty must hear of it, as of a
			// commit, or they would sleep to the end of their wait. Once
			// applied, whether or not the caller still waits for the
			// answer: one that left is not retried by anyone, and its
			// retry, answered as a replay, would come too late.
			m.jobsQueued.fire()
		}
	})
}

// leaseCall is a worker's call on a job it holds under leaseID (Heartbeat,
// Complete, Fail): at the leader, on a valid request, it proposes the command
// cmd makes and answers with the job, or an *rpc.Error; done is the outcome
// of the command's success. then, when not nil, is given the command's
// result once applied, even if ctx has ended (batcher.applyThen).
func (m *Manager) leaseCall(ctx context.Context, tenant, jobID, leaseID string, done ledger.Outcome,
	cmd func() (ledger.Command, error), then func(ledger.Result)) (ledger.Job, error) {
	if err := m.CheckLeader(); err != nil {
		return ledger.Job{}, err
	}
	if tenant == "" || jobID == "" || leaseID == "" {
		return ledger.Job{}, rpc.Errorf(rpc.CodeInvalid, "tenant, job ID and lease ID are required")
	}
	c, err := cmd()
	if err != nil {
		return ledger.Job{}, err
	}
	res, err := m.workers.applyThen(ctx, c, then)
	if err != nil {
		return ledger.Job{}, err
	}
	switch res.Outcome {
	case done, ledger.OutcomeUnchanged:
		return res.Job, nil
	case ledger.OutcomeLeaseLost:
		return res.Job, rpc.Errorf(rpc.CodeLeaseLost, "job %s: lease is not the job's current one (job %s)", res.Job.ID, res.Job.State())
	case ledger.OutcomeNotFound:
		return ledger.Job{}, rpc.Errorf(rpc.CodeNotFound, "job not found")
	case ledger.OutcomeTenantBytesFull:
		return res.Job, rpc.Errorf(rpc.CodeBudgetExceeded, "job %s: the tenant's share of the ledger (IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES) "+
			"cannot hold its result or error; nothing was recorded and the job is still running under the lease", res.Job.ID)
	case ledger.OutcomeBytesFull:
		return res.Job, rpc.Errorf(rpc.CodeBudgetExceeded, "job %s: the ledger (IDEMPOTENCY_LEDGER_MAX_BYTES) "+
			"cannot hold its result or error; nothing was recorded and the job is still running under the lease", res.Job.ID)
	}
	return ledger.Job{}, rpc.Errorf(rpc.CodeInternal, "unexpected outcome %s", res.Outcome)
}

// leaseDuration is the duration a worker asked for (0: the default), checked
// against the bounds.
func (m *Manager) leaseDuration(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return m.cfg.JobLeaseDefault, nil
	}
	if d < m.cfg.JobLeaseMin || d > m.cfg.JobLeaseMax {
		return 0, rpc.Errorf(rpc.CodeInvalid, "lease_for_nanos %d (%s): not within %s..%s", int64(d), d, m.cfg.JobLeaseMin, m.cfg.JobLeaseMax)
	}
	return d, nil
}

// backoff is the delay before a retry after the attempt-th failed attempt:
// MANAGER_JOB_BACKOFF_MIN doubled per attempt, capped at
// MANAGER_JOB_BACKOFF_MAX, with "equal jitter" (half of it fixed, half drawn
// by u in [0, 1)), so workers failing together do not retry together and the
// delay still grows. The draw is the leader's: the delay is stamped in the
// command (RetryAt), never drawn by a replica.
func (m *Manager) backoff(attempt uint64, u float64) time.Duration {
	lo, hi := m.cfg.JobBackoffMin, m.cfg.JobBackoffMax
	d := lo
	for i := uint64(1); i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return d - half + time.Duration(u*float64(half))
}

// replayLeasePrefix is what every lease ID given to a replayable request
// (tenant, request) starts with: 16 hex digits of a SHA-256 of them, so the
// leader finds the jobs the request holds (FSM.HeldLeases) through any
// leader.
func replayLeasePrefix(tenant, request string) string {
	h := sha256.New()
	for _, s := range []string{tenant, request} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// replayLeaseID is the i-th lease ID of a replayable request's Lease: its
// prefix, i in two hex digits (so the request's leases sort in the order
// they were handed out; i < ledger.MaxLease) and 56 random bits, as long as
// newLeaseID's. Each Lease proposed for the request has new ones, so a job
// leased again by a retry of the request does not get the lease ID of its
// earlier attempt. Unguessable: the random part, and the prefix is as hard
// to guess as the request's key and body.
func replayLeaseID(prefix string, i int) string {
	var b [7]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return prefix + fmt.Sprintf("%02x", i) + hex.EncodeToString(b[:])
}

// newLeaseID is a random 128-bit lease ID (hex): unguessable, so a worker
// cannot act on a lease it was not given.
func newLeaseID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// expireLeasesBatch bounds the leases one ExpireLeases ends.
const expireLeasesBatch = 1000

// leaseCheckInterval is how often the leader looks for expired leases. A
// lease may outlive its expiry by this much before ExpireLeases requeues its
// job; a Lease of the same tenant reclaims it at once anyway.
const leaseCheckInterval = time.Second

// expireLeases proposes ExpireLeases while a lease is due: the jobs of
// workers that stopped heartbeating go back to the queue (after
// MANAGER_JOB_BACKOFF_MIN), or die once they used their attempts.
func (m *Manager) expireLeases(ctx context.Context) {
	for ctx.Err() == nil {
		next, ok := m.fsm.NextLeaseExpiry()
		now := m.expiryNow()
		if !ok || next > now.UnixNano() {
			return
		}
		res, err := m.apply(ctx, ledger.ExpireLeases{Now: now.UnixNano(), Max: expireLeasesBatch,
			RetryAt: now.Add(m.cfg.JobBackoffMin).UnixNano(), MaxAttempts: uint64(m.cfg.JobMaxAttempts)})
		if err != nil {
			m.log.Warn("expiring job leases failed", logging.KeyError, err)
			return
		}
		if res.Lease != nil && res.Lease.Requeued+res.Lease.Dead > 0 {
			m.log.Info("job leases expired", logging.KeyRequeued, res.Lease.Requeued, logging.KeyDead, res.Lease.Dead)
		}
		if !res.More {
			return
		}
	}
}
