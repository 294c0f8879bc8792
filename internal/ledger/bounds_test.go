package ledger

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func TestCommitOverMaxJobsIsACapacityRejection(t *testing.T) {
	h := newHarness(t)
	capped := func(r Reserve, now int64) Admit {
		c := commit(r, now)
		c.MaxJobs, c.RejectedExpiresAt, c.CapacityDetail = 2, now+rejectTTL, "dc1 holds its maximum of 2 queued jobs"
		return admitWith(at(r, now), c)
	}
	var rs []Reserve
	for _, k := range []string{"a", "b", "c", "d"} {
		rs = append(rs, reserve("acme", k, t0))
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
	// The same request again is answered by its rejection.
	h.must(capped(rs[2], t0+2*sec), OutcomeExists)
	// Once a job's retention passes, the next Admit removes it and commits.
	late := t0 + jobTTL + 2*sec
	res = h.must(capped(rs[3], late), OutcomeCommitted)
	if res.Removed.Jobs == 0 {
		t.Fatalf("a due job should have been removed to make room: %+v", res.Removed)
	}
	// A capped Commit without a rejection expiry is invalid.
	bad := capped(reserve("acme", "e", late), late)
	c := bad.Outcome.(Commit)
	c.RejectedExpiresAt = 0
	bad.Outcome = c
	h.must(bad, OutcomeInvalid)
}

func TestWatermarkWindowRecordAndShift(t *testing.T) {
	var w Watermark
	seqs := []uint64{0, 3, 63, 64, 65, 200, 1000, 1100}
	for _, s := range seqs {
		w.record(s)
	}
	if w.Sequence != 1100 {
		t.Fatalf("highest %d", w.Sequence)
	}
	for s := uint64(0); s <= 1200; s++ {
		want := false
		for _, c := range seqs {
			want = want || (c == s && 1100-s < WatermarkWindow)
		}
		if got := w.Committed(s); got != want {
			t.Fatalf("Committed(%d) = %v, want %v", s, got, want)
		}
		if below := w.BelowWindow(s); below != (s <= 1100 && 1100-s >= WatermarkWindow) {
			t.Fatalf("BelowWindow(%d) = %v", s, below)
		}
	}
	// A jump past the whole window clears it.
	w.record(1100 + WatermarkWindow + 5)
	if w.Committed(1100) || !w.Committed(1100+WatermarkWindow+5) {
		t.Fatalf("after a long jump: %+v", w)
	}
}

// sreserve is a structured Reserve with room for every bound.
func sreserve(tenant, client string, seq uint64, now int64) Reserve {
	r := structured(tenant, client, seq, "a1b2c3d4e5f6a7b8", now)
	r.MaxEntries = 1 << 20
	return r
}

func TestRejectedSequenceRetriedAfterAHigherCommitIsAdmitted(t *testing.T) {
	h := newHarness(t)
	r5 := sreserve("t", "c", 5, t0)
	h.must(admitWith(r5, reject(r5, t0+sec, 429)), OutcomeRejected)
	r6 := sreserve("t", "c", 6, t0+2*sec)
	h.must(admitWith(r6, commit(r6, t0+3*sec)), OutcomeCommitted)
	// Both entries expire; 5 never ran, so its retry is judged afresh...
	late := t0 + 3*sec + commitTTL
	h.must(expire(late), OutcomeExpired)
	h.must(admitWith(at(r5, late+sec), commit(r5, late+2*sec)), OutcomeCommitted)
	// ... while 6, which ran, is refused as expired (409), and so is 5 now.
	if res := h.must(admit(at(r6, late+3*sec)), OutcomeKeyExpired); res.Watermark != 6 {
		t.Fatalf("watermark %d", res.Watermark)
	}
	h.must(expire(late+2*sec+commitTTL), OutcomeExpired)
	h.must(admit(at(r5, late+3*sec+commitTTL)), OutcomeKeyExpired)
	// A sequence more than the window below the highest is refused, run or not.
	big := sreserve("t", "c", 6+WatermarkWindow, late+4*sec+commitTTL)
	h.must(admitWith(big, commit(big, big.Now+sec)), OutcomeCommitted)
	h.must(admit(sreserve("t", "c", 6, big.Now+2*sec)), OutcomeKeyExpired)
	h.must(admit(sreserve("t", "c", 7, big.Now+2*sec)), OutcomeCommitted)
}

func TestFullWatermarkTableRefusesAndNeverEvicts(t *testing.T) {
	h := newHarness(t)
	bounded := func(r Reserve) Reserve { r.MaxWatermarks = 2; return r }
	a := bounded(sreserve("t", "a", 1, t0))
	h.must(admitWith(a, commit(a, t0+sec)), OutcomeCommitted)
	late := t0 + sec + commitTTL
	h.must(expire(late), OutcomeExpired) // a's entry is gone; its watermark stays
	// A flood of new clients: one fits, the rest are refused.
	// (rejected: an entry that commits raises its client's watermark again
	// when it expires)
	b := bounded(sreserve("t", "b", 1, late))
	h.must(admitWith(b, reject(b, late, 422)), OutcomeRejected)
	for i := 0; i < 10; i++ {
		h.must(admit(bounded(sreserve("t", fmt.Sprintf("flood%d", i), 1, late+sec))), OutcomeWatermarksFull)
	}
	// Expire (version 2) never evicts a live watermark either.
	h.must(Expire{Now: late + 2*sec, WatermarkTTL: 24 * time.Hour}, OutcomeExpired)
	// a's committed sequence is still refused: it never runs twice.
	h.must(admit(bounded(at(a, late+3*sec))), OutcomeKeyExpired)
	// Clients that hold a watermark go on.
	a2 := bounded(sreserve("t", "a", 2, late+3*sec))
	h.must(admitWith(a2, reject(a2, a2.Now, 422)), OutcomeRejected)
	// Watermarks still age out by their TTL, which makes room.
	h.must(Expire{Now: late + 3*sec + int64(24*time.Hour), WatermarkTTL: 24 * time.Hour}, OutcomeExpired)
	h.must(admit(bounded(sreserve("t", "flood0", 1, late+4*sec+int64(24*time.Hour)))), OutcomeCommitted)
}

func TestOneTenantsFloodDoesNotRefuseAnother(t *testing.T) {
	h := newHarness(t)
	bounded := func(r Reserve) Reserve { r.MaxWatermarks, r.MaxTenantWatermarks = 100, 3; return r }
	for i := 0; i < 3; i++ {
		h.must(admit(bounded(sreserve("noisy", fmt.Sprintf("c%d", i), 1, t0))), OutcomeCommitted)
	}
	for i := 3; i < 20; i++ {
		h.must(admit(bounded(sreserve("noisy", fmt.Sprintf("c%d", i), 1, t0))), OutcomeTenantWatermarksFull)
	}
	for i := 0; i < 3; i++ {
		h.must(admit(bounded(sreserve("quiet", fmt.Sprintf("c%d", i), 1, t0))), OutcomeCommitted)
	}
	if st := h.f.Stats(); st.Watermarks != 6 {
		t.Fatalf("watermarks %d", st.Watermarks)
	}
	// The per-tenant counts survive a snapshot.
	f := restore(t, persist(t, h.f))
	if f.s.wmTenant["noisy"] != 3 || f.s.wmTenant["quiet"] != 3 {
		t.Fatalf("tenant counts after restore: %v", f.s.wmTenant)
	}
}

func TestByteBudgetRefusesAndNeverDrops(t *testing.T) {
	h := newHarness(t)
	payload := bytes.Repeat([]byte("x"), 100_000)
	one := entryBytes(len(payload)) + jobBytes(len(payload)) // a committed entry and its job
	big := func(tenant, key string, now int64) Reserve {
		r := reserve(tenant, key, now)
		r.Request.Payload = payload
		r.MaxBytes, r.MaxTenantBytes = 3*one, 2*one
		return r
	}
	a, b := big("t1", "a", t0), big("t1", "b", t0)
	h.must(admit(a), OutcomeCommitted)
	h.must(admit(b), OutcomeCommitted)
	// t1 holds its share: refused with the tenant's outcome; t2 is not.
	h.must(admit(big("t1", "c", t0)), OutcomeTenantBytesFull)
	h.must(admit(big("t2", "a", t0)), OutcomeCommitted)
	// The whole budget is held: anyone is refused; every live entry stays.
	h.must(admit(big("t3", "a", t0)), OutcomeBytesFull)
	if st := h.f.Stats(); st.Entries != 3 || st.Bytes != 3*one || st.Bytes > 3*one {
		t.Fatalf("stats %+v", st)
	}
	// An Admit is checked against its entry and its job whatever its
	// verdict: a Reject is refused as well, and holds its entry only.
	h.must(admitWith(big("t3", "a", t0), reject(big("t3", "a", t0), t0, 422)), OutcomeBytesFull)
	h2 := newHarness(t)
	r := big("t4", "a", t0)
	h2.must(admitWith(r, reject(r, t0, 422)), OutcomeRejected)
	if st := h2.f.Stats(); st.Bytes != entryBytes(len(payload)) {
		t.Fatalf("bytes of a rejected entry %d, want %d", st.Bytes, entryBytes(len(payload)))
	}
	// Duplicates of live keys are answered while full.
	h.must(admit(at(a, t0+2*sec)), OutcomeExists)
	// Once due, entries and then jobs are removed to make room.
	late := t0 + jobTTL + 2*sec
	h.must(admit(big("t3", "a", late)), OutcomeCommitted)
}

func TestListJobsStopsAtMaxBytes(t *testing.T) {
	h := newHarness(t)
	payload := bytes.Repeat([]byte("y"), 10_000)
	for i := 0; i < 5; i++ {
		r := reserve("t", fmt.Sprintf("k%d", i), t0)
		r.Request.Payload = payload
		h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
	}
	one := ListJobBytes(&Job{Payload: payload, Key: "k0", Type: "send_invoice", Datacenters: []string{"dc1"}})
	jobs, next, more := h.f.ListJobs("t", ListOptions{Limit: 100, MaxBytes: 2*one + 1})
	if len(jobs) != 2 || !more || next != jobs[1].Seq {
		t.Fatalf("page: %d jobs, next %d, more %v", len(jobs), next, more)
	}
	// A budget under one job still returns one: a page always progresses.
	jobs, _, more = h.f.ListJobs("t", ListOptions{Limit: 100, MaxBytes: 1, After: next})
	if len(jobs) != 1 || !more || jobs[0].Key != "k2" {
		t.Fatalf("tiny budget: %+v %v", jobs, more)
	}
}
