package ledger

// Actions on a job by its tenant (docs/ledger.md, "Cancel and retry"): Cancel
// ends a QUEUED job as CANCELLED; Retry gives a FAILED or DEAD job a new
// attempt (QUEUED again, same job ID). Each is recorded under the caller's
// idempotency key in the same log entry: the key's entry (state COMMITTED,
// JobID the job, Fingerprint the action's) makes a repeat of the key a
// replay, never a second action, for as long as the entry lives.

// JobAction is the body of Cancel and Retry.
//
// Semantics, in this order:
//  1. A live entry of (Tenant, Key): with the same Fingerprint, the action is
//     a replay: OutcomeExists with the entry and the job as it is now
//     (OutcomeNotFound when its retention has ended); another fingerprint:
//     OutcomeKeyReused. Nothing changes. A due entry of the key is removed
//     first, as Expire would.
//  2. No job JobID of Tenant (or one whose retention has ended): OutcomeNotFound (another tenant's job is not
//     found either). Nothing is recorded.
//  3. The job's state decides (OutcomeConflict with the job, nothing
//     recorded, when it refuses): Cancel takes a QUEUED job to CANCELLED
//     (finished at Now: retained for its retention, never leased again, its
//     queue slot freed); a job already CANCELLED answers OutcomeUnchanged
//     with the job (idempotent by state, nothing recorded); RUNNING,
//     SUCCEEDED, FAILED, DEAD and a job outside the lifecycle are refused.
//     Retry takes a FAILED or DEAD job to QUEUED at RunAt = Now, its
//     attempts kept (so a DEAD job, which used MaxAttempts, gets one more
//     attempt per Retry; a FAILED one the attempts it had left, at least
//     one); any other state is refused.
//  4. Room for the key's entry, as Claim makes it: at MaxEntries, or short
//     of bytes after removing a few due entries, OutcomeFull,
//     OutcomeTenantBytesFull or OutcomeBytesFull, and nothing changes.
//  5. The job changes and the entry is inserted: OutcomeCancelled or
//     OutcomeRetried, with the job and the entry.
//
// Invalid: an empty tenant, job ID, key or fingerprint; ExpiresAt not after
// Now; MaxEntries 0.
type JobAction struct {
	Tenant string
	JobID  string
	// Key is the caller's idempotency key, Fingerprint what identifies the
	// action (opaque, compared byte for byte).
	Key         string
	Fingerprint string
	// Now is the leader's clock; ExpiresAt, after it, the end of the key's
	// entry (Now + the committed TTL).
	Now       int64
	ExpiresAt int64
	// The bounds, as Claim's: MaxEntries at least 1; 0 for "no bound" for
	// the others.
	MaxEntries     uint64
	MaxBytes       uint64
	MaxTenantBytes uint64
}

// Cancel ends a QUEUED job as CANCELLED (JobAction).
type Cancel struct{ JobAction }

// Retry gives a FAILED or DEAD job a new attempt (JobAction).
type Retry struct{ JobAction }

func (Cancel) CommandType() CommandType { return TypeCancel }
func (Retry) CommandType() CommandType  { return TypeRetry }

func (a JobAction) stamp() int64 { return a.Now }

func (a JobAction) sizeHint() int {
	return len(a.Tenant) + len(a.JobID) + len(a.Key) + len(a.Fingerprint) + 9*varintSize
}

// Cancel and Retry body:
//
//	tenant string, job_id string, key string, fingerprint string,
//	now int64, expires_at int64,
//	max_entries uvarint, max_bytes uvarint, max_tenant_bytes uvarint
func (a JobAction) appendBody(b []byte) []byte {
	b = appendString(b, a.Tenant)
	b = appendString(b, a.JobID)
	b = appendString(b, a.Key)
	b = appendString(b, a.Fingerprint)
	b = appendInt64(b, a.Now)
	b = appendInt64(b, a.ExpiresAt)
	b = appendUvarint(b, a.MaxEntries)
	b = appendUvarint(b, a.MaxBytes)
	return appendUvarint(b, a.MaxTenantBytes)
}

func decodeJobAction(d *decoder) JobAction {
	return JobAction{Tenant: d.string(), JobID: d.string(), Key: d.string(), Fingerprint: d.string(), Now: d.int64(),
		ExpiresAt: d.int64(), MaxEntries: d.uvarint(), MaxBytes: d.uvarint(), MaxTenantBytes: d.uvarint()}
}

func (c Cancel) apply(s *state, ax *applyCtx) Result {
	return s.applyJobAction(ax, "cancel", c.JobAction, func(j *Job) (Outcome, bool) {
		switch stateOf(j) {
		case JobQueued:
			return OutcomeCancelled, true
		case JobCancelled:
			return OutcomeUnchanged, false
		}
		return OutcomeConflict, false
	}, func(j *Job, l *JobLife) {
		l.LeaseID, l.Holder, l.LeaseExpiresAt = "", "", 0
		finish(j, l, JobCancelled, c.Now)
	})
}

func (c Retry) apply(s *state, ax *applyCtx) Result {
	return s.applyJobAction(ax, "retry", c.JobAction, func(j *Job) (Outcome, bool) {
		switch stateOf(j) {
		case JobFailed, JobDead:
			return OutcomeRetried, true
		}
		return OutcomeConflict, false
	}, func(j *Job, l *JobLife) {
		l.LeaseID, l.Holder, l.LeaseExpiresAt = "", "", 0
		l.FinishedAt, l.Result = 0, nil
		l.State = JobQueued
		l.RunAt = c.Now
		j.ExpiresAt = 0
	})
}

// applyJobAction applies a Cancel or Retry (JobAction's semantics): judge
// says what the job's state allows (the outcome, and whether it changes),
// change makes the transition.
func (s *state) applyJobAction(ax *applyCtx, name string, a JobAction, judge func(*Job) (Outcome, bool), change func(*Job, *JobLife)) Result {
	switch {
	case a.Tenant == "" || a.JobID == "" || a.Key == "" || a.Fingerprint == "":
		return invalidf("%s: empty tenant, job ID, key or fingerprint", name)
	case a.ExpiresAt <= a.Now:
		return invalidf("%s: expires_at %d not after now %d", name, a.ExpiresAt, a.Now)
	case a.MaxEntries == 0:
		return invalidf("%s: max_entries is 0", name)
	}
	var res Result
	if s.answerLive(ax, a.Tenant, a.Key, a.Fingerprint, a.Now, &res) {
		if res.Outcome == OutcomeExists && (res.Job.ID == "" || res.Job.Gone(a.Now)) {
			res.Outcome, res.Job = OutcomeNotFound, Job{} // the job's retention has ended
		}
		return res
	}
	old, ok := s.getJob(a.Tenant, a.JobID)
	if !ok || old.Gone(a.Now) {
		res.Outcome = OutcomeNotFound
		return res
	}
	outcome, changes := judge(old)
	if !changes {
		res.Outcome, res.Job = outcome, *old
		return res
	}
	r := room{tenant: a.Tenant, cost: entryBytes(0), maxEntries: a.MaxEntries, maxBytes: a.MaxBytes,
		maxTenantBytes: a.MaxTenantBytes, keepJob: a.JobID}
	if res.Outcome = s.makeRoom(ax, r, a.Now, &res.Removed); res.Outcome != 0 {
		res.Job = *old
		return res
	}
	j := s.update(old, change)
	e := s.recordKey(a.Tenant, a.Key, a.Fingerprint, a.JobID, StateCommitted, a.Now, a.ExpiresAt, Request{Type: j.Type})
	res.Outcome, res.Job, res.Entry = outcome, j, *e
	return res
}
