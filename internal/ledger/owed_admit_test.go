package ledger

import (
	"bytes"
	"io"
	"reflect"
	"testing"
)

// owedEntries lists f's owed entries in order.
func owedEntries(f *FSM) (out []Entry) {
	f.OwedMultiDatacenter(func(e Entry) bool {
		out = append(out, e)
		return true
	})
	return out
}

// A multi-datacenter job admitted (Admit) is carried and, once its entry
// expires unconfirmed, owed: the owed entry and counts are kept in snapshots
// on either store.
func TestAdmitOwes(t *testing.T) {
	for _, store := range stores {
		t.Run("store="+store, func(t *testing.T) {
			r := reserve("t", "k", t0)
			r.Request.Datacenters = []string{"dc1", "dc2"}
			one := newHarnessOn(t, store)
			one.must(admitCommit(r), OutcomeCommitted)
			for name, h := range map[string]*harness{"admit": one} {
				if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 0 {
					t.Fatalf("%s: outbox %d, owed %d; want 1 and 0", name, n, o)
				}
				h.must(expire(t0+commitTTL), OutcomeExpired)
				h.noEntry("t", "k")
				if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 {
					t.Fatalf("%s after expiry: outbox %d, owed %d; want 1 and 1", name, n, o)
				}
				checkInvariants(t, h.f)
			}
			if e, ok := one.f.Owed("t", "k", r.JobID); !ok || e.JobID != r.JobID {
				t.Fatalf("Owed(t, k, %s) = %+v, %v; want the owed entry", r.JobID, e, ok)
			}
			if _, ok := one.f.Owed("t", "k", "another-job"); ok {
				t.Fatal("Owed found an entry under another job ID")
			}
			if a := owedEntries(one.f); len(a) != 1 || a[0].JobID != r.JobID || a[0].Key != "k" || !reflect.DeepEqual(a[0].Request.Datacenters, r.Request.Datacenters) {
				t.Fatalf("owed after an admit %+v", a)
			}
			snap := persist(t, one.f)
			for _, to := range stores {
				g := newHarnessOn(t, to)
				if err := g.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
					t.Fatal(err)
				}
				sameState(t, one.f, g.f)
				if !bytes.Equal(persist(t, g.f), snap) {
					t.Fatalf("restored on %s: persists other bytes", to)
				}
			}
			one.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
			if n := one.f.OutboxLen(); n != 0 {
				t.Fatalf("outbox %d after dc2 confirmed, want 0", n)
			}
			checkInvariants(t, one.f)
		})
	}
}

// An Admit of a key whose multi-datacenter entry is due removes that entry
// (relief, no Expire in between) and keeps it owed; the new entry of the same
// request (the same job ID) is carried too, and one Confirm of dc2 clears both.
// An Admit that rejects a multi-datacenter job is carried and owed alike.
func TestAdmitOverADueEntryKeepsItOwed(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		r := reserve("t", "k", t0)
		r.Request.Datacenters = []string{"dc1", "dc2"}
		h.must(admitCommit(r), OutcomeCommitted)
		again := r
		again.Now = t0 + commitTTL + sec
		res := h.must(Admit{Reserve: again, Outcome: reject(again, again.Now, 422)}, OutcomeRejected)
		if res.Removed.Committed != 1 {
			t.Fatalf("the admit removed %+v, want the due committed entry", res.Removed)
		}
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 { // the job counted once
			t.Fatalf("outbox %d, owed %d; want 1 and 1", n, o)
		}
		checkInvariants(t, h.f)
		g := restore(t, persist(t, h.f))
		sameState(t, h.f, g)
		h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
			t.Fatalf("after dc2 confirmed: outbox %d, owed %d; want 0 and 0", n, o)
		}
		checkInvariants(t, h.f)
	})
}

// A claim names only its home: the outbox never carries it, and neither its
// expiry nor its release leaves anything owed. A claim over a key whose
// multi-datacenter entry is owed leaves the owed entry as it is, and a Confirm
// of the owed job still reaches it past the claim (another job ID).
func TestClaimIsNeverOwed(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		c := claimOf(reserve("t", "c", t0), "dc2", t0)
		h.must(c, OutcomeClaimed)
		if n := h.f.OutboxLen(); n != 0 {
			t.Fatalf("a claim is carried: outbox %d", n)
		}
		h.must(Release{Tenant: "t", Key: "c", Fingerprint: c.Fingerprint, Home: "dc2", Now: t0 + 1}, OutcomeReleased)
		h.must(claimOf(reserve("t", "c2", t0), "dc2", t0), OutcomeClaimed)
		h.must(expire(t0+commitTTL), OutcomeExpired)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
			t.Fatalf("after a release and an expiry of claims: outbox %d, owed %d", n, o)
		}

		r := reserve("t", "k", t0+commitTTL)
		r.Request.Datacenters = []string{"dc1", "dc2"}
		h.must(admitCommit(r), OutcomeCommitted)
		h.must(expire(r.Now+commitTTL), OutcomeExpired)
		other := reserve("t", "k", r.Now+commitTTL+sec)
		other.JobID = "job-of-dc3"
		h.must(claimOf(other, "dc3", other.Now), OutcomeClaimed)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 {
			t.Fatalf("a claim over an owed key: outbox %d, owed %d; want 1 and 1", n, o)
		}
		checkInvariants(t, h.f)
		sameState(t, h.f, restore(t, persist(t, h.f)))
		h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
			t.Fatalf("after dc2 confirmed: outbox %d, owed %d", n, o)
		}
		if e := h.entry("t", "k"); e.State != StateClaimed || e.JobID != "job-of-dc3" {
			t.Fatalf("the claim was touched: %+v", e)
		}
		checkInvariants(t, h.f)
	})
}
