package ledger

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"
)

// An entry for dc1 and dc2 that expires before dc2 confirmed it leaves the
// entries (its key is free again) but stays owed, counted and charged, in
// snapshots and across a reopen of the disk store, until dc2 confirms it. It
// is not charged to the byte budgets (its entry's bytes are released).
func TestOwedEntryOutlivesItsTTL(t *testing.T) {
	for _, store := range stores {
		t.Run("store="+store, func(t *testing.T) {
			dir := t.TempDir()
			h := &harness{t: t}
			if store == "memory" {
				h.f = New(Options{})
			} else {
				f, err := Open(dir, Options{})
				if err != nil {
					t.Fatal(err)
				}
				h.f = f
			}
			r := reserve("t", "k", t0)
			r.Request.Datacenters = []string{"dc1", "dc2"}
			h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
			bytesAfter := h.f.Stats().Bytes - entryBytes(len(r.Request.Payload))
			if n := h.f.OutboxLen(); n != 1 {
				t.Fatalf("outbox holds %d, want 1", n)
			}
			h.must(expire(t0+sec+commitTTL), OutcomeExpired)
			h.noEntry("t", "k")
			owed := func(f *FSM) (out []string) {
				f.OwedMultiDatacenter(func(e Entry) bool {
					out = append(out, fmt.Sprintf("%s/%s/%s %v", e.Tenant, e.Key, e.JobID, e.Confirmed))
					return true
				})
				return out
			}
			want := "[t/k/" + r.JobID + " []]"
			if got := fmt.Sprint(owed(h.f)); got != want {
				t.Fatalf("owed after expiry: %s, want %s", got, want)
			}
			if n, b := h.f.OutboxLen(), h.f.Stats().Bytes; n != 1 || b != bytesAfter {
				t.Fatalf("outbox %d, bytes %d; want 1 and %d (the job's)", n, b, bytesAfter)
			}
			checkInvariants(t, h.f)

			// A snapshot holds it, on either store.
			snap := persist(t, h.f)
			for _, to := range stores {
				g := newHarnessOn(t, to)
				if err := g.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(owed(g.f)); got != want || g.f.OutboxLen() != 1 || g.f.Stats().Bytes != bytesAfter {
					t.Fatalf("restored on %s: owed %s, outbox %d, bytes %d", to, got, g.f.OutboxLen(), g.f.Stats().Bytes)
				}
				sameState(t, h.f, g.f)
			}
			if store == "disk" { // and a reopen of the store
				if err := h.f.Close(); err != nil {
					t.Fatal(err)
				}
				h.f = openFSM(t, dir, Options{})
				if got := fmt.Sprint(owed(h.f)); got != want || h.f.OutboxLen() != 1 {
					t.Fatalf("reopened: owed %s, outbox %d", got, h.f.OutboxLen())
				}
			}

			// The key is free for a new request meanwhile.
			r2 := reserve("t", "k", t0+sec+commitTTL+sec)
			r2.JobID = "job-2"
			h.must(admit(r2), OutcomeCommitted)
			// dc2's confirmation clears the owed entry.
			res := h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
			if res.Items[0].Outcome != OutcomeConfirmed {
				t.Fatalf("confirm: %v", res.Items[0].Outcome)
			}
			if got := owed(h.f); len(got) != 0 || h.f.OutboxLen() != 0 {
				t.Fatalf("after dc2 confirmed: owed %v, outbox %d", got, h.f.OutboxLen())
			}
			if e := h.entry("t", "k"); e.JobID != "job-2" {
				t.Fatalf("the new entry was touched: %+v", e)
			}
			checkInvariants(t, h.f)
			if store == "disk" {
				if err := h.f.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The same request sent again after its entry expired (owed) has the same job
// ID: a Confirm for it confirms the live entry and the owed one alike.
func TestConfirmReachesTheOwedEntryOfALiveJob(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		r := reserve("t", "k", t0)
		r.Request.Datacenters = []string{"dc1", "dc2"}
		h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
		h.must(expire(t0+sec+commitTTL), OutcomeExpired)
		again := r
		again.Now = t0 + 2*sec + commitTTL
		h.must(admitWith(again, reject(again, again.Now+1, 422)), OutcomeRejected)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 { // the job counted once
			t.Fatalf("outbox %d, owed %d; want 1 and 1", n, o)
		}
		res := h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
		if res.Items[0].Outcome != OutcomeConfirmed {
			t.Fatalf("confirm: %v", res.Items[0].Outcome)
		}
		if n := h.f.OutboxLen(); n != 0 {
			t.Fatalf("outbox %d after dc2 confirmed the job, want 0", n)
		}
	})
}

// A confirmation is of the job, not of one copy of it. With three
// datacenters, dc2 confirms the job, its entry expires (owed, dc3 not
// confirmed) and the key is sent again (a live entry of the same job, which
// no datacenter confirmed). Neither the live entry's expiry, which replaces
// the owed copy, nor dc3's Confirm, which clears it, may forget dc2's
// confirmation: the outbox would carry the job to dc2 again, and a dc2 past
// its retention would run it a second time.
func TestOwedCopyKeepsTheConfirmationsOfBoth(t *testing.T) {
	setup := func(h *harness) Reserve {
		r := reserve("t", "k", t0)
		r.Request.Datacenters = []string{"dc1", "dc2", "dc3"}
		h.must(admitWith(r, commit(r, t0+sec)), OutcomeCommitted)
		h.must(Confirm{Items: []Confirmation{{"t", "k", r.JobID, "dc2"}}}, OutcomeConfirmed)
		h.must(expire(t0+sec+commitTTL), OutcomeExpired)
		again := r
		again.Now = t0 + 2*sec + commitTTL
		h.must(admitWith(again, reject(again, again.Now+1, 422)), OutcomeRejected)
		if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 1 || o != 1 { // the job counted once
			h.t.Fatalf("outbox %d, owed %d; want 1 and 1", n, o)
		}
		return again
	}
	t.Run("live expires", func(t *testing.T) {
		onBoth(t, func(t *testing.T, h *harness) {
			again := setup(h)
			h.must(expire(again.Now+1+commitTTL), OutcomeExpired)
			h.noEntry("t", "k")
			e, ok := h.f.Owed("t", "k", again.JobID)
			if !ok || !reflect.DeepEqual(e.Confirmed, []string{"dc2"}) {
				t.Fatalf("owed after the live entry expired: %+v, %v; want confirmed by dc2", e.Confirmed, ok)
			}
			checkInvariants(t, h.f)
			sameState(t, h.f, restore(t, persist(t, h.f)))
			h.must(Confirm{Items: []Confirmation{{"t", "k", again.JobID, "dc3"}}}, OutcomeConfirmed)
			if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
				t.Fatalf("after dc3 confirmed: outbox %d, owed %d; want 0 and 0", n, o)
			}
		})
	})
	t.Run("owed cleared first", func(t *testing.T) {
		onBoth(t, func(t *testing.T, h *harness) {
			again := setup(h)
			res := h.must(Confirm{Items: []Confirmation{{"t", "k", again.JobID, "dc3"}}}, OutcomeConfirmed)
			if it := res.Items[0]; it.Outcome != OutcomeConfirmed || !reflect.DeepEqual(it.Entry.Confirmed, []string{"dc2", "dc3"}) {
				t.Fatalf("confirm of dc3: %v, confirmed %v; want confirmed by dc2 and dc3", it.Outcome, it.Entry.Confirmed)
			}
			if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
				t.Fatalf("after dc3 confirmed: outbox %d, owed %d; want 0 and 0", n, o)
			}
			checkInvariants(t, h.f)
			h.must(expire(again.Now+1+commitTTL), OutcomeExpired)
			h.noEntry("t", "k")
			if n, o := h.f.OutboxLen(), h.f.OwedLen(); n != 0 || o != 0 {
				t.Fatalf("after the live entry expired: outbox %d, owed %d; want 0 and 0", n, o)
			}
			checkInvariants(t, h.f)
		})
	})
}
