package ledger

import (
	"testing"
	"time"
)

// TestWatermarkAgedOutUnderALongLivedEntry covers what the watermark model
// (whose entries all expire before watermarks age out) does not: an entry
// that lives longer than IDEMPOTENCY_WATERMARK_TTL_SECONDS (a per-request
// result_ttl). The client's watermark ages out while its committed entry
// still answers retries; the entry's expiry creates the watermark again with
// its sequence, so a late retry is refused (it never runs twice), and the
// recreated watermark counts against the tenant's share. Memory and disk
// agree throughout, across a reopen and a restore of the other's snapshot.
func TestWatermarkAgedOutUnderALongLivedEntry(t *testing.T) {
	w := newTwin(t)
	const wmTTL = time.Hour
	quota := func(r Reserve) Reserve { r.MaxTenantWatermarks = 1; return r }
	ex := func(now int64) Result {
		return w.apply(Encode(Expire{Now: now, WatermarkTTL: wmTTL}))
	}
	want := func(what string, r Reserve, v Verdict, outcome Outcome) Result {
		t.Helper()
		res := w.apply(Encode(Admit{Reserve: r, Outcome: v}))
		if res.Outcome != outcome {
			t.Fatalf("%s: outcome %v, want %v", what, res.Outcome, outcome)
		}
		return res
	}

	// Seq 1 commits with a lifetime of 3 h (result_ttl), seq 2 with the
	// default; seq 3 is rejected (429).
	s1 := quota(structured(tenant, client, 1, nonce, t0))
	long := commit(s1, t0)
	long.ExpiresAt, long.JobExpiresAt = t0+int64(3*time.Hour), t0+int64(4*time.Hour)
	want("seq 1", s1, long, OutcomeCommitted)
	s2 := quota(structured(tenant, client, 2, nonce, t0+sec))
	want("seq 2", s2, commit(s2, s2.Now), OutcomeCommitted)
	s3 := quota(structured(tenant, client, 3, nonce, t0+2*sec))
	want("seq 3", s3, reject(s3, s3.Now, 429), OutcomeRejected)

	// Seq 2 and 3 expire; then, an hour without a submission, the
	// watermark ages out while seq 1's entry lives.
	t1 := t0 + 2*sec + commitTTL
	if res := ex(t1); res.Removed.Committed != 1 || res.Removed.Rejected != 1 {
		t.Fatalf("expire at t1: %+v", res.Removed)
	}
	t2 := t1 + int64(wmTTL)
	if res := ex(t2); res.Removed.Watermarks != 1 {
		t.Fatalf("expire at t2: removed %+v, want the watermark", res.Removed)
	}
	for _, f := range []*FSM{w.mem, w.disk} {
		if wm, ok := f.Watermark(tenant, client, nonce); ok {
			t.Fatalf("watermark still held: %+v", wm)
		}
	}
	// Seq 1's retry is answered by its live entry, and touches nothing.
	if res := want("retry of seq 1", quota(at(s1, t2+sec)), commit(s1, t2+sec), OutcomeExists); res.Job.ID != s1.JobID {
		t.Fatalf("retry of seq 1 answered with job %q", res.Job.ID)
	}
	w.swapDisk(1, true)

	// Seq 1's entry expires: its sequence is recorded again.
	t3 := t0 + int64(3*time.Hour)
	if res := ex(t3); res.Removed.Committed != 1 {
		t.Fatalf("expire at t3: %+v", res.Removed)
	}
	w.swapDisk(2, false)
	for name, f := range map[string]*FSM{"memory": w.mem, "disk": w.disk} {
		wm, ok := f.Watermark(tenant, client, nonce)
		if !ok || !wm.Committed(1) || wm.Sequence != 1 || wm.UpdatedAt != t3 {
			t.Fatalf("%s: watermark after seq 1 expired: %+v (held %v), want sequence 1 committed at %d", name, wm, ok, t3)
		}
	}
	// A late retry of seq 1 is refused, not run again, on both stores.
	if res := want("late retry of seq 1", quota(at(s1, t3+sec)), commit(s1, t3+sec), OutcomeKeyExpired); res.Watermark != 1 {
		t.Fatalf("watermark in result %d", res.Watermark)
	}
	// The recreated watermark holds the tenant's share (1): another client
	// of the tenant is refused, the client itself goes on.
	other := quota(structured(tenant, "host2.dc1:1", 1, nonce, t3+2*sec))
	want("other client", other, commit(other, other.Now), OutcomeTenantWatermarksFull)
	s4 := quota(structured(tenant, client, 4, nonce, t3+3*sec))
	want("seq 4", s4, commit(s4, s4.Now), OutcomeCommitted)
	w.finish()
}
