package ledger

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// TestTenantBytesAtTheEdges: a tenant's share is met exactly (an Admit that
// reaches it is admitted, one byte more is refused), a zero-length payload
// costs the overheads alone, many tenants are accounted apart, and the
// counters agree with a fresh count after refusals, expiry, a snapshot and
// restore and a restart from disk, where the same Admits are judged alike.
func TestTenantBytesAtTheEdges(t *testing.T) {
	const share = 4 * (EntryOverhead + JobOverhead) // four jobs of no payload
	withPayload := func(tenant, key string, n int, now int64) Reserve {
		r := reserve(tenant, key, now)
		r.Request.Payload = bytes.Repeat([]byte("x"), n)
		r.MaxTenantBytes = share
		return r
	}
	h := newHarness(t)
	// Three empty payloads and one that fills the share to the byte.
	for i := range 3 {
		h.must(admit(withPayload("t", fmt.Sprint("empty-", i), 0, t0)), OutcomeCommitted)
	}
	h.must(admit(withPayload("t", "over", 1, t0)), OutcomeTenantBytesFull)
	h.must(admit(withPayload("t", "exact", 0, t0)), OutcomeCommitted)
	if got := h.f.s.tenantBytes["t"]; got != share {
		t.Fatalf("tenant bytes %d, want exactly the share %d", got, share)
	}
	h.must(admit(withPayload("t", "more", 0, t0)), OutcomeTenantBytesFull)
	// A retry of an admitted key is answered while the share is full.
	h.must(admit(withPayload("t", "exact", 0, t0+sec)), OutcomeExists)
	// Many tenants: each has its own share.
	h.quietly(func() {
		for i := range 200 {
			h.must(admit(withPayload(fmt.Sprint("tenant-", i), "k", i, t0)), OutcomeCommitted)
		}
	})

	check := func(f *FSM, now int64) {
		t.Helper()
		checkInvariants(t, f)
		g := &harness{t: t, f: f, idx: f.Stats().AppliedIndex}
		g.must(admit(withPayload("t", "more", 0, now)), OutcomeTenantBytesFull)
		g.must(admit(withPayload("t", "exact", 0, now)), OutcomeExists)
	}
	snap := persist(t, h.f)
	check(restore(t, snap), t0+2*sec)
	dir := t.TempDir()
	d, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	check(openFSM(t, dir, Options{}), t0+2*sec)

	// Once the entries and the jobs are due, the same key is admitted: the
	// refused key succeeds once room is made, and the counters go to zero
	// for what left.
	late := t0 + jobTTL + sec
	h.must(admit(withPayload("t", "more", 0, late)), OutcomeCommitted)
	h.must(expire(late), OutcomeExpired)
	if got, want := h.f.s.tenantBytes["t"], uint64(EntryOverhead+JobOverhead); got != want {
		t.Fatalf("tenant bytes after expiry %d, want %d (the one live key)", got, want)
	}
	if _, ok := h.f.s.tenantBytes["tenant-7"]; ok {
		t.Fatalf("an expired tenant keeps a byte count: %v", h.f.s.tenantBytes["tenant-7"])
	}
}
