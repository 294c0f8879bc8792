package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"
)

func TestLedgerTimeIsTheHighestAppliedStamp(t *testing.T) {
	h := newHarness(t)
	if got := h.f.LedgerTime(); got != 0 {
		t.Fatalf("empty FSM: ledger time %d, want 0", got)
	}
	r := reserve("acme", "k1", t0)
	steps := []struct {
		name string
		cmd  Command
		want int64
	}{
		{"reserve", r, t0},
		{"commit later", commit(r, t0+2*sec), t0 + 2*sec},
		{"a stamp behind does not lower it", reserve("acme", "k2", t0+sec), t0 + 2*sec},
		{"expire ahead", expire(t0 + 10*sec), t0 + 10*sec},
		{"an invalid command does not raise it", Reserve{Tenant: "acme", Key: "k3", JobID: "j", Now: t0 + 99*sec, ExpiresAt: t0, MaxEntries: 1}, t0 + 10*sec},
		{"reject", reject(reserve("acme", "k2", t0+sec), t0+11*sec, 429), t0 + 11*sec},
		{"a business outcome counts", reserve("acme", "k1", t0+12*sec), t0 + 12*sec},
	}
	for _, s := range steps {
		h.apply(s.cmd)
		if got := h.f.LedgerTime(); got != s.want {
			t.Fatalf("%s: ledger time %d, want %d", s.name, got, s.want)
		}
	}
	// Through a snapshot (version 2) and into a fresh FSM.
	if got := restore(t, persist(t, h.f)).LedgerTime(); got != t0+12*sec {
		t.Fatalf("restored ledger time %d, want %d", got, t0+12*sec)
	}
}

// toVersion1 rewrites a current snapshot as the version 1 this build still
// restores: no ledger_time nor seq_high in the header, entries without result_ttl (their
// last 8 bytes) and watermarks without their window (appendWatermarkV1).
func toVersion1(t *testing.T, snap []byte) []byte {
	t.Helper()
	body := snap[len(snapshotMagic)+1 : len(snap)-4]
	next := func() []byte {
		n, k := binary.Uvarint(body)
		if k <= 0 || uint64(len(body)-k) < n {
			t.Fatal("bad record")
		}
		r := body[k : k+int(n)]
		body = body[k+int(n):]
		return r
	}
	header := next()
	d := &decoder{b: header}
	_, entries, jobs, watermarks := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	headerV1 := d.off
	if d.err != nil {
		t.Fatal(d.err)
	}
	var out []byte
	out = append(out, snapshotMagic...)
	out = append(out, snapshotVersion1)
	put := func(r []byte) {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	put(header[:headerV1])
	for i := uint64(0); i < entries; i++ {
		r := next()
		put(r[:len(r)-9]) // no result_ttl (8 bytes), no confirmed (an empty list: 1 byte)
	}
	for i := uint64(0); i < jobs; i++ {
		put(next())
	}
	for i := uint64(0); i < watermarks; i++ {
		w := decodeWatermark(&decoder{b: next()}, snapshotVersion)
		put(appendWatermarkV1(nil, w))
	}
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

func TestRestoreVersion1DerivesLedgerTime(t *testing.T) {
	h := newHarness(t)
	r1, r2 := reserve("acme", "k1", t0), reserve("acme", "k2", t0+sec)
	h.must(r1, OutcomeReserved)
	h.must(r2, OutcomeReserved)
	h.must(commit(r1, t0+5*sec), OutcomeCommitted)
	h.must(expire(t0+7*sec), OutcomeExpired) // removes nothing: leaves no trace
	v1 := toVersion1(t, persist(t, h.f))
	g := newFSM(t, Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(v1))); err != nil {
		t.Fatalf("restore version 1: %v", err)
	}
	// The latest stamp the items hold: the Commit's (the Expire left none).
	if got := g.LedgerTime(); got != t0+5*sec {
		t.Fatalf("derived ledger time %d, want %d", got, t0+5*sec)
	}
	if e, ok := g.Entry("acme", "k1"); !ok || e.State != StateCommitted {
		t.Fatalf("entry after version-1 restore: %+v %v", e, ok)
	}
	// A corrupt version-1 snapshot is still refused, typed.
	v1[len(v1)-1] ^= 1
	if err := g.Restore(io.NopCloser(bytes.NewReader(v1))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("corrupt version 1: %v", err)
	}
}
