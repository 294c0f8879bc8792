package ledger

import (
	"bytes"
	"testing"
)

// commitV1 is the version-1 encoding of c (no capacity fields).
func commitV1(c Commit) []byte {
	c.version = 1
	return Encode(c)
}

func TestCommitV1StillDecodesAndReplays(t *testing.T) {
	r := reserve("acme", "k", t0)
	c := commit(r, t0+sec)
	b := commitV1(c)
	if b[1] != 1 {
		t.Fatalf("v1 header %x", b[:2])
	}
	got, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	g := got.(Commit)
	if g.MaxJobs != 0 || g.Tenant != c.Tenant || g.JobExpiresAt != c.JobExpiresAt || g.CommandVersion() != 1 {
		t.Fatalf("v1 decoded as %+v", g)
	}
	if !bytes.Equal(Encode(g), b) {
		t.Fatal("a v1 commit does not re-encode to its bytes")
	}
	// A v1 Commit has no capacity bound: it commits whatever the job count.
	h := newHarness(t)
	for _, k := range []string{"a", "b", "c"} {
		rk := reserve("acme", k, t0)
		h.must(rk, OutcomeReserved)
		h.mustRaw(commitV1(commit(rk, t0+sec)), OutcomeCommitted)
	}
}

func TestCommitOverMaxJobsIsACapacityRejection(t *testing.T) {
	h := newHarness(t)
	capped := func(r Reserve, now int64) Commit {
		c := commit(r, now)
		c.MaxJobs, c.RejectedExpiresAt, c.CapacityDetail = 2, now+rejectTTL, "dc1 holds its maximum of 2 queued jobs"
		return c
	}
	var rs []Reserve
	for _, k := range []string{"a", "b", "c", "d"} {
		r := reserve("acme", k, t0)
		h.must(r, OutcomeReserved)
		rs = append(rs, r)
	}
	h.must(capped(rs[0], t0+sec), OutcomeCommitted)
	h.must(capped(rs[1], t0+sec), OutcomeCommitted)
	res := h.must(capped(rs[2], t0+sec), OutcomeRejected)
	if e := res.Entry; e.State != StateRejected || e.Status != 429 || e.Reason != ReasonCapacity ||
		e.Detail != "dc1 holds its maximum of 2 queued jobs" || e.ExpiresAt != t0+sec+rejectTTL {
		t.Fatalf("capacity rejection: %+v", e)
	}
	if st := h.f.Stats(); st.Jobs != 2 || st.Rejected != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Re-proposing the Commit of a key rejected for capacity changes nothing.
	h.must(capped(rs[2], t0+2*sec), OutcomeUnchanged)
	// Once a job's retention passes, the next Commit removes it and commits.
	late := t0 + jobTTL + 2*sec
	res = h.must(capped(rs[3], late), OutcomeCommitted)
	if res.Removed.Jobs == 0 {
		t.Fatalf("a due job should have been removed to make room: %+v", res.Removed)
	}
	// A capped Commit without a rejection expiry is invalid.
	bad := capped(rs[3], t0)
	bad.RejectedExpiresAt = 0
	h.must(bad, OutcomeInvalid)
}

// mustRaw applies encoded bytes and fails unless the outcome is want.
func (h *harness) mustRaw(b []byte, want Outcome) Result {
	h.t.Helper()
	res := h.applyRaw(b)
	if res.Outcome != want {
		h.t.Fatalf("outcome %v (err %v), want %v", res.Outcome, res.Err, want)
	}
	checkInvariants(h.t, h.f)
	return res
}

func TestPendingBeforeListsOldPendingOnly(t *testing.T) {
	h := newHarness(t)
	a, b, c := reserve("t", "a", t0), reserve("t", "b", t0+2*sec), reserve("t", "c", t0+4*sec)
	for _, r := range []Reserve{a, b, c} {
		h.must(r, OutcomeReserved)
	}
	h.must(commit(a, t0+5*sec), OutcomeCommitted)
	got := h.f.PendingBefore(t0+3*sec, 0)
	if len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("pending before t0+3s: %+v", got)
	}
	if got := h.f.PendingBefore(t0+10*sec, 1); len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("limit 1: %+v", got)
	}
	if got := h.f.PendingBefore(t0+10*sec, 0); len(got) != 2 || got[1].Key != "c" {
		t.Fatalf("all: %+v", got)
	}
	// A restored FSM has the same index.
	if got := restore(t, persist(t, h.f)).PendingBefore(t0+10*sec, 0); len(got) != 2 {
		t.Fatalf("after restore: %+v", got)
	}
}
