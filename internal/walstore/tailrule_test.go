package walstore

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
)

// damageFn damages the last segment of a log written with writeDurable; it
// gets the segment's path and frames (frame i holds index i+1).
type damageFn func(t *testing.T, seg string, fs []frameInfo)

func flipRecord(i int) damageFn {
	return func(t *testing.T, seg string, fs []frameInfo) {
		flipByte(t, seg, fs[i-1].off+fs[i-1].size-2) // in the CRC: framing intact
	}
}

func cutInside(i int) damageFn {
	return func(t *testing.T, seg string, fs []frameInfo) {
		truncateFile(t, seg, int64(fs[i-1].off+fs[i-1].size/2))
	}
}

func both(a, b damageFn) damageFn {
	return func(t *testing.T, seg string, fs []frameInfo) { a(t, seg, fs); b(t, seg, fs) }
}

// TestTornTailRule pins the rule recovery applies to a damaged record in the
// last segment: it is cut (with every byte after it) only if it lies in the
// final batch, the only one whose fsync a crash can interrupt; damage in any
// earlier batch was durable, may have been acknowledged, and stops Open
// with a *CorruptError that changes nothing on disk.
func TestTornTailRule(t *testing.T) {
	tests := []struct {
		name         string
		n, batch     uint64
		damage       damageFn
		wantLast     uint64 // entries [1, wantLast] survive a repair
		wantCorrupt  int    // else: the index whose record Open must refuse
		extraGarbage bool
	}{
		// batches [1,4] ... [17,20]
		{name: "torn inside the final batch: its end cut off", n: 20, batch: 4, damage: cutInside(20), wantLast: 19},
		{name: "torn inside the final batch: a record in its middle", n: 20, batch: 4, damage: flipRecord(18), wantLast: 17},
		{name: "torn inside the final batch: its first record", n: 20, batch: 4, damage: flipRecord(17), wantLast: 16},
		{name: "damage in an earlier complete batch", n: 20, batch: 4, damage: flipRecord(6), wantCorrupt: 6},
		// The damaged record is the end of its batch and only one whole
		// batch follows: the batch-start mark of that batch is the proof.
		{name: "damage to the end of the batch before the final one", n: 12, batch: 3, damage: flipRecord(9), wantCorrupt: 9},
		{name: "damage to the next-to-last of single-entry batches", n: 10, batch: 1, damage: flipRecord(9), wantCorrupt: 9},
		{name: "damage in the last complete batch, a torn batch after it", n: 15, batch: 3,
			damage: both(cutInside(14), flipRecord(11)), wantCorrupt: 11},
		// Nothing after the damage proves that its batch was ever fsynced: a
		// crash before that fsync can persist the batch's pages in any order.
		{name: "damage in the last complete batch followed by nothing", n: 12, batch: 3, damage: flipRecord(11), wantLast: 10},
		{name: "garbage appended", n: 12, batch: 3, extraGarbage: true, wantLast: 12},
		{name: "garbage appended after a torn final batch", n: 12, batch: 3, damage: flipRecord(12), extraGarbage: true, wantLast: 11},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, 0, tc.n, tc.batch)
			seg := lastSegment(t, dir)
			fs := frames(t, seg)
			if uint64(len(fs)) != tc.n {
				t.Fatalf("segment holds %d records, want %d", len(fs), tc.n)
			}
			for i, f := range fs {
				if start := (uint64(i) % tc.batch) == 0; f.batchStart != start {
					t.Fatalf("record %d: batch start = %v, want %v", f.index, f.batchStart, start)
				}
			}
			if tc.damage != nil {
				tc.damage(t, seg, fs)
			}
			if tc.extraGarbage {
				appendFile(t, seg, []byte("\x07not a record, just bytes after the log"))
			}
			before := snapshotDir(t, filepath.Join(dir, segmentsDirName))
			sizeBefore := fileSize(t, seg)

			rec := newLogRecorder(t)
			s, err := Open(dir, Options{Logger: slog.New(rec)})
			if tc.wantCorrupt != 0 {
				if err == nil {
					_ = s.Close()
					t.Fatal("Open of a log damaged in a durable batch succeeded")
				}
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open = %v; want a *CorruptError matching ErrCorrupt", err)
				}
				if want := fs[tc.wantCorrupt-1].off; ce.Offset != int64(want) || ce.WalIndex != uint64(tc.wantCorrupt) {
					t.Fatalf("error names offset %d, wal index %d; want %d, %d", ce.Offset, ce.WalIndex, want, tc.wantCorrupt)
				}
				t.Logf("Open: %v", err)
				if after := snapshotDir(t, filepath.Join(dir, segmentsDirName)); after != before {
					t.Fatalf("Open changed the damaged log:\nbefore %s\nafter  %s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open = %v; want the torn tail cut", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			checkRange(t, s, 1, tc.wantLast)
			keep := fs[tc.wantLast-1].off + fs[tc.wantLast-1].size
			checkTornWarning(t, rec, sizeBefore-int64(keep))
			if got := fileSize(t, seg); got != int64(keep) {
				t.Fatalf("segment is %d bytes after the repair, want %d", got, keep)
			}
		})
	}
}
