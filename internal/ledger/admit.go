package ledger

import (
	"fmt"
	"net/http"
)

// TypeAdmit is a submission decided in one entry (docs/ledger.md, "One
// round"): the key's reservation and its outcome together.
const TypeAdmit CommandType = 0x0D

// ReasonJobIDInUse is the Reason of the rejection an Admit (or the manager,
// for an entry reserved alone) records when the job ID its key derives is
// already a job of the tenant (status 422).
const ReasonJobIDInUse = "job_id_in_use"

// JobIDInUseDetail is the Detail of that rejection.
func JobIDInUseDetail(jobID string) string {
	return fmt.Sprintf("job %s was created earlier for this key and request, whose key has expired since; it is not created twice: read it with GET /v1/jobs/%s", jobID, jobID)
}

// Admit reserves a key and records the leader's verdict on it in the same
// entry: Reserve, then, when the Reserve answered OutcomeReserved, Outcome (a
// Commit or a Reject of the same tenant, key and job ID) on the entry it just
// inserted. A submission whose admission the leader decides from its own state
// (every submission today) takes one Raft round instead of two, and no entry
// is ever left PENDING for a new leader to resolve.
//
// Semantics:
//   - When the Reserve does not answer OutcomeReserved (the key is live,
//     reused, expired by its watermark, or a bound is full), that is the
//     answer, exactly as a Reserve alone would give it, and Outcome is not
//     applied.
//   - Otherwise Outcome applies as the command of its own entry would, right
//     after the Reserve: OutcomeCommitted (or OutcomeRejected with reason
//     "capacity" when the Commit's MaxJobs is reached), or OutcomeRejected for
//     a Reject. A Commit whose job ID the tenant already has (OutcomeJobIDInUse
//     alone) rejects the entry instead, with status 422, ReasonJobIDInUse and
//     JobIDInUseDetail, expiring at the Commit's RejectedExpiresAt (or its
//     ExpiresAt when that is unset): the job is not created twice and the
//     entry does not stay PENDING.
//   - The Result's Removed counts what both removed.
//
// An Admit whose parts do not name the same tenant, key and job ID, whose
// Outcome is neither a Commit nor a Reject, or whose parts break their own
// rules is invalid as a whole: nothing changes.
type Admit struct {
	Reserve Reserve
	Outcome Command
}

func (Admit) CommandType() CommandType { return TypeAdmit }

func (a Admit) sizeHint() int {
	n := 2*(varintSize+2) + a.Reserve.sizeHint()
	if a.Outcome != nil {
		n += a.Outcome.sizeHint()
	}
	return n
}

// Admit body: two items, each length uvarint · a whole command (type byte ·
// version byte · body): the Reserve, then the Commit or Reject.
func (a Admit) appendBody(out []byte) []byte {
	out = appendItem(out, a.Reserve)
	if a.Outcome != nil && outcomeItem(a.Outcome.CommandType()) {
		out = appendItem(out, a.Outcome)
	}
	return out
}

func decodeAdmit(d *decoder) Admit {
	var a Admit
	if c := decodeItem(d, 0, func(t CommandType) bool { return t == TypeReserve }); c != nil {
		a.Reserve = c.(Reserve)
	}
	if d.err != nil {
		return a
	}
	a.Outcome = decodeItem(d, 1, outcomeItem)
	return a
}

// outcomeOf returns the tenant, key and job ID an Admit's outcome names, and
// its validation error.
func outcomeOf(c Command) (tenant, key, jobID string, err error) {
	switch o := c.(type) {
	case Commit:
		return o.Tenant, o.Key, o.JobID, o.check()
	case Reject:
		return o.Tenant, o.Key, o.JobID, o.check()
	}
	return "", "", "", invalidErr("admit: outcome %T is neither a commit nor a reject", c)
}

func (s *state) applyAdmit(ax *applyCtx, a Admit) Result {
	tenant, key, jobID, err := outcomeOf(a.Outcome)
	if err != nil {
		return invalid(err)
	}
	r := a.Reserve
	if tenant != r.Tenant || key != r.Key || jobID != r.JobID {
		return invalidf("admit: the outcome names %s/%s job %s, the reserve %s/%s job %s",
			tenant, key, jobID, r.Tenant, r.Key, r.JobID)
	}
	res := s.applyReserve(ax, r) // an invalid Reserve changes nothing
	if res.Outcome != OutcomeReserved {
		return res
	}
	removed := res.Removed
	s.raiseLedgerTime(r)
	switch o := a.Outcome.(type) {
	case Commit:
		res = s.applyCommit(ax, o)
		if res.Outcome == OutcomeJobIDInUse {
			expires := o.RejectedExpiresAt
			if expires <= o.Now {
				expires = o.ExpiresAt
			}
			res = s.applyReject(ax, Reject{Tenant: o.Tenant, Key: o.Key, JobID: o.JobID, Now: o.Now,
				ExpiresAt: expires, Status: http.StatusUnprocessableEntity, Reason: ReasonJobIDInUse,
				Detail: JobIDInUseDetail(o.JobID)})
		}
	case Reject:
		res = s.applyReject(ax, o)
	}
	res.Removed = addRemoved(removed, res.Removed)
	return res
}

func addRemoved(a, b Removed) Removed {
	return Removed{Pending: a.Pending + b.Pending, Committed: a.Committed + b.Committed,
		Rejected: a.Rejected + b.Rejected, Jobs: a.Jobs + b.Jobs, Watermarks: a.Watermarks + b.Watermarks}
}
