package ledger

import (
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
