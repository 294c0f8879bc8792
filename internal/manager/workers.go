package manager

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// The worker routes (rpc.Workers) on the leader's side: each call is one
// Raft command (jobs.go); a lease with a wait is held here until a job is
// queued (a long poll), so gates never poll the leader.

var _ rpc.Workers = (*Manager)(nil)

// leaseWaitRetry: while jobs are queued but none was leasable (a retry whose
// backoff has not ended, another tenant's or type's jobs), a waiting lease
// proposes a Lease again this often.
const leaseWaitRetry = time.Second

// leaseReplayTTL, leaseReplayMax and leaseReplayBytes bound the leader's
// memory of lease answers (the gate keeps each worker call's answer as
// long): past a bound the least recently used answers are dropped.
const (
	leaseReplayTTL   = 10 * time.Minute
	leaseReplayMax   = 100_000
	leaseReplayBytes = 64 << 20
)

// leaseAnswer is a lease asked with an idempotency key, as answered.
type leaseAnswer struct {
	fingerprint string
	resp        *rpcpb.LeaseResponse
	err         error
}

// size is what a kept lease answer costs: the answer as encoded (each job's
// payload, its error, which a job leased again after a failed attempt
// carries, and its other members) and a fixed overhead per lease.
func (a leaseAnswer) size() int64 {
	n := int64(len(a.fingerprint)) + 64
	if a.resp != nil {
		n += int64(proto.Size(a.resp)) + 512*int64(len(a.resp.Leases))
	}
	return n
}

// Lease implements rpc.Workers. A lease asked with an idempotency key
// (req.Request) is answered once: a repeat of the key, through any gate,
// gets the first answer, the same jobs under the same leases, for
// leaseReplayTTL while this node leads (in this term, until a Restore); at a
// later leader, after a Restore, or at this one leading again, the jobs the
// key's attempts leased, as long as their leases last, from the ledger (the
// lease IDs are derived from the key and the body, ledger.Lease.Replay).
// Without that, a worker whose answer was lost (a timeout, a gate or a
// leader that died) would lease other jobs on its retry, and the first ones
// would come back only when their leases expire.
func (m *Manager) Lease(ctx context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	if err := validateLease(req); err != nil {
		return nil, err
	}
	if req.Request == "" {
		return m.lease(ctx, ctx, req)
	}
	if err := m.CheckLeader(); err != nil {
		return nil, err // not_leader: the gate asks the leader, whose memory it is
	}
	// The memory is this term's (its term is in the key): while another
	// manager led, the key's retries may have leased its jobs again (their
	// first leases expired) under leases this memory never saw, and its
	// answer would give the worker a lease the ledger has ended while the
	// current one, held for the key, waited for its expiry. In a new term
	// the ledger answers (leaseJobs: FSM.HeldLeases).
	a, replayed, err := m.leaseReplays.Do(ctx, m.leaseReplayKey(req.Tenant, req.Request), func(ctx context.Context) (leaseAnswer, bool) {
		// The long poll lasts while any caller of the key waits (ctx); once
		// proposed, the lease is applied and its answer kept even if every
		// caller has left: their retry is what will read it.
		resp, err := m.lease(ctx, context.WithoutCancel(ctx), req)
		return leaseAnswer{fingerprint: req.Fingerprint, resp: resp, err: err}, err == nil
	})
	switch {
	case err != nil:
		return nil, rpc.Errorf(rpc.CodeUnavailable, "lease: %v", err)
	case a.fingerprint != req.Fingerprint:
		// The key's run is another body's (kept, or still running when
		// this call came and joined it): refused whatever that run's
		// answer, its error included, which says nothing of this call.
		return nil, requestReused("lease")
	case a.err != nil:
		return nil, a.err
	case replayed:
		m.metrics.leaseReplays.Inc()
		return &rpcpb.LeaseResponse{Leases: a.resp.Leases, Replayed: true}, nil
	}
	return a.resp, nil
}

// validateLease checks what the gate should already have checked (its
// bounds, pkg/api's): a manager trusts nothing on the wire.
func validateLease(req *rpcpb.LeaseRequest) error {
	switch {
	case req.Tenant == "":
		return rpc.Errorf(rpc.CodeInvalid, "lease: tenant is required")
	case len(req.Worker) > api.MaxTypeLen:
		return rpc.Errorf(rpc.CodeInvalid, "lease: worker: longer than %d bytes", api.MaxTypeLen)
	case req.MaxJobs < 0 || req.MaxJobs > ledger.MaxLease:
		return rpc.Errorf(rpc.CodeInvalid, "lease: max_jobs %d: want 1 to %d (0: 1)", req.MaxJobs, ledger.MaxLease)
	case len(req.Types) > ledger.MaxLeaseTypes:
		return rpc.Errorf(rpc.CodeInvalid, "lease: types: at most %d", ledger.MaxLeaseTypes)
	case req.WaitNanos < 0 || leaseWait(req) > maxLeaseWait:
		return rpc.Errorf(rpc.CodeInvalid, "lease: wait_nanos %d: want 0 to %d (%s)", req.WaitNanos, int64(maxLeaseWait), maxLeaseWait)
	case len(req.Request) > keys.MaxLen || len(req.Fingerprint) > keys.MaxLen:
		// The leader keeps both with the answer (leaseReplays).
		return rpc.Errorf(rpc.CodeInvalid, "lease: request (an idempotency key) or fingerprint: longer than %d bytes", keys.MaxLen)
	}
	for i, t := range req.Types {
		if !api.ValidName(t, api.MaxTypeLen) || slices.Contains(req.Types[:i], t) {
			return rpc.Errorf(rpc.CodeInvalid, "lease: types: %q is not a job type, or repeated", t)
		}
	}
	return nil
}

// leaseReplayKey is the key of tenant's lease asked with request in the
// leader's memory of answers: the memory is this term's (readyTerm), and
// ends at a Restore (an operator's snapshot restore, in the same term),
// whose ledger need not hold the leases it remembers: a worker given one
// would run a job the ledger holds queued for another.
func (m *Manager) leaseReplayKey(tenant, request string) string {
	return strconv.FormatUint(m.readyTerm.Load(), 10) + "\x00" + strconv.FormatUint(m.restores.Load(), 10) + "\x00" + tenant + "\x00" + request
}

// lease leases jobs for req, waiting up to its wait for one while ctx lasts;
// each Lease command is applied under applyCtx.
func (m *Manager) lease(ctx, applyCtx context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	holder := cmp.Or(req.Worker, "worker")
	deadline := time.Now().Add(leaseWait(req))
	for {
		queued := m.fsm.Stats().Queued
		// The Lease stamps a time at least this one (ledger time never runs
		// back at one manager): it looks at every lease expired by then.
		looked := m.expiryNow().UnixNano()
		res, err := m.leaseJobs(applyCtx, req, holder)
		if err != nil {
			return nil, err
		}
		if res.Replayed || len(res.Jobs) > 0 || !time.Now().Before(deadline) {
			out := m.leases(res.Jobs)
			if res.Replayed {
				// An earlier attempt of this request leased these (through
				// another leader, whose answer was lost).
				m.metrics.leaseReplays.Inc()
				out.Replayed = true
			}
			return out, nil
		}
		if !m.awaitQueued(ctx, queued, looked, deadline) {
			if ctx.Err() != nil {
				// The caller has left: an empty answer must not be kept.
				return nil, rpc.Errorf(rpc.CodeUnavailable, "lease: the request ended while waiting: %v", ctx.Err())
			}
			return m.leases(nil), nil
		}
	}
}

// onChange receives the ledger's changes (from Apply: it must not block):
// leases waiting for a job, and the memory of lease answers at a Restore.
func (m *Manager) onChange(c ledger.Change) {
	if c.Kind == ledger.ChangeRestored {
		m.restores.Add(1)
	}
	if c.Kind == ledger.ChangeCommitted || c.Kind == ledger.ChangeRestored {
		m.jobsQueued.fire()
	}
}

// awaitQueued waits until more jobs are queued than before (woken by the
// commit that queued one, not by polling), or jobs are queued and
// leaseWaitRetry has passed, or a lease has expired after looked, the time
// of the last Lease (its job can be reclaimed); false when the deadline
// passes, ctx ends, this node stops leading or its long polls end
// (EndLongPolls).
//
// A lease expired at or before looked was seen by that Lease and is not
// this waiter's (another tenant's, or a type it does not want): it stays
// RUNNING until the ExpireLeases sweep, and waking for it at once would
// propose an empty Lease, a Raft entry, again and again until the sweep
// (as after a change of leader, when the leases that expired during the
// election wait for the new leader's first sweep). The wait looks again
// after the sweep's interval instead.
func (m *Manager) awaitQueued(ctx context.Context, before int, looked int64, deadline time.Time) bool {
	retry := time.Now().Add(leaseWaitRetry)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		wake := m.jobsQueued.wait() // before reading: a commit after the read wakes it
		now := time.Now()
		if !now.Before(deadline) || m.polls.Err() != nil || m.CheckLeader() != nil {
			return false
		}
		q := m.fsm.Stats().Queued
		if q > before || (q > 0 && !now.Before(retry)) {
			return true
		}
		next := deadline
		if q > 0 && retry.Before(next) {
			next = retry
		}
		if at, ok := m.fsm.NextLeaseExpiry(); ok {
			// In ledger time, which may run ahead of or behind this clock.
			in := time.Duration(at - m.expiryNow().UnixNano())
			if in <= 0 && at > looked {
				return true
			}
			if in <= 0 {
				in = leaseCheckInterval
			}
			if now.Add(in).Before(next) {
				next = now.Add(in)
			}
		}
		timer.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			return false
		case <-m.polls.Done():
			return false
		case <-wake:
		case <-timer.C:
		}
	}
}

// leases renders leased jobs as the API shows them.
func (m *Manager) leases(jobs []ledger.Job) *rpcpb.LeaseResponse {
	out := &rpcpb.LeaseResponse{Leases: make([]*rpcpb.Lease, 0, len(jobs))}
	for _, j := range jobs {
		l := &rpcpb.Lease{Job: m.pbJobRead(j)}
		if j.Life != nil {
			l.LeaseId, l.Attempt = j.Life.LeaseID, int64(j.Life.Attempts)
			l.ExpiresAt = api.FormatTime(time.Unix(0, j.Life.LeaseExpiresAt))
		}
		out.Leases = append(out.Leases, l)
	}
	return out
}

// Heartbeat implements rpc.Workers.
func (m *Manager) Heartbeat(ctx context.Context, req *rpcpb.HeartbeatRequest) (*rpcpb.HeartbeatResponse, error) {
	j, err := m.HeartbeatJob(ctx, req.Tenant, req.JobId, req.LeaseId, leaseFor(req))
	if err != nil {
		return nil, err
	}
	return &rpcpb.HeartbeatResponse{LeaseId: req.LeaseId, ExpiresAt: api.FormatTime(time.Unix(0, j.Life.LeaseExpiresAt))}, nil
}

// Complete implements rpc.Workers.
func (m *Manager) Complete(ctx context.Context, req *rpcpb.CompleteRequest) (*rpcpb.Job, error) {
	return m.jobAnswer(m.CompleteJob(ctx, req.Tenant, req.JobId, req.LeaseId, req.Result))
}

// Fail implements rpc.Workers.
func (m *Manager) Fail(ctx context.Context, req *rpcpb.FailRequest) (*rpcpb.Job, error) {
	return m.jobAnswer(m.FailJob(ctx, req.Tenant, req.JobId, req.LeaseId, req.Error, req.Retry))
}

// jobAnswer is a worker call's answer: the job it ended, or its error.
func (m *Manager) jobAnswer(j ledger.Job, err error) (*rpcpb.Job, error) {
	if err != nil {
		return nil, err
	}
	return m.pbJobRead(j), nil
}

// pbJobRead is a job as reads and worker calls show it: the admission
// answer's members (pbJob); for a job in the worker lifecycle, its
// state, attempts, result and error; and for a job whose submission named
// more than one datacenter, the set it named (namedDatacenters).
func (m *Manager) pbJobRead(j ledger.Job) *rpcpb.Job {
	out := m.pbJob(j)
	if j.Life != nil {
		out.State, out.Attempts, out.Error = j.Life.State.String(), int64(j.Life.Attempts), j.Life.Error
		if j.Life.State == ledger.JobSucceeded {
			out.Result = j.Life.Result
			if len(out.Result) == 0 {
				out.Result = []byte("null")
			}
		}
	}
	out.NamedDatacenters = namedDatacenters(j.Datacenters)
	return out
}

// namedDatacenters is a read's named_datacenters member: nil for a job of
// one datacenter (whose answer stays the bytes it always was), else the set
// the submission named, sorted, each name once. The ledger stores the set
// the gate resolved (sorted, each name once), and then this is that slice
// itself, shared read-only like the job's payload; anything else is copied.
func namedDatacenters(dcs []string) []string {
	if len(dcs) < 2 {
		return nil
	}
	if strictlySorted(dcs) {
		return dcs
	}
	out := slices.Compact(slices.Sorted(slices.Values(dcs)))
	if len(out) < 2 {
		return nil
	}
	return out
}

// strictlySorted reports whether names are in increasing order, each once.
func strictlySorted(names []string) bool {
	for i := 1; i < len(names); i++ {
		if names[i] <= names[i-1] {
			return false
		}
	}
	return true
}
