package walstore

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setVersion rewrites the version byte of record i (1-based) of seg to v and
// seals it with a matching checksum, as a build writing version v would have.
// clearStart also drops the batch-start flag, which pre-1.0 records lacked.
func setVersion(t *testing.T, seg string, fs []frameInfo, i int, v byte, clearStart bool) {
	t.Helper()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	f := fs[i-1]
	_, k := binary.Uvarint(data[f.off:])
	rec := data[f.off+k : f.off+f.size]
	body := rec[:len(rec)-crcSize]
	body[0] = v
	if clearStart {
		body[1] &^= flagBatchStart
	}
	binary.LittleEndian.PutUint32(rec[len(rec)-crcSize:], crc32c(body))
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// toPre10 rewrites every record of every segment of dir as a pre-1.0
// (version 1) record.
func toPre10(t *testing.T, dir string) {
	t.Helper()
	segs, err := listSegments(filepath.Join(dir, segmentsDirName))
	if err != nil {
		t.Fatal(err)
	}
	for _, seg := range segs {
		fs := frames(t, seg.path)
		for i := range fs {
			setVersion(t, seg.path, fs, i+1, recordVersionPre10, true)
		}
	}
}

// TestUnsupportedVersion pins that a whole record of a version this build
// does not read stops Open with a *VersionError matching
// ErrUnsupportedVersion, changes nothing on disk, and is never cut as a torn
// tail; a version byte that was damaged (its checksum no longer matches) is
// still damage, handled by the torn-tail rule.
func TestUnsupportedVersion(t *testing.T) {
	const n, batch = 12, 3
	tests := []struct {
		name        string
		segSize     int
		damage      func(t *testing.T, dir string)
		wantIndex   uint64 // wal index the error must name
		wantVersion byte
		wantLast    uint64 // else: entries [1, wantLast] survive a repair
	}{
		{name: "pre-1.0 log", damage: toPre10, wantIndex: 1, wantVersion: recordVersionPre10},
		{name: "pre-1.0 log in several segments", segSize: 200, damage: toPre10, wantIndex: 1, wantVersion: recordVersionPre10},
		{name: "pre-1.0 log with a torn final record", damage: func(t *testing.T, dir string) {
			seg := lastSegment(t, dir)
			fs := frames(t, seg) // the rewrite keeps every frame in place
			toPre10(t, dir)
			flipRecord(n)(t, seg, fs)
		}, wantIndex: 1, wantVersion: recordVersionPre10},
		// The final record of the final batch: were it taken for damage,
		// recovery would cut it as a torn tail.
		{name: "unknown version in the final record", damage: func(t *testing.T, dir string) {
			seg := lastSegment(t, dir)
			setVersion(t, seg, frames(t, seg), n, 3, false)
		}, wantIndex: n, wantVersion: 3},
		{name: "damaged version byte in the final record", damage: func(t *testing.T, dir string) {
			seg := lastSegment(t, dir)
			fs := frames(t, seg)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			_, k := binary.Uvarint(data[fs[n-1].off:]) // the frame's length prefix
			flipByte(t, seg, fs[n-1].off+k)
		}, wantLast: n - 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, tc.segSize, n, batch)
			if tc.segSize > 0 && segmentCount(t, dir) < 2 {
				t.Fatalf("only %d segment; the test wants several", segmentCount(t, dir))
			}
			tc.damage(t, dir)
			before := snapshotDir(t, filepath.Join(dir, segmentsDirName))

			s, err := Open(dir, Options{SegmentSize: tc.segSize})
			if tc.wantLast != 0 {
				if err != nil {
					t.Fatalf("Open = %v; want the damaged final record cut", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				checkRange(t, s, 1, tc.wantLast)
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatal("Open of a log with records of an unsupported version succeeded")
			}
			var ve *VersionError
			if !errors.As(err, &ve) || !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("Open = %v; want a *VersionError matching ErrUnsupportedVersion", err)
			}
			if errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v; a record of another version is not corruption", err)
			}
			if ve.Version != tc.wantVersion || ve.WalIndex != tc.wantIndex {
				t.Fatalf("error names version %d at wal index %d; want %d at %d", ve.Version, ve.WalIndex, tc.wantVersion, tc.wantIndex)
			}
			if tc.wantVersion == recordVersionPre10 && !strings.Contains(err.Error(), "pre-1.0") {
				t.Fatalf("error %q does not say the log is a pre-1.0 log", err)
			}
			t.Logf("Open: %v", err)
			if after := snapshotDir(t, filepath.Join(dir, segmentsDirName)); after != before {
				t.Fatalf("Open changed the log:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestParseRecordRefusesOtherVersions pins that parseRecord reads version 2
// only: the same record with version byte 1 and a matching checksum does not
// parse.
func TestParseRecordRefusesOtherVersions(t *testing.T) {
	rec := appendRecord(nil, testLog(7), true, true)
	if _, err := parseRecord(rec); err != nil {
		t.Fatalf("parseRecord of a version %d record: %v", recordVersion, err)
	}
	body := rec[:len(rec)-crcSize]
	body[0], body[1] = recordVersionPre10, body[1]&^flagBatchStart
	binary.LittleEndian.PutUint32(rec[len(rec)-crcSize:], crc32c(body))
	var ve errVersion
	if _, err := parseRecord(rec); !errors.As(err, &ve) || byte(ve) != recordVersionPre10 {
		t.Fatalf("parseRecord of a version 1 record = %v; want errVersion(1)", err)
	}
	if !sealedRecord(rec) {
		t.Fatal("sealedRecord rejects a record whose checksum matches")
	}
}
