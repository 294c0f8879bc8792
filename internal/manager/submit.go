package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/tracing"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

// Submit runs a submission at the leader (rpc.Service).
//
// The answer is sent only after the outcome is applied from a committed Raft
// entry: one Admit reserves the key and records its outcome together, so the
// ledger never holds the key undecided. A failure in the middle (leadership
// lost, a timeout) answers Unavailable; the gate retries the same key, and
// the retry finds the outcome if the Admit committed, or admits the key
// afresh, with the same job ID, if it did not.
func (m *Manager) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	start := time.Now()
	ctx, span := tracing.Span(tracing.Extract(ctx, req.TraceParent), "manager.submit")
	defer span.End()
	resp, err := m.submit(ctx, req)
	if err == nil {
		m.confirmCarrier(ctx, req, resp)
		omitPayload(req, resp)
	}
	m.metrics.observeSubmit(resp, err, time.Since(start))
	if span.IsRecording() { // tracing off: no attributes built
		span.SetAttributes(attribute.String("once.tenant", req.Tenant), attribute.String("once.idempotency_key", req.Key),
			attribute.String("once.datacenter", m.cfg.Datacenter))
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case resp != nil:
			span.SetAttributes(attribute.String("once.outcome", resp.Outcome))
		}
	}
	return resp, err
}

func (m *Manager) submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	if err := m.CheckLeader(); err != nil {
		return nil, err
	}
	k, err := validateSubmit(req)
	if err != nil {
		return nil, err
	}
	jobID, err := submissionJobID(req)
	if err != nil {
		return nil, err
	}
	if req.Home != "" {
		if len(req.Job.Datacenters) != 1 || req.Job.Datacenters[0] != req.Home {
			return nil, rpc.Errorf(rpc.CodeInvalid, "a job with home %s must name it alone, not %v", req.Home, req.Job.Datacenters)
		}
		if req.Home != m.cfg.Datacenter {
			return m.claim(ctx, req, k, jobID)
		}
	}
	if len(req.Job.Datacenters) > 0 && !slices.Contains(req.Job.Datacenters, m.cfg.Datacenter) {
		return nil, rpc.Errorf(rpc.CodeInvalid, "the job targets %v, not this manager's datacenter %s", req.Job.Datacenters, m.cfg.Datacenter)
	}
	deadline := time.Now().Add(submitWait(req))
	ttl := resultTTL(req)

	// A key whose entry expires or is released while we look is admitted
	// again (at most a few times: an entry lives at least its TTL of a second
	// or more).
	for attempt := 0; attempt < 4; attempt++ {
		// Fast path: a live entry answers without a Raft round (a committed or
		// rejected entry is a durable fact).
		looked := m.fsm.Applies()
		if e, ok := m.liveEntry(req.Tenant, req.Key); ok {
			if !sameRequest(e, req) {
				return m.entryResponse(e, rpc.OutcomeKeyReused, true), nil
			}
			if e.State == ledger.StateClaimed {
				if resp, err := m.overClaim(ctx, req, e); resp != nil || err != nil {
					return resp, err
				}
				continue // released: admit it as this datacenter's job
			}
			return m.entryResponse(e, "", true), nil
		}

		if f := m.deps.Knobs.AfterLook; f != nil {
			f(ctx, req.Tenant, req.Key)
		}

		// Coalesce concurrent first submissions of one key (a storm through
		// several gates): one proposes the Admit, the others wait for it (at
		// most their WaitMillis: in_progress after that) and then find the
		// entry on the fast path. One admission in the log.
		owner, ended, err := m.proposeOrWait(ctx, req.Tenant, req.Key, deadline)
		if ended {
			continue
		}
		if !owner {
			return inProgress(err)
		}
		// Another submission's Admit of the key may have applied and ended
		// between the look above and this proposal: look again, so that a
		// key is admitted by one proposal however the submissions interleave
		// (TestAnAdmitThatEndsBetweenLookAndProposalIsNotProposedTwice).
		// Only if the state changed since: the look is a point read of the
		// store, most of which miss, and most submissions have nothing
		// applied in between. (A claim is left to the path above, which the
		// look already took.)
		if m.fsm.Applies() != looked {
			if e, ok := m.liveEntry(req.Tenant, req.Key); ok && e.State != ledger.StateClaimed {
				m.endProposal(req.Tenant, req.Key)
				continue
			}
		}
		if f := m.deps.Knobs.BeforeAdmit; f != nil {
			f(ctx, req.Tenant, req.Key)
		}

		resp, ok := m.carriedOwed(req, jobID)
		if !ok {
			resp, ok = m.retainedJob(req, k, jobID)
		}
		if ok {
			m.endProposal(req.Tenant, req.Key)
			return resp, nil
		}
		if err := m.admitToOutbox(req, k); err != nil {
			m.endProposal(req.Tenant, req.Key)
			return nil, err
		}
		now := m.ledgerNow()
		reserve := ledger.Reserve{
			Tenant:      req.Tenant,
			Key:         req.Key,
			Fingerprint: req.Fingerprint,
			JobID:       jobID,
			Now:         now.UnixNano(),
			MaxEntries:  uint64(m.cfg.LedgerMaxEntries),
			Request:     ledger.Request{Type: req.Job.Type, Payload: req.Job.Payload, Datacenters: req.Job.Datacenters},
			Structured:  k.Structured,
			ClientID:    k.ClientID,
			Sequence:    k.Sequence,
			Nonce:       k.Nonce,

			MaxWatermarks:       uint64(m.cfg.WatermarkMaxClients),
			MaxTenantWatermarks: uint64(m.cfg.WatermarkMaxClientsPerTenant),
			MaxBytes:            uint64(m.cfg.LedgerMaxBytes),
			MaxTenantBytes:      uint64(m.cfg.LedgerTenantMaxBytes),
			ResultTTL:           ttl,
		}
		// One round (ledger.Admit): the reservation and its outcome in one
		// entry; no entry is left PENDING.
		entry := ledger.Entry{Tenant: req.Tenant, Key: req.Key, JobID: jobID, ResultTTL: ttl, Request: reserve.Request}
		cmd := ledger.Admit{Reserve: reserve, Outcome: m.outcomeCommand(entry, m.expiryBasis(req), now)}
		res, err := m.tracedApply(ctx, "raft.apply.admit", m.admits, cmd)
		m.endProposal(req.Tenant, req.Key)
		if err != nil {
			return nil, err
		}
		switch res.Outcome {
		case ledger.OutcomeCommitted, ledger.OutcomeRejected:
			return m.entryResponse(res.Entry, "", false), nil
		case ledger.OutcomeExists:
			if res.Entry.State == ledger.StateClaimed {
				continue // a claim landed first: the fast path judges it
			}
			return m.entryResponse(res.Entry, "", true), nil
		case ledger.OutcomeKeyReused:
			if sameRequest(res.Entry, req) { // recorded in its other form
				return m.entryResponse(res.Entry, "", true), nil
			}
			return m.entryResponse(res.Entry, rpc.OutcomeKeyReused, true), nil
		case ledger.OutcomeKeyExpired:
			return &rpcpb.SubmitResponse{Outcome: rpc.OutcomeKeyExpired}, nil
		default:
			return nil, m.refusal("reserve", req.Tenant, res)
		}
	}
	return nil, rpc.Errorf(rpc.CodeUnavailable, "the key's entry kept expiring while waiting; retry")
}

// sameRequest reports whether the key's entry e was recorded for req: with
// its fingerprint, or, on an entry of this datacenter's own job (never a
// claim), with its alternate one. In a federation an omitted datacenters
// list and the list naming its home alone are one request in two forms
// (docs/multidc.md, "An omitted list in a federation"), each with its own
// fingerprint; the gate sends the other form's as AltFingerprint.
func sameRequest(e ledger.Entry, req *rpcpb.SubmitRequest) bool {
	return e.Fingerprint == req.Fingerprint ||
		req.AltFingerprint != "" && e.Fingerprint == req.AltFingerprint && e.State != ledger.StateClaimed
}

// liveEntry is the key's entry while it has not expired by ledger time.
func (m *Manager) liveEntry(tenant, key string) (ledger.Entry, bool) {
	e, ok := m.fsm.Entry(tenant, key)
	if !ok || e.ExpiresAt <= m.expiryNow().UnixNano() {
		return ledger.Entry{}, false
	}
	return e, true
}

// refusal is the error of an Admit or Claim that recorded nothing: the
// ledger is full, or the outcome is not one the caller expects.
func (m *Manager) refusal(what, tenant string, res ledger.Result) error {
	switch res.Outcome {
	case ledger.OutcomeFull:
		return rpc.Errorf(rpc.CodeLedgerFull, "the idempotency ledger holds its maximum of %d live entries", m.cfg.LedgerMaxEntries)
	case ledger.OutcomeWatermarksFull:
		return rpc.Errorf(rpc.CodeWatermarksFull, "the ledger holds its maximum of %d client watermarks", m.cfg.WatermarkMaxClients)
	case ledger.OutcomeBytesFull:
		return rpc.Errorf(rpc.CodeLedgerFull, "the idempotency ledger holds its maximum of %d bytes of entries and jobs", m.cfg.LedgerMaxBytes)
	case ledger.OutcomeTenantBytesFull:
		return rpc.Errorf(rpc.CodeTenantQuota, "tenant %s holds its maximum of %d bytes of the ledger", tenant, m.cfg.LedgerTenantMaxBytes)
	case ledger.OutcomeTenantWatermarksFull:
		return rpc.Errorf(rpc.CodeTenantQuota, "tenant %s holds its maximum of %d client watermarks", tenant, m.cfg.WatermarkMaxClientsPerTenant)
	default:
		return rpc.Errorf(rpc.CodeInternal, "%s: unexpected outcome %s: %v", what, res.Outcome, res.Err)
	}
}

// proposeOrWait registers an Admit (or a Claim) about to be proposed for
// (tenant, key). The first caller owns it (owner): it calls endProposal when
// it is done. Any other caller waits for the owner's proposal to end, until
// deadline: ended when the proposal ended (look at the key again), neither
// when the deadline passed first (the key is in progress), or an error when
// its request or the manager ends first.
func (m *Manager) proposeOrWait(ctx context.Context, tenant, key string, deadline time.Time) (owner, ended bool, err error) {
	k := slot{tenant, key}
	m.proposingMu.Lock()
	proposal, busy := m.proposing[k]
	switch {
	case !busy:
		// Nobody waits yet: the first waiter makes the channel, so a
		// proposal nobody waits on (nearly all) makes none.
		m.proposing[k] = nil
	case proposal == nil:
		proposal = make(chan struct{})
		m.proposing[k] = proposal
	}
	m.proposingMu.Unlock()
	if !busy {
		return true, false, nil
	}
	if f := m.deps.Knobs.WaitsOnAdmit; f != nil {
		f(tenant, key)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-proposal:
		return false, true, nil
	case <-timer.C:
		return false, false, nil
	case <-ctx.Done():
		return false, false, rpc.Errorf(rpc.CodeUnavailable, "request ended while waiting: %v", ctx.Err())
	case <-m.shutdown:
		return false, false, errShuttingDown
	}
}

// inProgress is the answer to a submission whose key another submission is
// still admitting when its wait ends (err nil), or err.
func inProgress(err error) (*rpcpb.SubmitResponse, error) {
	if err != nil {
		return nil, err
	}
	return &rpcpb.SubmitResponse{Outcome: rpc.OutcomeInProgress}, nil
}

// endProposal ends the proposal its owner registered (proposeOrWait): it
// wakes the submissions waiting for it.
func (m *Manager) endProposal(tenant, key string) {
	k := slot{tenant, key}
	m.proposingMu.Lock()
	ch := m.proposing[k]
	delete(m.proposing, k)
	m.proposingMu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// validateSubmit checks what the gate should already have checked: a manager
// trusts nothing on the wire.
func validateSubmit(req *rpcpb.SubmitRequest) (keys.Key, error) {
	if req.Tenant == "" || req.Fingerprint == "" {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "tenant and fingerprint are required")
	}
	k, err := parseKey(req.Key)
	if err != nil {
		return keys.Key{}, err
	}
	if t := req.GetJob().GetType(); !api.ValidName(t, api.MaxTypeLen) {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "job type %q: want 1 to %d characters of A-Z a-z 0-9 . _ -", t, api.MaxTypeLen)
	}
	if ttl := req.ResultTtlNanos; ttl < 0 || time.Duration(ttl) > maxResultTTL {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "result_ttl_nanos %d: want 0 to %d (%s)", ttl, int64(maxResultTTL), maxResultTTL)
	}
	if req.WaitMillis < 0 {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "wait_millis %d: must not be negative", req.WaitMillis)
	}
	// The ledger keeps the list as a set (the outbox counts what it owes
	// each datacenter by it): sorted, each name once, as the gate sends it.
	dcs := req.Job.Datacenters
	if len(dcs) > api.MaxDatacenters || !strictlySorted(dcs) {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "datacenters %v: want at most %d names, each once, sorted", dcs, api.MaxDatacenters)
	}
	for _, dc := range dcs {
		if err := checkDatacenter("datacenters", dc); err != nil {
			return keys.Key{}, err
		}
	}
	// An empty home or carrier is no field to check (and checking it would
	// build an error to drop on every submission).
	if req.Home != "" {
		if err := checkDatacenter("home", req.Home); err != nil {
			return keys.Key{}, err
		}
	}
	if req.Carrier != "" {
		if err := checkDatacenter("carrier", req.Carrier); err != nil {
			return keys.Key{}, err
		}
	}
	if len(req.Job.Payload) == 0 {
		req.Job.Payload = []byte("null")
	} else if !json.Valid(req.Job.Payload) {
		// Stored as it came and served to every read as JSON.
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "job payload is not JSON")
	}
	return k, nil
}

// parseKey parses an idempotency key as the wire carries it: the gate
// sends it parsed, unquoted.
func parseKey(key string) (keys.Key, error) {
	k, err := keys.Parse(key)
	if err != nil {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "%v", err)
	}
	if k.Raw != key {
		return keys.Key{}, rpc.Errorf(rpc.CodeInvalid, "key must be sent unquoted")
	}
	return k, nil
}

// checkDatacenter refuses a datacenter name (of the request's member
// field) that no datacenter can have.
func checkDatacenter(field, dc string) error {
	if !api.ValidName(dc, api.MaxDatacenterLen) {
		return rpc.Errorf(rpc.CodeInvalid, "%s: datacenter %q: want 1 to %d characters of A-Z a-z 0-9 . _ -", field, dc, api.MaxDatacenterLen)
	}
	return nil
}

// outcomeCommand runs admission on e (an entry reserved, or about to be in
// the same Admit) against this datacenter's rules, and returns the Commit or
// Reject that records it, stamped with now; the key's TTL counts from basis
// (zero: now, see expiryBasis). Admission reads only leader-local state, so
// the leader decides it and the Admit carries the outcome.
func (m *Manager) outcomeCommand(e ledger.Entry, basis, now time.Time) ledger.Verdict {
	if basis.IsZero() {
		basis = now
	}
	// The lifetimes: the entry's own ResultTTL, else the defaults. A
	// job is retained at least as long as its key answers.
	committedTTL, rejectedTTL, retention := m.cfg.Idempotency.CommittedTTL, m.cfg.Idempotency.RejectedTTL, m.cfg.JobRetention
	if e.ResultTTL > 0 {
		committedTTL, rejectedTTL, retention = e.ResultTTL, e.ResultTTL, max(retention, e.ResultTTL)
	}
	if len(m.cfg.AllowedJobTypes) > 0 && !slices.Contains(m.cfg.AllowedJobTypes, e.Request.Type) {
		return ledger.Reject{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID, Now: now.UnixNano(),
			ExpiresAt: basisExpiry(basis, now, rejectedTTL), Status: 422, Reason: "unknown_job_type",
			Detail: fmt.Sprintf("job type %q is not accepted in datacenter %s", e.Request.Type, m.cfg.Datacenter)}
	}
	// Capacity (MANAGER_MAX_QUEUED_JOBS) is not decided here: the Commit carries
	// the bound and the ledger turns a Commit over it into a 429 rejection, so
	// concurrent admissions can never overshoot it.
	c := ledger.Commit{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID, Now: now.UnixNano(),
		ExpiresAt:         basisExpiry(basis, now, committedTTL),
		JobExpiresAt:      now.Add(retention).UnixNano(),
		MaxJobs:           uint64(m.cfg.MaxQueuedJobs),
		RejectedExpiresAt: basisExpiry(basis, now, rejectedTTL),
		CapacityDetail:    m.capacityDetail}
	if m.queueJobs.Load() { // the worker lifecycle (jobs.go)
		return ledger.QueueCommit(c)
	}
	return c
}

// apply proposes a command alone and waits until it is committed and applied
// (Expire; the submissions' commands go through the batchers, batch.go).
func (m *Manager) apply(ctx context.Context, cmd ledger.Command) (ledger.Result, error) {
	return m.applyThen(ctx, cmd, nil)
}

// applyThen is apply, and then, when not nil, is given cmd's result once it
// is applied, even after ctx has ended (batcher.applyThen).
func (m *Manager) applyThen(ctx context.Context, cmd ledger.Command, then func(ledger.Result)) (ledger.Result, error) {
	release, err := m.holdRaft() // Close waits for the answer before Raft stops
	if err != nil {
		return ledger.Result{}, err
	}
	done := make(chan batchDone, 1)
	go func() {
		defer release()
		res, err := m.applyEntry(ledger.Encode(cmd))
		if err != nil {
			done <- batchDone{err: err}
			return
		}
		d := commandResult(res)
		if then != nil && d.err == nil {
			then(d.res)
		}
		done <- d
	}()
	select {
	case d := <-done:
		return d.res, d.err
	case <-ctx.Done():
		return ledger.Result{}, endedBeforeApplied(ctx)
	}
}

// applyEntry proposes data as one log entry and waits until it is committed
// and applied: its command's result (a batch's, for a batch entry), or the
// error its proposers get.
func (m *Manager) applyEntry(data []byte) (ledger.Result, error) {
	start := time.Now()
	f := m.raft.Apply(data, m.cfg.ApplyTimeout)
	err := f.Error()
	m.metrics.applyLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return ledger.Result{}, m.ApplyError(err)
	}
	res, ok := f.Response().(ledger.Result)
	if !ok {
		return ledger.Result{}, rpc.Errorf(rpc.CodeInternal, "raft apply returned %T", f.Response())
	}
	return res, nil
}

// commandResult is one command's result as its proposer gets it: with an
// error when the ledger refused the command.
func commandResult(res ledger.Result) batchDone {
	if res.Outcome == ledger.OutcomeInvalid {
		return batchDone{res: res, err: rpc.Errorf(rpc.CodeInternal, "ledger refused the command: %v", res.Err)}
	}
	return batchDone{res: res}
}

// CheckLeader is nil when this manager is the serving leader (it leads and
// has applied every entry of earlier terms); else the error a caller gets:
// not_leader, naming the leader's RPC address when known, or unavailable
// while a new leader catches up.
func (m *Manager) CheckLeader() error {
	if m.raft.State() != raft.Leader {
		return m.notLeader()
	}
	if m.readyTerm.Load() != m.raft.CurrentTerm() {
		return rpc.Errorf(rpc.CodeUnavailable, "new leader is catching up")
	}
	return nil
}

func (m *Manager) notLeader() error {
	_, id := m.raft.LeaderWithID()
	e := &rpc.Error{Code: rpc.CodeNotLeader, Message: "not the leader"}
	if id != "" && string(id) != m.cfg.NodeID {
		e.Leader = m.peerRPC(string(id))
	}
	return e
}

// entryResponse turns an entry into the answer a gate renders. The job body is
// built from the entry alone, so every answer for the key — first or replay,
// through any gate — is the same bytes.
func (m *Manager) entryResponse(e ledger.Entry, outcome string, replayed bool) *rpcpb.SubmitResponse {
	r := &rpcpb.SubmitResponse{Replayed: replayed, JobId: e.JobID, ExpiresAtUnixNano: e.ExpiresAt}
	// The lifetime left by ledger time, which the gate counts on its own
	// monotonic clock (at least 1ns: 0 means "not sent").
	r.RemainingNanos = max(e.ExpiresAt-m.expiryNow().UnixNano(), 1)
	switch e.State {
	case ledger.StateCommitted:
		r.Outcome = rpc.OutcomeCommitted
		r.Job = m.pbJob(ledger.Job{ID: e.JobID, Tenant: e.Tenant, Key: e.Key, Type: e.Request.Type,
			Payload: e.Request.Payload, Datacenters: e.Request.Datacenters, CreatedAt: e.ResolvedAt})
	case ledger.StateRejected:
		r.Outcome = rpc.OutcomeRejected
		r.Rejection = &rpcpb.Rejection{Status: int32(e.Status), Reason: e.Reason, Detail: e.Detail}
	case ledger.StateClaimed:
		r.Outcome, r.Home = rpc.OutcomeClaimed, e.Home()
	default:
		r.Outcome = rpc.OutcomeInProgress
	}
	if outcome != "" {
		r.Outcome = outcome
		if outcome == rpc.OutcomeKeyReused || outcome == rpc.OutcomeInProgress {
			r.Job, r.Rejection = nil, nil
		}
	}
	return r
}

// omitPayload leaves the payload out of resp's job when req asks so
// (omit_payload): a gate fanning a job out to several datacenters renders
// its answer from one datacenter's job, and the others' payloads would cross
// the WAN back for nothing. Every answer builds its own job (entryResponse,
// keptJob), so no other answer loses it.
func omitPayload(req *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse) {
	if req.GetOmitPayload() && resp.GetJob() != nil {
		resp.Job.Payload = nil
	}
}

// pbJob renders a job as the gates show it (api.Job's members). The
// datacenters map holds this datacenter's outcome; a gate combining several
// datacenters merges the maps.
func (m *Manager) pbJob(j ledger.Job) *rpcpb.Job {
	payload := j.Payload
	if len(payload) == 0 {
		payload = []byte("null")
	}
	// The API's status is the admission outcome, committed for every job;
	// a job in the lifecycle shows its state in a member of its own
	// (pbJobRead).
	status := api.JobStatusCommitted
	return &rpcpb.Job{
		JobId:          j.ID,
		Type:           j.Type,
		Status:         status,
		IdempotencyKey: j.Key,
		CreatedAt:      api.FormatTime(time.Unix(0, j.CreatedAt)),
		Datacenters:    map[string]*rpcpb.DatacenterStatus{m.cfg.Datacenter: {Status: status}},
		DatacentersSet: true,
		Payload:        payload,
	}
}
