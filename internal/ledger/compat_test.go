package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/ledger/engine"
)

// relabel rewrites a snapshot's magic and version byte (and its CRC).
func relabel(snap []byte, magic string, version byte) []byte {
	b := bytes.Clone(snap[:len(snap)-4])
	copy(b, magic)
	b[len(snapshotMagic)] = version
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// A snapshot written by a build before 1.0 is refused by name, even the last
// one (version 6), whose records are byte for byte this format's: never
// misread. A later format version is refused as such.
func TestPreReleaseSnapshotIsRefused(t *testing.T) {
	h := newHarness(t)
	h.must(admitCommit(reserve(tenant, "k", t0)), OutcomeCommitted)
	snap := persist(t, h.f)
	for _, tc := range []struct {
		name       string
		magic      string
		version    byte
		preRelease bool
	}{
		{"pre-1.0 version 6", preReleaseMagic, 6, true},
		{"pre-1.0 version 1", preReleaseMagic, 1, true},
		{"a later version", snapshotMagic, FormatVersion + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newFSM(t, Options{}).Restore(io.NopCloser(bytes.NewReader(relabel(snap, tc.magic, tc.version))))
			var fe *FormatError
			if !errors.As(err, &fe) || fe.What != "snapshot" || fe.Version != uint64(tc.version) || fe.PreRelease != tc.preRelease ||
				!errors.Is(err, ErrSnapshotVersion) || errors.Is(err, ErrPreRelease) != tc.preRelease {
				t.Fatalf("restore: %v (%+v), want a FormatError of snapshot version %d", err, fe, tc.version)
			}
			if tc.preRelease && !strings.Contains(err.Error(), "pre-1.0") {
				t.Fatalf("the message %q does not say a pre-1.0 build wrote it", err)
			}
		})
	}
}

// A store written by a build before 1.0 (its counters begin with its format,
// 1 or 2) is refused by Open by name; a later format likewise.
func TestPreReleaseStoreIsRefused(t *testing.T) {
	diskPassOnly(t)
	for _, tc := range []struct {
		name       string
		counters   []byte
		version    uint64
		preRelease bool
	}{
		{"pre-1.0 format 1", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, true},
		{"pre-1.0 format 2", []byte{2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 2, true},
		{"a later format", append([]byte{storeTag, FormatVersion + 1}, storeMeta{}.append(nil)[2:]...), uint64(FormatVersion) + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := engine.Open(dir, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st.Begin()
			st.Set(metaKey, tc.counters)
			st.Commit()
			if err := st.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := st.Abandon(); err != nil {
				t.Fatal(err)
			}
			f, err := Open(dir, Options{})
			var fe *FormatError
			if f != nil || !errors.As(err, &fe) || fe.What != "store" || fe.Version != tc.version || fe.PreRelease != tc.preRelease ||
				!errors.Is(err, ErrStore) || errors.Is(err, ErrPreRelease) != tc.preRelease {
				t.Fatalf("open: %v (%+v), want a FormatError of store format %d", err, fe, tc.version)
			}
			if tc.preRelease && !strings.Contains(err.Error(), "store format "+string(rune('0'+tc.version))+" was written by a pre-1.0 build") {
				t.Fatalf("the message %q does not name the format and the pre-1.0 build", err)
			}
		})
	}
}

// The log of a build before 1.0 is not misread: an entry whose layout this
// format changed (more fields, or fewer) does not decode, an entry of
// another version halts the replica (HaltError) rather than being skipped,
// and so does a pre-1.0 Reserve, Commit or Reject of its own entry (types
// 0x01-0x03, an Admit's parts now, no command of the log).
func TestPreReleaseCommandsHalt(t *testing.T) {
	r := reserve(tenant, "k", t0)
	r.MaxWatermarks, r.MaxTenantWatermarks, r.MaxBytes, r.MaxTenantBytes, r.ResultTTL = 0, 0, 0, 0, 0
	c := commit(r, tCommit)
	// Pre-1.0 layouts labelled version 1: a Reserve without its bounds (four
	// uvarints and an int64), a Commit without capacity and queue (a uvarint,
	// an int64, a string and a bool), an Expire with max_watermarks, a Lease
	// without replay and max_bytes, a Complete without budgets.
	reserveV1 := append([]byte{0x01, 1}, r.appendBody(nil)[:len(r.appendBody(nil))-4-8]...)
	commitV1 := append([]byte{0x02, 1}, c.appendBody(nil)[:len(c.appendBody(nil))-(1+8+1+1)]...)
	expireV1 := append(Encode(Expire{Now: t0}), 0)
	lease := Encode(Lease{Tenant: tenant, Holder: "h", Max: 1, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2})
	complete := Encode(Complete{Tenant: tenant, JobID: "j", LeaseID: "l", Now: 1})
	for name, b := range map[string][]byte{
		"reserve v1":     reserveV1,
		"commit v1":      commitV1,
		"expire v1":      expireV1,
		"lease v1":       lease[:len(lease)-2],
		"complete v1":    complete[:len(complete)-2],
		"commit v3":      append([]byte{0x02, 3}, c.appendBody(nil)...),
		"reserve":        append([]byte{0x01, FormatVersion}, r.appendBody(nil)...),
		"reject":         append([]byte{0x03, FormatVersion}, reject(r, tCommit, 422).appendBody(nil)...),
		"lease v3":       append([]byte{byte(TypeLease), 3}, lease[2:]...),
		"reserve v2":     append([]byte{0x01, 2}, r.appendBody(nil)...),
		"admit v2":       append([]byte{byte(TypeAdmit), 2}, Encode(admit(r))[2:]...),
		"a later expire": append([]byte{byte(TypeExpire), FormatVersion + 1}, Encode(Expire{Now: t0})[2:]...),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			res := h.applyRaw(b)
			var he *HaltError
			if !errors.As(res.Err, &he) || (!errors.Is(res.Err, ErrMalformed) && !errors.Is(res.Err, ErrUnsupportedVersion) && !errors.Is(res.Err, ErrUnknownCommand)) {
				t.Fatalf("applied %x: %+v, want a halt", b, res)
			}
			if st := h.f.Stats(); st.AppliedIndex != 0 {
				t.Fatalf("applied index %d: the entry was applied", st.AppliedIndex)
			}
			out := h.f.ApplyBatch([]*raft.Log{{Index: h.idx + 1, Type: raft.LogCommand, Data: Encode(admit(r))}})
			if !errors.Is(out[0].(Result).Err, ErrHalted) {
				t.Fatalf("a later entry: %+v", out[0])
			}
		})
	}
}

// An entry of state 1 (PENDING before 1.0) is no state of this format: a
// snapshot holding one is refused, never read as an undecided entry.
func TestSnapshotWithAPendingEntryIsRefused(t *testing.T) {
	h := newHarness(t)
	r := reserve(tenant, "k", t0)
	h.must(admit(r), OutcomeCommitted)
	snap := persist(t, h.f)
	// The entry record begins tenant · key · fingerprint · state.
	prefix := appendString(appendString(appendString(nil, r.Tenant), r.Key), r.Fingerprint)
	at := bytes.Index(snap, append(bytes.Clone(prefix), byte(StateCommitted)))
	if at < 0 {
		t.Fatal("the entry record is not in the snapshot")
	}
	bad := bytes.Clone(snap)
	bad[at+len(prefix)] = 1
	bad = relabel(bad, snapshotMagic, FormatVersion) // the CRC again
	if err := newFSM(t, Options{}).Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restore of a PENDING entry: %v, want ErrBadSnapshot", err)
	}
	// The same bytes with the state left COMMITTED restore.
	if err := newFSM(t, Options{}).Restore(io.NopCloser(bytes.NewReader(relabel(snap, snapshotMagic, FormatVersion)))); err != nil {
		t.Fatalf("restore of the snapshot relabelled as it was: %v", err)
	}
}
