package ledger

import (
	"bytes"
	"io"
	"reflect"
	"slices"
	"testing"
)

// A job's entry re-admitted while an owed copy of the job is kept starts with
// the owed copy's confirmations. With three datacenters, dc2 confirms the job,
// its entry expires (owed, dc3 not confirmed) and the key is sent again: the
// same job ID, admitted again (committed once the job is gone, or rejected
// job_id_in_use while it is retained). The new entry must not be carried to
// dc2 right away: a dc2 past its retention would run the job a second time.
// The order the outbox walks (ResolvedMultiDatacenter) shows the entry as
// confirmed by dc2 from the Admit on, before any Confirm.
func TestReadmittedEntryKeepsTheOwedConfirmations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		verdict func(r Reserve) Verdict
		want    Outcome
	}{
		{"committed after the job's retention", func(r Reserve) Verdict { return commit(r, r.Now) }, OutcomeCommitted},
		{"rejected job_id_in_use", func(r Reserve) Verdict { return commit(r, r.Now) }, OutcomeRejected},
		{"rejected by the leader", func(r Reserve) Verdict { return reject(r, r.Now, 422) }, OutcomeRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, h *harness) {
				r := reserve("t", "k", t0)
				r.Request.Datacenters = []string{"dc1", "dc2", "dc3"}
				h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
				h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
				again := r
				again.Now = t0 + 2*sec + commitTTL
				if tc.want == OutcomeCommitted {
					again.Now = t0 + 2*sec + jobTTL // the job is gone too
				}
				h.must(expire(again.Now-sec), OutcomeExpired)
				if e, ok := h.f.Owed("t", "k", r.JobID); !ok || !reflect.DeepEqual(e.Confirmed, []string{"dc2"}) {
					t.Fatalf("owed: %+v, %v; want confirmed by dc2", e.Confirmed, ok)
				}
				res := h.must(admitWith(again, tc.verdict(again)), tc.want)
				if !reflect.DeepEqual(res.Entry.Confirmed, []string{"dc2"}) {
					t.Fatalf("the Admit's entry is confirmed by %v, want dc2", res.Entry.Confirmed)
				}
				if e := h.entry("t", "k"); e.JobID != r.JobID || !reflect.DeepEqual(e.Confirmed, []string{"dc2"}) {
					t.Fatalf("the re-admitted entry: job %s, confirmed by %v; want %s confirmed by dc2", e.JobID, e.Confirmed, r.JobID)
				}
				carriedTo := func() (dcs []string) {
					h.f.ResolvedMultiDatacenter("dc1", func(e Entry) bool {
						for _, dc := range e.Request.Datacenters {
							if dc != "dc1" && !slices.Contains(e.Confirmed, dc) {
								dcs = append(dcs, dc)
							}
						}
						return true
					})
					return dcs
				}
				if dcs := carriedTo(); !reflect.DeepEqual(dcs, []string{"dc3"}) {
					t.Fatalf("the live entry is carried to %v, want dc3 only (dc2 confirmed the job)", dcs)
				}
				checkInvariants(t, h.f)
				sameState(t, h.f, restore(t, persist(t, h.f)))
				h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc3"}}}, OutcomeConfirmed)
				if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
					t.Fatalf("after dc3 confirmed: outbox %d, owed %d; want 0 and 0", n, o)
				}
				if e := h.entry("t", "k"); !reflect.DeepEqual(e.Confirmed, []string{"dc2", "dc3"}) {
					t.Fatalf("after dc3 confirmed, the entry is confirmed by %v", e.Confirmed)
				}
				checkInvariants(t, h.f)
			})
		})
	}
}

// A job with both a live entry and an owed one (its key sent again after its
// entry expired) is one job the outbox carries once: OutboxLen, the count
// MANAGER_OUTBOX_MAX_ENTRIES bounds, counts it once, from the Admit on,
// after a restore on either store and a reopen of the disk store, and as the
// live entry expires (the owed copy replaced) or a Confirm clears the job.
func TestOutboxLenCountsALiveAndOwedJobOnce(t *testing.T) {
	for _, store := range stores {
		t.Run("store="+store, func(t *testing.T) {
			dir := t.TempDir()
			h := &harness{t: t, f: New(Options{})}
			if store == "disk" {
				h.f = openFSM(t, dir, Options{})
			}
			lens := func(f *FSM, what string, outbox, owed int) {
				t.Helper()
				if n, o := f.OutboxLen(), f.OwedLen(); n != outbox || o != owed {
					t.Fatalf("%s: outbox %d, owed %d; want %d and %d", what, n, o, outbox, owed)
				}
				checkInvariants(t, f)
			}
			r := reserve("t", "k", t0)
			r.Request.Datacenters = []string{"dc1", "dc2", "dc3"}
			h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
			h.must(expire(t0+sec+commitTTL), OutcomeExpired)
			lens(h.f, "owed", 1, 1)
			again := r
			again.Now = t0 + 2*sec + commitTTL
			h.must(admitWith(again, reject(again, again.Now, 422)), OutcomeRejected)
			lens(h.f, "live and owed", 1, 1)
			other := reserve("t", "k2", again.Now)
			other.Request.Datacenters = []string{"dc1", "dc2"}
			h.must(admitWith(other, commit(other, other.Now)), OutcomeCommitted)
			lens(h.f, "and another job", 2, 1)

			snap := persist(t, h.f)
			for _, to := range stores {
				g := newHarnessOn(t, to)
				if err := g.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
					t.Fatal(err)
				}
				lens(g.f, "restored on "+to, 2, 1)
			}
			if store == "disk" {
				if err := h.f.Close(); err != nil {
					t.Fatal(err)
				}
				h.f = openFSM(t, dir, Options{})
				lens(h.f, "reopened", 2, 1)
			}

			h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
			lens(h.f, "dc2 confirmed", 2, 1)
			h.must(expire(again.Now+rejectTTL), OutcomeExpired) // the live entry of k, not k2
			h.noEntry("t", "k")
			lens(h.f, "the live entry expired", 2, 1)
			h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc3"}}}, OutcomeConfirmed)
			lens(h.f, "dc3 confirmed", 1, 0)

			// Again, the live entry cleared by the Confirm that clears the
			// owed copy.
			h.must(expire(other.Now+commitTTL), OutcomeExpired)
			lens(h.f, "k2 owed", 1, 1)
			k2 := other
			k2.Now = other.Now + commitTTL + sec
			h.must(admitWith(k2, reject(k2, k2.Now, 422)), OutcomeRejected)
			lens(h.f, "k2 live and owed", 1, 1)
			h.must(Confirm{Items: []Confirmation{{"t", "k2", other.JobID, "dc2"}}}, OutcomeConfirmed)
			lens(h.f, "k2 confirmed", 0, 0)
		})
	}
}

// A live entry of an owed job whose request names other datacenters than
// the owed copy's (the ledger does not assume a job ID names one request)
// is counted apart from it once it is no longer carried, while the owed
// copy still is.
func TestOutboxLenOfALiveAndOwedJobOfTwoRequests(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		r := reserve("t", "k", t0)
		r.Request.Datacenters = []string{"dc1", "dc2", "dc3"}
		h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
		h.must(expire(t0+sec+commitTTL), OutcomeExpired)
		again := r
		again.Now = t0 + 2*sec + commitTTL
		again.Request.Datacenters = []string{"dc1", "dc2"}
		h.must(admitWith(again, reject(again, again.Now, 422)), OutcomeRejected)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 {
			t.Fatalf("outbox %d, owed %d; want 1 and 1", n, o)
		}
		checkInvariants(t, h.f)
		h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 {
			t.Fatalf("after dc2 confirmed: outbox %d, owed %d; want 1 and 1 (dc3 still owed)", n, o)
		}
		checkInvariants(t, h.f)
		sameState(t, h.f, restore(t, persist(t, h.f)))
	})
}
