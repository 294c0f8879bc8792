package ledger

import (
	"fmt"
	"math"
)

// TypeAdmit is a submission decided in one entry (docs/ledger.md, "One
// round"): the key's reservation and its outcome together.
const TypeAdmit CommandType = 0x0D

// ReasonJobIDInUse is the Reason of the rejection an Admit records when the
// job ID its key derives is already a job of the tenant (status 422).
const ReasonJobIDInUse = "job_id_in_use"

// JobIDInUseDetail is the Detail of that rejection.
func JobIDInUseDetail(jobID string) string {
	return fmt.Sprintf("job %s was created earlier for this key and request, whose key has expired since; it is not created twice: read it with GET /v1/jobs/%s", jobID, jobID)
}

// Admit is a submission, decided in one log entry: its key's admission checks
// (Reserve) and the leader's verdict on the request (Outcome, a Commit or a
// Reject of the same tenant, key and job ID). It is the one command that
// takes a key for a job; no entry is ever left undecided.
//
// Semantics:
//   - When Reserve finds the key taken (OutcomeExists, OutcomeKeyReused),
//     expired by its watermark (OutcomeKeyExpired) or a bound full
//     (OutcomeFull, OutcomeWatermarksFull, OutcomeBytesFull, ...), that is the
//     answer and the verdict is not applied.
//   - Otherwise the key's entry is inserted with the verdict in it: a Commit
//     makes it COMMITTED and creates the job (OutcomeCommitted), or REJECTED
//     with reason "capacity" when the Commit's MaxJobs is reached
//     (OutcomeRejected); a Reject makes it REJECTED (OutcomeRejected). A
//     Commit whose job ID the tenant already has rejects the entry instead,
//     with status 422, ReasonJobIDInUse and JobIDInUseDetail, expiring at the
//     Commit's RejectedExpiresAt (or its ExpiresAt when that is unset): the
//     job is not created twice. A job whose retention has ended (Job.Gone at
//     the Commit's Now) is removed first, as Expire would, and no longer
//     holds its ID.
//   - The Result's Removed counts what the admission removed (a due entry of
//     the key, the relief of a full bound).
//
// The bytes bound (Reserve.MaxBytes, MaxTenantBytes) is checked against the
// entry and its job, payloads included, whatever the verdict.
//
// An Admit whose parts do not name the same tenant, key and job ID, whose
// Outcome is neither a Commit nor a Reject, or whose parts break their own
// rules is invalid as a whole: nothing changes.
type Admit struct {
	Reserve Reserve
	Outcome Verdict
}

// Verdict is an Admit's outcome: a Commit or a Reject.
type Verdict interface {
	verdictTag() byte
	names() (tenant, key, jobID string)
	check() error
	sizeHint() int
	appendBody(b []byte) []byte
}

// The tags of the verdicts in an Admit's body.
const (
	tagCommit byte = 0x02
	tagReject byte = 0x03
)

func (Commit) verdictTag() byte { return tagCommit }
func (Reject) verdictTag() byte { return tagReject }

func (c Commit) names() (string, string, string) { return c.Tenant, c.Key, c.JobID }
func (r Reject) names() (string, string, string) { return r.Tenant, r.Key, r.JobID }

func (Admit) CommandType() CommandType { return TypeAdmit }

// An Admit's time is the later of its parts'.
func (a Admit) stamp() int64 {
	switch o := a.Outcome.(type) {
	case Commit:
		return max(a.Reserve.Now, o.Now)
	case Reject:
		return max(a.Reserve.Now, o.Now)
	}
	return a.Reserve.Now
}

func (a Admit) sizeHint() int {
	n := 1 + a.Reserve.sizeHint()
	if a.Outcome != nil {
		n += a.Outcome.sizeHint()
	}
	return n
}

// Admit body: the Reserve's body, then the verdict's tag byte (0x02 Commit,
// 0x03 Reject) and body. An Admit without a verdict is encoded with tag 0x00
// and no body (and then refused by DecodeCommand).
func (a Admit) appendBody(out []byte) []byte {
	out = a.Reserve.appendBody(out)
	if a.Outcome == nil {
		return append(out, 0)
	}
	out = append(out, a.Outcome.verdictTag())
	return a.Outcome.appendBody(out)
}

func decodeAdmit(d *decoder) Admit {
	a := Admit{Reserve: decodeReserve(d)}
	switch d.byte() {
	case tagCommit:
		a.Outcome = decodeCommit(d)
	case tagReject:
		a.Outcome = decodeReject(d)
	default:
		d.fail("admit: not a verdict's tag")
	}
	return a
}

func (a Admit) apply(s *state, ax *applyCtx) Result {
	if a.Outcome == nil {
		return invalidf("admit: no verdict")
	}
	if err := a.Outcome.check(); err != nil {
		return invalid(err)
	}
	r := a.Reserve
	if err := r.check(); err != nil {
		return invalid(err)
	}
	if tenant, key, jobID := a.Outcome.names(); tenant != r.Tenant || key != r.Key || jobID != r.JobID {
		return invalidf("admit: the verdict names %s/%s job %s, the reserve %s/%s job %s",
			tenant, key, jobID, r.Tenant, r.Key, r.JobID)
	}
	res, free := s.admissible(ax, r)
	if !free {
		return res
	}
	e := s.newEntry(r)
	var out Result
	raisedAt := int64(math.MinInt64) // the Now a commit raised the key's watermark with
	switch o := a.Outcome.(type) {
	case Commit:
		out = s.commitEntry(ax, e, o)
		if out.Outcome == OutcomeCommitted {
			raisedAt = o.Now
		}
	case Reject:
		out = s.rejectEntry(ax, e, o)
	}
	// A structured key's watermark is created, or touched at the Reserve's
	// Now, by every admission. A commit's raise (commitEntry) has done both
	// already, at its own Now, unless the Reserve's is later.
	if e.Structured && r.Now > raisedAt {
		s.touchWatermark(r.Tenant, r.ClientID, r.Nonce, r.Now)
	}
	out.Removed = addRemoved(res.Removed, out.Removed)
	return out
}

func addRemoved(a, b Removed) Removed {
	return Removed{Committed: a.Committed + b.Committed, Claimed: a.Claimed + b.Claimed,
		Rejected: a.Rejected + b.Rejected, Jobs: a.Jobs + b.Jobs, Watermarks: a.Watermarks + b.Watermarks}
}
