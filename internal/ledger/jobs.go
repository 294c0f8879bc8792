package ledger

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/once-dev/once/pkg/api"
)

// The job lifecycle (docs/ledger.md, "Job lifecycle"): a job committed by a
// Commit with Queue is QUEUED; Lease hands it to a worker (RUNNING, under a
// lease the leader stamped); Heartbeat extends the lease; Complete ends it
// SUCCEEDED, Fail QUEUED again (a retry), FAILED or DEAD; a lease that
// expires puts the job back to QUEUED (ExpireLeases, or Lease's reclaim) or
// DEAD once it used its attempts. A finished job (SUCCEEDED, FAILED, DEAD)
// stays readable for its retention and then goes as every job does (Expire);
// an unfinished one never expires.
//
// Every time, lease ID and retry time is stamped in the command by the
// leader: apply reads no clock and draws no jitter.

// JobState is the state of a job in the worker lifecycle. The numeric values
// are part of the snapshot format.
type JobState uint8

// Job states.
const (
	// JobLegacy: a job committed by a Commit without Queue, outside the
	// lifecycle (status "committed"), kept until its retention.
	JobLegacy JobState = 0
	// JobQueued: waiting for a worker, leasable from its RunAt.
	JobQueued JobState = 1
	// JobRunning: leased to a worker until LeaseExpiresAt.
	JobRunning JobState = 2
	// JobSucceeded: completed with a result. Finished.
	JobSucceeded JobState = 3
	// JobFailed: failed without retry. Finished.
	JobFailed JobState = 4
	// JobDead: failed (or lost its lease) with every attempt used. Finished.
	JobDead JobState = 5
	// JobCancelled: cancelled by its tenant while QUEUED (Cancel); never
	// leased again. Finished.
	JobCancelled JobState = 6
)

var jobStateNames = [...]string{
	JobLegacy:    api.JobStatusCommitted,
	JobQueued:    api.JobStatusQueued,
	JobRunning:   api.JobStatusRunning,
	JobSucceeded: api.JobStatusSucceeded,
	JobFailed:    api.JobStatusFailed,
	JobDead:      api.JobStatusDead,
	JobCancelled: api.JobStatusCancelled,
}

// String returns the API name of the state (api.JobStatusQueued, ...;
// api.JobStatusCommitted for JobLegacy).
func (s JobState) String() string { return nameOf(jobStateNames[:], int(s), "job_state") }

// Finished reports whether the job is done (SUCCEEDED, FAILED, DEAD or
// CANCELLED): it no longer counts against the capacity and expires by its
// retention.
func (s JobState) Finished() bool { return s >= JobSucceeded && s <= JobCancelled }

// ParseJobState returns the state an API status name names.
func ParseJobState(status string) (JobState, bool) {
	if i := slices.Index(jobStateNames[:], status); i >= 0 {
		return JobState(i), true
	}
	return 0, false
}

// Bounds of the lifecycle commands.
const (
	// MaxLease bounds Lease.Max: jobs handed out by one Lease.
	MaxLease = 100
	// MaxLeaseTypes bounds Lease.Types: api.MaxLeaseTypes, what the gate
	// admits.
	MaxLeaseTypes = api.MaxLeaseTypes
	// MaxReclaim bounds the expired leases of its tenant one Lease looks at
	// before the queue (reclaiming them, or making them DEAD), so a Lease
	// stays O(log n + jobs handed out).
	MaxReclaim = 64
)

// ErrorLeaseExpired is the Error a job gets when its lease expired.
const ErrorLeaseExpired = "lease expired"

// Lease hands out up to Max QUEUED jobs of Tenant whose RunAt <= Now, oldest
// first by (RunAt, Seq), of one of Types (empty: any type). Before the queue
// it looks at up to MaxReclaim of the tenant's RUNNING jobs whose lease has
// expired (LeaseExpiresAt <= Now), earliest first: one that used MaxAttempts
// (when not 0) becomes DEAD; the others of a matching type are handed out
// first, as if queued. A job handed out becomes RUNNING with Attempts + 1, the
// lease LeaseIDs[i] (i-th job handed out), Holder and LeaseExpiresAt =
// Expiry. OutcomeLeased, with Result.Lease.Jobs (possibly empty).
//
// With MaxBytes, the jobs handed out are bounded by their size in the answer
// (ListJobBytes): in that order, the job that would bring the sum over
// MaxBytes, and every one after it, stays where it is (QUEUED, or RUNNING
// under its expired lease, for the next Lease), but the first job is always
// handed out, however large. So the leader's answer fits the RPC limit, and no
// job is leased (its attempt counted) that the answer could not carry.
//
// With Replay, the lease IDs are derived from the worker's request (its
// idempotency key), so its retry carries the same ones, through any leader:
// when a RUNNING job of Tenant holds one of them under a lease not expired at
// Now, the command leases nothing and answers the jobs that hold them, in
// LeaseIDs' order (Result.Lease.Replayed). A job leased by the first attempt
// is then handed to its retry, not left to its lease's expiry.
//
// Invalid: empty Tenant or Holder; Max not in 1..MaxLease; len(LeaseIDs) !=
// Max or an empty or repeated ID; more than MaxLeaseTypes types, an empty or
// a repeated one; Expiry not after Now.
type Lease struct {
	Tenant string
	Holder string
	Types  []string
	Max    uint64
	// LeaseIDs are stamped by the leader, unique: one per job it may hand out.
	LeaseIDs []string
	Now      int64
	Expiry   int64
	// MaxAttempts (MANAGER_JOB_MAX_ATTEMPTS; 0: no bound) decides which
	// reclaimed jobs are DEAD.
	MaxAttempts uint64
	// Replay: LeaseIDs held already answer the command (above).
	Replay bool
	// MaxBytes (0: no bound) bounds the jobs handed out by ListJobBytes
	// (above).
	MaxBytes uint64
}

// Heartbeat extends the current lease of a RUNNING job to Expiry:
// OutcomeExtended. A lease that is not the job's current one (another ID,
// expired at Now, a job not RUNNING): OutcomeLeaseLost; no job (or one
// whose retention has ended, Job.Gone): OutcomeNotFound. Invalid: an empty
// field, Expiry not after Now.
type Heartbeat struct {
	Tenant  string
	JobID   string
	LeaseID string
	Now     int64
	Expiry  int64
}

// Complete ends the attempt of the job's current lease: RUNNING → SUCCEEDED
// with Result, FinishedAt = Now, ExpiresAt = Now + Retention:
// OutcomeCompleted. Applied once: a job already SUCCEEDED by the same lease
// answers OutcomeUnchanged with the job. A lease that is not current:
// OutcomeLeaseLost; no job (or one whose retention has ended, Job.Gone):
// OutcomeNotFound. Invalid: an empty field.
//
// With the byte budgets, a result that would bring the tenant's
// bytes over MaxTenantBytes (checked first) or the ledger's over MaxBytes
// (0: no bound) is refused: OutcomeTenantBytesFull or OutcomeBytesFull, with
// the job unchanged (still RUNNING under its lease).
type Complete struct {
	Tenant  string
	JobID   string
	LeaseID string
	// Result is opaque JSON bytes, stored as they are.
	Result json.RawMessage
	Now    int64
	// MaxBytes and MaxTenantBytes are the byte budgets
	// (IDEMPOTENCY_LEDGER_MAX_BYTES, IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES).
	MaxBytes       uint64
	MaxTenantBytes uint64
}

// Fail ends the attempt of the job's current lease with Error
// (OutcomeFailed): without Retry the job is FAILED; with Retry it is DEAD once
// Attempts >= MaxAttempts (when not 0), else QUEUED again with RunAt =
// RetryAt (the leader's backoff with jitter). A finished or queued job whose
// last attempt this same lease failed answers OutcomeUnchanged. A lease that
// is not current: OutcomeLeaseLost; no job (or one whose retention has
// ended, Job.Gone): OutcomeNotFound. Invalid: an
// empty tenant, job or lease ID; Retry with RetryAt before Now. With the
// byte budgets, an Error that would bring the bytes over one is
// refused as Complete's result is (the job unchanged).
type Fail struct {
	Tenant      string
	JobID       string
	LeaseID     string
	Error       string
	Retry       bool
	Now         int64
	RetryAt     int64
	MaxAttempts uint64
	// MaxBytes and MaxTenantBytes are the byte budgets, as Complete's.
	MaxBytes       uint64
	MaxTenantBytes uint64
}

// ExpireLeases ends the leases expired at Now (LeaseExpiresAt <= Now),
// earliest first, at most Max of them (0: no limit): each job is QUEUED again
// with RunAt = RetryAt, or DEAD once Attempts >= MaxAttempts (when not 0); its
// lease is cleared and its Error is ErrorLeaseExpired. OutcomeLeasesExpired,
// Result.Lease counts, Result.More when Max stopped it with more due. The
// leader proposes it when FSM.NextLeaseExpiry is due. Invalid: RetryAt
// before Now.
type ExpireLeases struct {
	Now         int64
	Max         uint64
	RetryAt     int64
	MaxAttempts uint64
}

func (Lease) CommandType() CommandType        { return TypeLease }
func (Heartbeat) CommandType() CommandType    { return TypeHeartbeat }
func (Complete) CommandType() CommandType     { return TypeComplete }
func (Fail) CommandType() CommandType         { return TypeFail }
func (ExpireLeases) CommandType() CommandType { return TypeExpireLeases }

func (c Lease) stamp() int64        { return c.Now }
func (c Heartbeat) stamp() int64    { return c.Now }
func (c Complete) stamp() int64     { return c.Now }
func (c Fail) stamp() int64         { return c.Now }
func (c ExpireLeases) stamp() int64 { return c.Now }

func (c Lease) sizeHint() int {
	return len(c.Tenant) + len(c.Holder) + sizeStrings(c.Types) + sizeStrings(c.LeaseIDs) + 5*varintSize + 17
}
func (c Heartbeat) sizeHint() int {
	return len(c.Tenant) + len(c.JobID) + len(c.LeaseID) + 3*varintSize + 16
}
func (c Complete) sizeHint() int {
	return len(c.Tenant) + len(c.JobID) + len(c.LeaseID) + len(c.Result) + 6*varintSize + 8
}
func (c Fail) sizeHint() int {
	return len(c.Tenant) + len(c.JobID) + len(c.LeaseID) + len(c.Error) + 7*varintSize + 17
}
func (ExpireLeases) sizeHint() int { return 2*varintSize + 16 }

// Lease body:
//
//	tenant string, holder string, types strings, max uvarint,
//	lease_ids strings, now int64, expiry int64, max_attempts uvarint,
//	replay bool, max_bytes uvarint
func (c Lease) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.Holder)
	b = appendStrings(b, c.Types)
	b = appendUvarint(b, c.Max)
	b = appendStrings(b, c.LeaseIDs)
	b = appendInt64(b, c.Now)
	b = appendInt64(b, c.Expiry)
	b = appendUvarint(b, c.MaxAttempts)
	b = appendBool(b, c.Replay)
	return appendUvarint(b, c.MaxBytes)
}

func decodeLease(d *decoder) Lease {
	return Lease{Tenant: d.string(), Holder: d.string(), Types: d.strings(), Max: d.uvarint(),
		LeaseIDs: d.strings(), Now: d.int64(), Expiry: d.int64(), MaxAttempts: d.uvarint(),
		Replay: d.bool(), MaxBytes: d.uvarint()}
}

// Heartbeat body:
//
//	tenant string, job_id string, lease_id string, now int64, expiry int64
func (c Heartbeat) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.JobID)
	b = appendString(b, c.LeaseID)
	b = appendInt64(b, c.Now)
	return appendInt64(b, c.Expiry)
}

func decodeHeartbeat(d *decoder) Heartbeat {
	return Heartbeat{Tenant: d.string(), JobID: d.string(), LeaseID: d.string(), Now: d.int64(), Expiry: d.int64()}
}

// Complete body:
//
//	tenant string, job_id string, lease_id string, result bytes, now int64,
//	max_bytes uvarint, max_tenant_bytes uvarint
func (c Complete) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.JobID)
	b = appendString(b, c.LeaseID)
	b = appendBytes(b, c.Result)
	b = appendInt64(b, c.Now)
	b = appendUvarint(b, c.MaxBytes)
	return appendUvarint(b, c.MaxTenantBytes)
}

func decodeComplete(d *decoder) Complete {
	return Complete{Tenant: d.string(), JobID: d.string(), LeaseID: d.string(), Result: d.bytes(), Now: d.int64(),
		MaxBytes: d.uvarint(), MaxTenantBytes: d.uvarint()}
}

// Fail body:
//
//	tenant string, job_id string, lease_id string, error string, retry bool,
//	now int64, retry_at int64, max_attempts uvarint,
//	max_bytes uvarint, max_tenant_bytes uvarint
func (c Fail) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.JobID)
	b = appendString(b, c.LeaseID)
	b = appendString(b, c.Error)
	b = appendBool(b, c.Retry)
	b = appendInt64(b, c.Now)
	b = appendInt64(b, c.RetryAt)
	b = appendUvarint(b, c.MaxAttempts)
	b = appendUvarint(b, c.MaxBytes)
	return appendUvarint(b, c.MaxTenantBytes)
}

func decodeFail(d *decoder) Fail {
	return Fail{Tenant: d.string(), JobID: d.string(), LeaseID: d.string(), Error: d.string(), Retry: d.bool(),
		Now: d.int64(), RetryAt: d.int64(), MaxAttempts: d.uvarint(), MaxBytes: d.uvarint(), MaxTenantBytes: d.uvarint()}
}

// ExpireLeases body:
//
//	now int64, max uvarint, retry_at int64, max_attempts uvarint
func (c ExpireLeases) appendBody(b []byte) []byte {
	b = appendInt64(b, c.Now)
	b = appendUvarint(b, c.Max)
	b = appendInt64(b, c.RetryAt)
	return appendUvarint(b, c.MaxAttempts)
}

func decodeExpireLeases(d *decoder) ExpireLeases {
	return ExpireLeases{Now: d.int64(), Max: d.uvarint(), RetryAt: d.int64(), MaxAttempts: d.uvarint()}
}

// The orders of the lifecycle are declared in orders.go. A job is in them by
// its state only (reindexJob); a JobLegacy job (Life nil) is in none.

// runKey is what the in-memory orders of the RUNNING jobs hold of one: its
// tenant, lease ID, lease expiry, Seq and ID; a value, not the job (the
// orders are in memory for both stores, and an item costs no allocation of
// its own). Two RUNNING jobs may hold one lease ID (one expired and not yet
// reclaimed when a replayable Lease reuses its ID), hence the Seq.
type runKey struct {
	tenant, leaseID, id string
	at                  int64
	seq                 uint64
}

// kept is k with strings of its own, for the in-memory orders, which keep it
// while the job runs: not parts of the record or command they were decoded
// from (decoder's share).
func (k runKey) kept() runKey {
	k.tenant, k.leaseID, k.id = strings.Clone(k.tenant), strings.Clone(k.leaseID), strings.Clone(k.id)
	return k
}

func runKeyOf(j *Job) runKey {
	k := runKey{tenant: j.Tenant, seq: j.Seq, id: j.ID}
	if j.Life != nil {
		k.leaseID, k.at = j.Life.LeaseID, j.Life.LeaseExpiresAt
	}
	return k
}

// lessLeaseKey orders jobLeaseID: (tenant, lease_id, seq).
func lessLeaseKey(a, b runKey) bool {
	return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.leaseID, b.leaseID), cmp.Compare(a.seq, b.seq)) < 0
}

// lessDueKey orders jobDue: (tenant, lease_expires_at, seq).
func lessDueKey(a, b runKey) bool {
	return cmp.Or(strings.Compare(a.tenant, b.tenant), cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq)) < 0
}

// lessLeaseExp orders jobLeaseExp: (lease_expires_at, seq, tenant).
func lessLeaseExp(a, b runKey) bool {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq), strings.Compare(a.tenant, b.tenant)) < 0
}

// stateOf is j.State() without copying the job.
func stateOf(j *Job) JobState {
	if j.Life == nil {
		return JobLegacy
	}
	return j.Life.State
}

// jobSize is what a job accounts for: its overhead, payload, result and error.
func jobSize(j *Job) uint64 {
	n := jobBytes(len(j.Payload))
	if j.Life != nil {
		n += uint64(len(j.Life.Result)) + uint64(len(j.Life.Error))
	}
	return n
}

// overBudget says whether old, holding a result and an error of these
// lengths instead of its own, would bring its tenant's bytes over
// maxTenant (OutcomeTenantBytesFull, checked first: the tenant's own
// refusal) or the ledger's over maxBytes (OutcomeBytesFull); 0 is no bound.
// A change that does not grow the job is never refused.
func (s *state) overBudget(old *Job, result, errLen int, maxBytes, maxTenant uint64) (Outcome, bool) {
	was, will := jobSize(old), jobBytes(len(old.Payload))+uint64(result)+uint64(errLen)
	if will <= was {
		return 0, false
	}
	grow := will - was
	switch {
	case maxTenant > 0 && s.tenantBytes[old.Tenant]+grow > maxTenant:
		return OutcomeTenantBytesFull, true
	case maxBytes > 0 && s.bytes+grow > maxBytes:
		return OutcomeBytesFull, true
	}
	return 0, false
}

// retained: j is in the retention order (jobExp): a legacy or finished job.
func retained(j *Job) bool { return j != nil && (j.Life == nil || j.Life.State.Finished()) }

// reindexJob moves a job from old to j in the orders that depend on its
// state (all but jobs, jobSeq and jobType), rewriting only the keys that
// changed: the one place that says which job is in which order. old is nil
// for a job inserted, j for a job removed.
func (s *state) reindexJob(old, j *Job) {
	ro, rn := inState(old, JobRunning), inState(j, JobRunning)
	reorder(s.jobExp, jobExpOrder.less, old, j, retained(old), retained(j))
	reorder(s.jobState, jobStateOrder.less, old, j, byState(old), byState(j))
	reorder(s.jobQueue, jobQueueOrder.less, old, j, inState(old, JobQueued), inState(j, JobQueued))
	reorder(s.jobQueueType, jobQueueTypeOrder.less, old, j, inState(old, JobQueued), inState(j, JobQueued))
	reorder(s.jobRunning, jobRunningOrder.less, old, j, ro, rn)
	var ok, nk runKey
	if ro {
		ok = runKeyOf(old)
	}
	if rn {
		nk = runKeyOf(j)
		if ro && ok.leaseID == nk.leaseID {
			nk.tenant, nk.id, nk.leaseID = ok.tenant, ok.id, ok.leaseID // a heartbeat: the kept strings
		} else {
			nk = nk.kept()
		}
	}
	reorder(s.jobDue, lessDueKey, ok, nk, ro, rn)
	reorder(s.jobLeaseExp, lessLeaseExp, ok, nk, ro, rn)
	if !(ro && rn && ok.leaseID == nk.leaseID) { // a heartbeat: the same lease, the same item (its expiry is not read there)
		reorder(s.jobLeaseID, lessLeaseKey, ok, nk, ro, rn)
	}
}

// byState: j is in jobState, the order ListJobs walks for a state: a QUEUED
// or finished job. A RUNNING job is listed from jobRunning, which holds it
// in the same (tenant, seq) order: a Lease and a Complete do not move it
// there, and a heartbeat writes no order at all on disk.
func byState(j *Job) bool { return j != nil && j.Life != nil && j.Life.State != JobRunning }

// inState: j is a lifecycle job in state st.
func inState(j *Job, st JobState) bool { return j != nil && j.Life != nil && j.Life.State == st }

// replaceJob swaps old for j (same tenant and ID, same Seq).
func (s *state) replaceJob(old, j *Job) {
	s.jobs.ReplaceOrInsert(j)
	// Same tenant, type and Seq: the same keys (on disk, nothing to write).
	reorder(s.jobSeq, jobSeqOrder.less, old, j, true, true)
	reorder(s.jobType, jobTypeOrder.less, old, j, true, true)
	s.reindexJob(old, j)
	s.jobStates[stateOf(old)]--
	s.jobStates[stateOf(j)]++
	s.release(old.Tenant, jobSize(old))
	s.charge(j.Tenant, jobSize(j))
}

// update replaces the lifecycle job old by a copy that change edits (items
// are immutable: the job and its JobLife are new) and returns it.
func (s *state) update(old *Job, change func(j *Job, l *JobLife)) Job {
	j := *old
	l := *old.Life
	change(&j, &l)
	j.Life = &l
	s.replaceJob(old, &j)
	return j
}

// sum is the total of counts by state: how many entries or jobs the state
// holds.
func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// unfinishedJobs is what MaxJobs bounds.
func (s *state) unfinishedJobs() int {
	return s.jobStates[JobLegacy] + s.jobStates[JobQueued] + s.jobStates[JobRunning]
}

// leased looks up the job of a worker's command under lease leaseID at now.
// ok false when the command does nothing, with its answer: OutcomeNotFound
// without the job, or for one whose retention has ended (Gone: as once
// Expire removed it, whenever the last Expire ran); OutcomeUnchanged with
// the job when ended (nil: never) says the lease already ended the job's
// attempt as the command would (the lease stays on a job its worker's
// Complete or Fail moved on); OutcomeLeaseLost when the lease is not the
// job's current one.
func (s *state) leased(tenant, jobID, leaseID string, now int64, ended func(*JobLife) bool) (*Job, Result, bool) {
	j, ok := s.getJob(tenant, jobID)
	switch {
	case !ok || j.Gone(now):
		return nil, Result{Outcome: OutcomeNotFound}, false
	case ended != nil && j.Life != nil && j.Life.LeaseID == leaseID && ended(j.Life):
		return nil, Result{Outcome: OutcomeUnchanged, Job: *j}, false
	case !currentLease(j, leaseID, now):
		return nil, Result{Outcome: OutcomeLeaseLost, Job: *j}, false
	}
	return j, Result{}, true
}

// currentLease: id is the job's current lease at now.
func currentLease(j *Job, id string, now int64) bool {
	return j.Life != nil && j.Life.State == JobRunning && j.Life.LeaseID == id && j.Life.LeaseExpiresAt > now
}

// satAdd returns a+b (b >= 0), saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// finish makes the job finished in state st at now.
func finish(j *Job, l *JobLife, st JobState, now int64) {
	l.State = st
	l.FinishedAt = now
	j.ExpiresAt = satAdd(now, max(l.Retention, 0))
}

// leaseTo hands old out: RUNNING under lease id. expired: its previous lease
// expired (a reclaim), which its Error says.
func (s *state) leaseTo(old *Job, c *Lease, id string, expired bool) Job {
	return s.update(old, func(_ *Job, l *JobLife) {
		if expired {
			l.Error = ErrorLeaseExpired
		}
		l.State = JobRunning
		l.Attempts++
		l.LeaseID, l.Holder, l.LeaseExpiresAt = id, c.Holder, c.Expiry
	})
}

// endExpiredLease ends the expired lease of old: DEAD when it used
// maxAttempts, else QUEUED at runAt. It reports whether it is DEAD.
func (s *state) endExpiredLease(old *Job, now, runAt int64, maxAttempts uint64) (dead bool) {
	s.update(old, func(j *Job, l *JobLife) {
		l.LeaseID, l.Holder, l.LeaseExpiresAt = "", "", 0
		l.Error = ErrorLeaseExpired
		dead = maxAttempts > 0 && l.Attempts >= maxAttempts
		if dead {
			finish(j, l, JobDead, now)
		} else {
			l.State = JobQueued
			l.RunAt = runAt
		}
	})
	return dead
}

func validIDs(ids []string) bool {
	for i, id := range ids {
		if id == "" || slices.Contains(ids[:i], id) {
			return false
		}
	}
	return true
}

func (c Lease) apply(s *state, _ *applyCtx) Result {
	switch {
	case c.Tenant == "" || c.Holder == "":
		return invalidf("lease: empty tenant or holder")
	case c.Max < 1 || c.Max > MaxLease:
		return invalidf("lease: max %d not in 1..%d", c.Max, MaxLease)
	case uint64(len(c.LeaseIDs)) != c.Max || !validIDs(c.LeaseIDs):
		return invalidf("lease: %d lease IDs for max %d, or an empty or repeated one", len(c.LeaseIDs), c.Max)
	case len(c.Types) > MaxLeaseTypes || !validIDs(c.Types):
		return invalidf("lease: %d types (at most %d), or an empty or repeated one", len(c.Types), MaxLeaseTypes)
	case c.Expiry <= c.Now:
		return invalidf("lease: expiry %d not after now %d", c.Expiry, c.Now)
	}
	if c.Replay {
		if held := s.heldLeases(&c); len(held) > 0 {
			return Result{Outcome: OutcomeLeased, Lease: &LeaseResult{Jobs: held, Replayed: true}}
		}
	}
	lr := &LeaseResult{}
	res := Result{Outcome: OutcomeLeased, Lease: lr}
	want := int(c.Max)
	typeOK := func(t string) bool { return len(c.Types) == 0 || slices.Contains(c.Types, t) }
	// fits: j may be handed out within MaxBytes (the first job always is);
	// once one does not fit, no later one is handed out (the order is kept).
	var size uint64
	full := false
	fits := func(j *Job) bool {
		n := uint64(ListJobBytes(j))
		if full || (c.MaxBytes > 0 && len(lr.Jobs) > 0 && size+n > c.MaxBytes) {
			full = true
			return false
		}
		size += n
		return true
	}

	// Reclaim: the tenant's expired leases, earliest first (collected, then
	// changed: an order is not changed while it is walked).
	var expired []*Job
	s.jobDue.AscendGreaterOrEqual(runKey{tenant: c.Tenant, at: math.MinInt64}, func(k runKey) bool {
		if k.tenant != c.Tenant || k.at > c.Now || len(expired) == MaxReclaim {
			return false
		}
		j, _ := s.getJob(k.tenant, k.id)
		expired = append(expired, j)
		return true
	})
	for _, old := range expired {
		switch {
		case c.MaxAttempts > 0 && old.Life.Attempts >= c.MaxAttempts:
			s.endExpiredLease(old, c.Now, c.Now, c.MaxAttempts)
			lr.Dead++
		case len(lr.Jobs) < want && typeOK(old.Type) && fits(old):
			lr.Jobs = append(lr.Jobs, s.leaseTo(old, &c, c.LeaseIDs[len(lr.Jobs)], true))
			lr.Reclaimed++
		}
	}

	// The queue: QUEUED jobs with RunAt <= Now, by (RunAt, Seq).
	need := want - len(lr.Jobs)
	if need == 0 || full {
		return res
	}
	var due []*Job
	collect := func(typ string, byType bool) func(*Job) bool {
		n := 0
		return func(j *Job) bool {
			if j.Tenant != c.Tenant || (byType && j.Type != typ) || j.Life.RunAt > c.Now || n == need {
				return false
			}
			n++
			due = append(due, j)
			return true
		}
	}
	if len(c.Types) == 0 {
		s.jobQueue.AscendGreaterOrEqual(&Job{Tenant: c.Tenant, Life: &JobLife{RunAt: math.MinInt64}}, collect("", false))
	} else {
		for _, t := range c.Types {
			s.jobQueueType.AscendGreaterOrEqual(&Job{Tenant: c.Tenant, Type: t, Life: &JobLife{RunAt: math.MinInt64}}, collect(t, true))
		}
		slices.SortFunc(due, func(a, b *Job) int {
			if jobQueueOrder.less(a, b) {
				return -1
			}
			return 1 // Seqs are unique: never equal
		})
		due = due[:min(len(due), need)]
	}
	for _, old := range due {
		if !fits(old) {
			break
		}
		lr.Jobs = append(lr.Jobs, s.leaseTo(old, &c, c.LeaseIDs[len(lr.Jobs)], false))
	}
	return res
}

// heldLeases returns the jobs of c.Tenant whose current lease (not expired at
// c.Now) is one of c.LeaseIDs, in c.LeaseIDs' order.
func (s *state) heldLeases(c *Lease) []Job {
	var held []Job
	for _, id := range c.LeaseIDs {
		held = s.leaseHolders(held, c.Tenant, id, func(l string) bool { return l == id }, c.Now)
	}
	return held
}

// leaseHolders appends to held the tenant's jobs whose lease ID, walked in
// lease-ID order from `from` on while match accepts it, is their current
// lease at now. Readers call it too (HeldLeases): it looks the jobs up with
// probes of its own, not the apply path's (getJob).
func (s *state) leaseHolders(held []Job, tenant, from string, match func(leaseID string) bool, now int64) []Job {
	var keys []runKey
	s.jobLeaseID.AscendGreaterOrEqual(runKey{tenant: tenant, leaseID: from}, func(k runKey) bool {
		if k.tenant != tenant || !match(k.leaseID) {
			return false
		}
		keys = append(keys, k)
		return true
	})
	for _, k := range keys {
		if j, ok := s.jobs.Get(&Job{Tenant: k.tenant, ID: k.id}); ok && currentLease(j, k.leaseID, now) {
			held = append(held, *j)
		}
	}
	return held
}

func (c Heartbeat) apply(s *state, _ *applyCtx) Result {
	switch {
	case c.Tenant == "" || c.JobID == "" || c.LeaseID == "":
		return invalidf("heartbeat: empty tenant, job ID or lease ID")
	case c.Expiry <= c.Now:
		return invalidf("heartbeat: expiry %d not after now %d", c.Expiry, c.Now)
	}
	old, res, ok := s.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, nil)
	if !ok {
		return res
	}
	j := s.update(old, func(_ *Job, l *JobLife) { l.LeaseExpiresAt = c.Expiry })
	return Result{Outcome: OutcomeExtended, Job: j}
}

func (c Complete) apply(s *state, _ *applyCtx) Result {
	if c.Tenant == "" || c.JobID == "" || c.LeaseID == "" {
		return invalidf("complete: empty tenant, job ID or lease ID")
	}
	old, res, ok := s.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, func(l *JobLife) bool { return l.State == JobSucceeded })
	if !ok {
		return res
	}
	if o, over := s.overBudget(old, len(c.Result), 0, c.MaxBytes, c.MaxTenantBytes); over {
		return Result{Outcome: o, Job: *old}
	}
	j := s.update(old, func(j *Job, l *JobLife) {
		l.Result, l.Error = clip(c.Result), ""
		finish(j, l, JobSucceeded, c.Now)
	})
	return Result{Outcome: OutcomeCompleted, Job: j}
}

func (c Fail) apply(s *state, _ *applyCtx) Result {
	switch {
	case c.Tenant == "" || c.JobID == "" || c.LeaseID == "":
		return invalidf("fail: empty tenant, job ID or lease ID")
	case c.Retry && c.RetryAt < c.Now:
		return invalidf("fail: retry_at %d before now %d", c.RetryAt, c.Now)
	}
	// The lease that ended the last attempt by a Fail stays on the job (an
	// expired lease is cleared): the same Fail again answers the job.
	old, res, ok := s.leased(c.Tenant, c.JobID, c.LeaseID, c.Now, func(l *JobLife) bool {
		return l.State == JobQueued || l.State == JobFailed || l.State == JobDead
	})
	if !ok {
		return res
	}
	if o, over := s.overBudget(old, len(old.Life.Result), len(c.Error), c.MaxBytes, c.MaxTenantBytes); over {
		return Result{Outcome: o, Job: *old}
	}
	j := s.update(old, func(j *Job, l *JobLife) {
		l.Error = c.Error
		switch {
		case !c.Retry:
			finish(j, l, JobFailed, c.Now)
		case c.MaxAttempts > 0 && l.Attempts >= c.MaxAttempts:
			finish(j, l, JobDead, c.Now)
		default:
			l.State = JobQueued
			l.RunAt = c.RetryAt
		}
	})
	return Result{Outcome: OutcomeFailed, Job: j}
}

func (c ExpireLeases) apply(s *state, _ *applyCtx) Result {
	if c.RetryAt < c.Now {
		return invalidf("expire_leases: retry_at %d before now %d", c.RetryAt, c.Now)
	}
	lr := &LeaseResult{}
	res := Result{Outcome: OutcomeLeasesExpired, Lease: lr}
	for n := uint64(0); ; n++ {
		k, ok := s.jobLeaseExp.Min()
		if !ok || k.at > c.Now {
			break
		}
		if c.Max != 0 && n == c.Max {
			res.More = true
			break
		}
		j, _ := s.getJob(k.tenant, k.id)
		if s.endExpiredLease(j, c.Now, c.RetryAt, c.MaxAttempts) {
			lr.Dead++
		} else {
			lr.Requeued++
		}
	}
	return res
}

// NextLeaseExpiry returns the earliest LeaseExpiresAt of a RUNNING job, and
// false when none runs: the leader proposes ExpireLeases when its clock
// reaches it. O(log n).
func (f *FSM) NextLeaseExpiry() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return minOf(f.s.jobLeaseExp, func(k runKey) int64 { return k.at })
}
