package ledger

import (
	"reflect"
	"testing"
)

func claimOf(r Reserve, home string, now int64) Claim {
	return Claim{Tenant: r.Tenant, Key: r.Key, Fingerprint: r.Fingerprint, JobID: r.JobID, Home: home,
		Type: r.Request.Type, Now: now, ExpiresAt: now + commitTTL, MaxEntries: 1000}
}

// A claim holds the key for another datacenter's job: a Reserve of the key
// finds it, no job is made, it survives a snapshot, it is released only by
// its own home and fingerprint, and it expires with its key.
func TestClaim(t *testing.T) {
	h := newHarness(t)
	r := reserve("t", "k", t0)
	c := claimOf(r, "dc1", t0)
	res := h.must(c, OutcomeClaimed)
	if res.Entry.State != StateClaimed || res.Entry.Home() != "dc1" || res.Entry.JobID != r.JobID {
		t.Fatalf("claimed entry %+v", res.Entry)
	}
	h.must(claimOf(r, "dc1", t0+1), OutcomeExists)
	if res := h.must(claimOf(r, "dc3", t0+1), OutcomeExists); res.Entry.Home() != "dc1" {
		t.Fatalf("another home's claim found home %q", res.Entry.Home())
	}
	other := c
	other.Fingerprint = "another"
	h.must(other, OutcomeKeyReused)
	if res := h.must(admit(r), OutcomeExists); res.Entry.State != StateClaimed || res.Job.ID != "" {
		t.Fatalf("reserve over a claim: %+v", res)
	}
	if st := h.f.Stats(); st.Claimed != 1 || st.Entries != 1 || st.Jobs != 0 {
		t.Fatalf("stats %+v", st)
	}

	// A snapshot keeps it.
	g := restore(t, persist(t, h.f))
	if e, ok := g.Entry("t", "k"); !ok || !reflect.DeepEqual(e, h.entry("t", "k")) {
		t.Fatalf("restored %+v, %v", e, ok)
	}

	// Release: only the claim's own home and fingerprint.
	h.must(Release{Tenant: "t", Key: "k", Fingerprint: r.Fingerprint, Home: "dc3", Now: t0 + 2}, OutcomeUnchanged)
	h.must(Release{Tenant: "t", Key: "k", Fingerprint: "another", Home: "dc1", Now: t0 + 2}, OutcomeUnchanged)
	h.must(Release{Tenant: "t", Key: "k", Fingerprint: r.Fingerprint, Home: "dc1", Now: t0 + 2}, OutcomeReleased)
	h.noEntry("t", "k")
	h.must(Release{Tenant: "t", Key: "k", Fingerprint: r.Fingerprint, Home: "dc1", Now: t0 + 3}, OutcomeNotFound)
	r.Now = t0 + 3
	h.must(admit(r), OutcomeCommitted)
	h.must(Release{Tenant: "t", Key: "k", Fingerprint: r.Fingerprint, Home: "dc1", Now: t0 + 4}, OutcomeUnchanged)

	// Expiry.
	c2 := claimOf(reserve("t", "k2", t0), "dc2", t0)
	h.must(c2, OutcomeClaimed)
	res = h.must(expire(c2.ExpiresAt), OutcomeExpired)
	if res.Removed.Claimed != 1 {
		t.Fatalf("expire removed %+v", res.Removed)
	}
	h.noEntry("t", "k2")
}

// Claims of one request converge on the home that sorts first: a claim for
// a home that sorts before the held claim's replaces it; one for a home that
// sorts after it, one of another request, and one meeting the datacenter's
// own entry change nothing.
func TestClaimGivesWayToAnEarlierHome(t *testing.T) {
	h := newHarness(t)
	r := reserve("t", "k", t0)
	h.must(claimOf(r, "dc3", t0), OutcomeClaimed)
	other := claimOf(r, "dc1", t0+1)
	other.Fingerprint = "another"
	if res := h.must(other, OutcomeKeyReused); res.Entry.Home() != "dc3" {
		t.Fatalf("another request's claim changed the home to %q", res.Entry.Home())
	}
	res := h.must(claimOf(r, "dc2", t0+1), OutcomeClaimed)
	if res.Entry.Home() != "dc2" || res.Removed.Claimed != 1 {
		t.Fatalf("dc2's claim over dc3's: %+v", res)
	}
	if res := h.must(claimOf(r, "dc3", t0+2), OutcomeExists); res.Entry.Home() != "dc2" {
		t.Fatalf("dc3's claim over dc2's: home %q", res.Entry.Home())
	}
	if st := h.f.Stats(); st.Claimed != 1 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The datacenter's own entry never gives way.
	own := reserve("t", "own", t0)
	h.must(admit(own), OutcomeCommitted)
	if res := h.must(claimOf(own, "dc1", t0+1), OutcomeExists); res.Entry.State != StateCommitted {
		t.Fatalf("a claim over the datacenter's own entry: %+v", res.Entry)
	}
}

// Claims count against the entry bound like any entry.
func TestClaimBounds(t *testing.T) {
	h := newHarness(t)
	a := claimOf(reserve("t", "a", t0), "dc1", t0)
	a.MaxEntries = 1
	h.must(a, OutcomeClaimed)
	b := claimOf(reserve("t", "b", t0), "dc1", t0)
	b.MaxEntries = 1
	h.must(b, OutcomeFull)
	b.Now = a.ExpiresAt // a is due: relief removes it
	b.ExpiresAt = b.Now + commitTTL
	h.must(b, OutcomeClaimed)
	for _, c := range []Command{
		Claim{Tenant: "t", Key: "x", JobID: "j", Now: 1, ExpiresAt: 2, MaxEntries: 1},
		Claim{Tenant: "t", Key: "x", JobID: "j", Home: "dc1", Now: 2, ExpiresAt: 2, MaxEntries: 1},
		Release{Tenant: "t", Key: "x"},
	} {
		h.must(c, OutcomeInvalid)
	}
}

func TestClaimEncoding(t *testing.T) {
	for _, c := range []Command{
		Claim{Tenant: "t", Key: "k", Fingerprint: "f", JobID: "j", Home: "dc2", Type: "demo", Now: 5, ExpiresAt: 9,
			MaxEntries: 3, MaxBytes: 4, MaxTenantBytes: 5},
		Release{Tenant: "t", Key: "k", Fingerprint: "f", Home: "dc2", Now: 7},
	} {
		got, err := DecodeCommand(Encode(c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%T: decoded %+v, %v", c, got, err)
		}
	}
}

// A claim that would replace another home's claim but is refused by a bound
// (the ledger holds more than the bound it carries: a leader with a lower
// IDEMPOTENCY_LEDGER_MAX_ENTRIES or tenant budget) changes nothing: the held
// claim stays, so the key is never left held by neither home.
func TestRefusedClaimKeepsTheClaimItWouldReplace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound func(c *Claim)
		want  Outcome
	}{
		{"entries", func(c *Claim) { c.MaxEntries = 1 }, OutcomeFull},
		{"tenant bytes", func(c *Claim) { c.MaxTenantBytes = entryBytes(0) }, OutcomeTenantBytesFull},
		{"bytes", func(c *Claim) { c.MaxBytes = entryBytes(0) }, OutcomeBytesFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			r := reserve("t", "k", t0)
			h.must(claimOf(r, "dc3", t0), OutcomeClaimed)
			h.must(claimOf(reserve("t", "other", t0), "dc3", t0), OutcomeClaimed) // live: no relief
			before := dumpTables(h.f)
			c := claimOf(r, "dc2", t0+1)
			tc.bound(&c)
			res := h.must(c, tc.want)
			if res.Removed != (Removed{}) {
				t.Errorf("a refused claim removed %+v", res.Removed)
			}
			if e := h.entry("t", "k"); e.State != StateClaimed || e.Home() != "dc3" {
				t.Fatalf("after a refused claim the key holds %+v, want dc3's claim", e)
			}
			if !reflect.DeepEqual(before, dumpTables(h.f)) {
				t.Fatal("a refused claim changed the tables")
			}
			// Within the bound it replaces the claim (no room needed: it frees
			// the entry it fills).
			c = claimOf(r, "dc2", t0+2)
			c.MaxEntries = 2
			if res := h.must(c, OutcomeClaimed); res.Entry.Home() != "dc2" || res.Removed.Claimed != 1 {
				t.Fatalf("dc2's claim within the bound: %+v", res)
			}
		})
	}
}
