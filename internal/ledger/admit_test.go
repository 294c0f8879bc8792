package ledger

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
)

func admitCommit(r Reserve) Admit { return Admit{Reserve: r, Outcome: QueueCommit(commit(r, r.Now))} }

// An Admit reserves and commits in one entry: the key answers COMMITTED and
// the job is queued.
func TestAdmitCommitsInOneEntry(t *testing.T) {
	h := newHarness(t)
	r := reserve("acme", "order-1", t0)
	res := h.must(admitCommit(r), OutcomeCommitted)
	if res.Entry.State != StateCommitted || res.Entry.ExpiresAt != t0+commitTTL {
		t.Fatalf("entry %+v", res.Entry)
	}
	j, ok := h.f.Job("acme", r.JobID)
	if !ok || j.Life == nil || j.Life.State != JobQueued {
		t.Fatalf("job %+v (found %v), want queued", j, ok)
	}
	// The entry's one change: committed.
	if len(h.changes) != 1 || h.changes[0].Kind != ChangeCommitted || h.changes[0].Index != h.idx {
		t.Fatalf("changes %+v", h.changes)
	}
}

// A live key answers as a Reserve would, and the outcome is not applied: a
// retried Admit of the same submission never makes a second job.
func TestAdmitOfALiveKeyChangesNothing(t *testing.T) {
	h := newHarness(t)
	r := reserve("acme", "order-1", t0)
	first := h.must(admitCommit(r), OutcomeCommitted)
	again := r
	again.JobID, again.Now = "job-other", t0+sec
	res := h.must(admitCommit(again), OutcomeExists)
	if res.Entry.JobID != first.Entry.JobID || res.Entry.State != StateCommitted {
		t.Fatalf("retry answered %+v, want the first entry", res.Entry)
	}
	if _, ok := h.f.Job("acme", "job-other"); ok {
		t.Fatal("a retried admit created a second job")
	}
	reused := again
	reused.Fingerprint = "another body"
	h.must(admitCommit(reused), OutcomeKeyReused)
}

func TestAdmitReject(t *testing.T) {
	h := newHarness(t)
	r := reserve("acme", "order-1", t0)
	res := h.must(Admit{Reserve: r, Outcome: reject(r, t0, 422)}, OutcomeRejected)
	if res.Entry.Status != 422 || res.Entry.ExpiresAt != t0+rejectTTL {
		t.Fatalf("entry %+v", res.Entry)
	}
	if _, ok := h.f.Job("acme", r.JobID); ok {
		t.Fatal("a rejected admit created a job")
	}
}

// The tenant already has the job ID the key derives: the entry is rejected in
// the same entry (422, job_id_in_use).
func TestAdmitJobIDInUseRejects(t *testing.T) {
	h := newHarness(t)
	r := reserve("acme", "order-1", t0)
	h.must(admitCommit(r), OutcomeCommitted)
	other := reserve("acme", "order-2", t0+sec)
	other.JobID = r.JobID
	c := QueueCommit(commit(other, other.Now))
	c.MaxJobs, c.RejectedExpiresAt = 100, other.Now+rejectTTL
	res := h.must(Admit{Reserve: other, Outcome: c}, OutcomeRejected)
	if res.Entry.Status != http.StatusUnprocessableEntity || res.Entry.Reason != ReasonJobIDInUse ||
		res.Entry.Detail != JobIDInUseDetail(r.JobID) || res.Entry.ExpiresAt != other.Now+rejectTTL {
		t.Fatalf("entry %+v", res.Entry)
	}
}

// A job whose retention has ended (ExpiresAt <= Now: Gone, a 404 to a read)
// no longer holds its ID: the Commit of the same request removes it first,
// as Expire would, and creates the job afresh, on a replica that has swept
// and on one that has not alike. Before, an unswept job made the key's
// entry a job_id_in_use rejection, naming a job a read answers 404 for,
// for the rejected TTL, while a sweep a moment earlier made it a job.
func TestAdmitJobIDOfAGoneJobCommits(t *testing.T) {
	r := reserve("acme", "order-1", t0)
	again := r
	again.Now = t0 + jobTTL // the job's ExpiresAt: Gone; the key's entry is due too
	for _, swept := range []bool{false, true} {
		h := newHarness(t)
		h.must(admit(r), OutcomeCommitted)
		if swept {
			h.must(expire(again.Now), OutcomeExpired)
		}
		res := h.must(admit(again), OutcomeCommitted)
		if res.Job.CreatedAt != again.Now {
			t.Fatalf("swept %v: job %+v, want one created at %d", swept, res.Job, again.Now)
		}
		if want := (Removed{Committed: 1, Jobs: 1}); !swept && res.Removed != want {
			t.Fatalf("removed %+v, want %+v", res.Removed, want)
		}
		if st := h.f.Stats(); st.Jobs != 1 || st.Entries != 1 {
			t.Fatalf("swept %v: stats %+v, want one entry and one job", swept, st)
		}
	}
	// A moment before, the job is retained: its ID is in use.
	h := newHarness(t)
	h.must(admit(r), OutcomeCommitted)
	before := again
	before.Now--
	c := commit(before, before.Now)
	c.RejectedExpiresAt = before.Now + rejectTTL
	if res := h.must(Admit{Reserve: before, Outcome: c}, OutcomeRejected); res.Entry.Reason != ReasonJobIDInUse {
		t.Fatalf("entry %+v, want %s", res.Entry, ReasonJobIDInUse)
	}
}

// Capacity is decided by the Commit part, atomically, as a Commit alone does.
func TestAdmitOverCapacityRejects(t *testing.T) {
	h := newHarness(t)
	full := func(r Reserve) Admit {
		c := QueueCommit(commit(r, r.Now))
		c.MaxJobs, c.RejectedExpiresAt, c.CapacityDetail = 1, r.Now+rejectTTL, "full"
		return Admit{Reserve: r, Outcome: c}
	}
	h.must(full(reserve("acme", "a", t0)), OutcomeCommitted)
	res := h.must(full(reserve("acme", "b", t0)), OutcomeRejected)
	if res.Entry.Status != 429 || res.Entry.Reason != ReasonCapacity {
		t.Fatalf("entry %+v", res.Entry)
	}
}

// An Admit whose parts disagree, or whose outcome breaks its own rules, is
// refused whole: no entry is reserved.
func TestAdmitInvalidChangesNothing(t *testing.T) {
	h := newHarness(t)
	r := reserve("acme", "order-1", t0)
	other := reserve("acme", "order-2", t0)
	badCommit := commit(r, t0)
	badCommit.ExpiresAt = t0
	for name, a := range map[string]Admit{
		"another key":    {Reserve: r, Outcome: commit(other, t0)},
		"another job":    {Reserve: r, Outcome: Commit{Tenant: r.Tenant, Key: r.Key, JobID: "x", Now: t0, ExpiresAt: t0 + 1, JobExpiresAt: t0 + 1}},
		"invalid commit": {Reserve: r, Outcome: badCommit},
		"invalid reject": {Reserve: r, Outcome: reject(r, t0, 200)},
	} {
		res := h.apply(a)
		if res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("%s: outcome %v (%v), want invalid", name, res.Outcome, res.Err)
		}
		h.noEntry("acme", "order-1")
	}
}

// An Admit's verdict is a Commit or a Reject, by its tag: anything else does
// not decode (and would halt a replica, never be skipped).
func TestAdmitDecodesOnlyAVerdict(t *testing.T) {
	r := reserve("acme", "a", t0)
	b := append([]byte{byte(TypeAdmit), FormatVersion}, r.appendBody(nil)...)
	if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an admit without a verdict: %v", err)
	}
	if _, err := DecodeCommand(append(append(bytes.Clone(b), byte(TypeExpire)), expire(t0).appendBody(nil)...)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an admit with an expire: %v", err)
	}
	if _, err := DecodeCommand(append(append(bytes.Clone(b), tagCommit), commit(r, t0).appendBody(nil)...)); err != nil {
		t.Fatalf("an admit with a commit: %v", err)
	}
}

// Admits ride reserve batches: each item applies as its own entry would, and
// the jobs get distinct Seqs.
func TestAdmitInABatch(t *testing.T) {
	h := newHarness(t)
	a, b := reserve("acme", "a", t0), reserve("acme", "b", t0)
	res := h.must(AdmitBatch{Items: []Command{admitCommit(a), admitCommit(b), admitCommit(a), admit(reserve("acme", "c", t0))}}, OutcomeBatch)
	want := []Outcome{OutcomeCommitted, OutcomeCommitted, OutcomeExists, OutcomeCommitted}
	for i, w := range want {
		if res.Items[i].Outcome != w {
			t.Fatalf("item %d: %v, want %v", i, res.Items[i].Outcome, w)
		}
	}
	ja, _ := h.f.Job("acme", a.JobID)
	jb, _ := h.f.Job("acme", b.JobID)
	if ja.Seq == jb.Seq {
		t.Fatalf("two jobs of one batch share Seq %d", ja.Seq)
	}
}

// A replica that does not know Admit (an older build) cannot decode it: the
// type is not ignorable, so it halts rather than skipping a submission.
func TestAdmitIsNotIgnorable(t *testing.T) {
	if TypeAdmit&TypeIgnorable != 0 {
		t.Fatal("Admit is ignorable: an older replica would skip submissions")
	}
	b := Encode(admitCommit(reserve("acme", "a", t0)))
	b[1] = FormatVersion + 1
	if _, err := DecodeCommand(b); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("a future Admit version decodes: %v", err)
	}
}
