package walstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
)

// unsyncedBatch returns the wal frames of a StoreLogs batch of [from, to], as
// a writer appends them before its fsync.
func unsyncedBatch(from, to uint64) []byte {
	var b []byte
	for i := from; i <= to; i++ {
		rec := appendRecord(nil, testLog(i), i == from, i == to)
		b = append(append(b, frameLen(len(rec))...), rec...)
	}
	return b
}

// TestOpenSyncsWhatItRecovers: a process killed while it wrote a batch, or
// during the batch's fsync, leaves the batch whole in the page cache but
// perhaps not on disk. Open reads it as whole and serves it, and raft stores
// no entry it already holds (a follower answers an AppendEntries for it
// without a StoreLogs), so Open must fsync the last segment, and the
// directories that name it, before it returns: else those entries can be
// acknowledged and then lost at a power failure. With NoSync it does not.
//
// Failed before Open fsynced what it recovered.
func TestOpenSyncsWhatItRecovers(t *testing.T) {
	const n = 40
	for _, tc := range []struct {
		name string
		tail []byte // appended to the last segment without an fsync
		last uint64 // the last index Open finds
	}{
		{"a whole final batch never fsynced", unsyncedBatch(n+1, n+3), n + 3},
		{"a torn final batch", unsyncedBatch(n+1, n+3)[:20], n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, 300, n, 3)
			appendFile(t, lastSegment(t, dir), tc.tail)

			var synced []string
			s := open(t, dir, Options{SegmentSize: 300, Knobs: TestingKnobs{Fsync: func(f *os.File) error {
				synced = append(synced, f.Name())
				return f.Sync()
			}}})
			checkRange(t, s, 1, tc.last)
			for _, want := range []string{lastSegment(t, dir), filepath.Join(dir, segmentsDirName), dir} {
				if !slices.Contains(synced, want) {
					t.Errorf("Open fsynced %q, not %s", synced, want)
				}
			}
		})
	}
	t.Run("NoSync", func(t *testing.T) {
		dir := t.TempDir()
		writeDurable(t, dir, 300, n, 3)
		s := open(t, dir, Options{SegmentSize: 300, NoSync: true, Knobs: TestingKnobs{Fsync: func(f *os.File) error {
			t.Errorf("Open with NoSync fsynced %s", f.Name())
			return nil
		}}})
		checkRange(t, s, 1, n)
	})
}

// TestOpenFailsOnAFailedFsync: when the fsync of what Open recovered fails,
// the disk may not hold what the scan read (the page cache cannot be trusted
// after a failed fsync), so Open fails rather than serve it, and changes
// nothing that a later Open could not redo.
//
// Failed before Open fsynced what it recovered.
func TestOpenFailsOnAFailedFsync(t *testing.T) {
	const n = 40
	dir := t.TempDir()
	writeDurable(t, dir, 300, n, 3)
	appendFile(t, lastSegment(t, dir), unsyncedBatch(n+1, n+3))

	injected := errors.New("injected: fsync failed")
	s, err := Open(dir, Options{SegmentSize: 300, Knobs: TestingKnobs{Fsync: func(*os.File) error { return injected }}})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with a failing fsync succeeded")
	}
	if !errors.Is(err, injected) {
		t.Fatalf("Open with a failing fsync: %v, want the fsync's error", err)
	}
	checkRange(t, open(t, dir, Options{SegmentSize: 300}), 1, n+3)
}

// TestFailedFsyncDropsTheBatch: a batch whose fsync failed was never
// acknowledged, and the kernel may keep its bytes in the page cache, marked
// clean, with no error for the next fsync. StoreLogs cuts it off the last
// segment, so that a later Open (here after Close, whose own flush of the
// page cache succeeds) does not find it and treat it as durable: raft,
// which stores no entry it already holds, would then acknowledge it. Parts
// of the batch in segments the wal left (and fsynced) before the failure
// are durable and stay.
func TestFailedFsyncDropsTheBatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segSize  int
		durable  uint64 // [1, durable] stored before the failure, in batches of 2
		from, to uint64 // the batch whose fsync fails
	}{
		{"within the tail segment", 0, 10, 11, 13},
		{"across segments", 300, 20, 21, 40},
		{"first batch of a new log", 0, 0, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			injected := errors.New("injected: fsync failed")
			var fail atomic.Bool
			s := open(t, dir, Options{SegmentSize: tc.segSize, Knobs: TestingKnobs{Fsync: func(f *os.File) error {
				if fail.Load() {
					return injected
				}
				return f.Sync()
			}}})
			if tc.durable > 0 {
				storeBatches(t, s, 1, tc.durable, 2)
			}
			fail.Store(true)
			if err := s.StoreLogs(testLogs(tc.from, tc.to)); !errors.Is(err, injected) {
				t.Fatalf("StoreLogs with a failing fsync = %v, want the fsync's error", err)
			}
			checkRange(t, s, min(1, tc.durable), tc.durable)
			_ = s.Close() // a failed store may report the wal's state; the reopen is what matters

			s = open(t, dir, Options{SegmentSize: tc.segSize})
			last, err := s.LastIndex()
			if err != nil {
				t.Fatal(err)
			}
			if segs := segmentCount(t, dir); tc.segSize == 0 && last != tc.durable {
				t.Fatalf("after reopen the log ends at %d (%d segments), want %d: the failed batch was kept", last, segs, tc.durable)
			}
			if last < tc.durable {
				t.Fatalf("after reopen the log ends at %d, before the durable %d", last, tc.durable)
			}
			if last > 0 {
				checkRange(t, s, 1, last)
				for _, f := range frames(t, lastSegment(t, dir)) {
					if f.index > tc.durable {
						t.Fatalf("the last segment still holds index %d of the failed batch", f.index)
					}
				}
			}
		})
	}
}

// TestFailedFsyncKeepsDamagedDurableRecords: the cut after a failed fsync
// never reaches the entries already published. When one of them no longer
// parses (damage to durable data), nothing is cut: cutting there would
// drop acknowledged entries silently, where Open refuses the damage with a
// *CorruptError.
func TestFailedFsyncKeepsDamagedDurableRecords(t *testing.T) {
	dir := t.TempDir()
	injected := errors.New("injected: fsync failed")
	var fail atomic.Bool
	s := open(t, dir, Options{Knobs: TestingKnobs{Fsync: func(f *os.File) error {
		if fail.Load() {
			return injected
		}
		return f.Sync()
	}}})
	storeBatches(t, s, 1, 10, 2)
	seg := lastSegment(t, dir)
	fs := frames(t, seg)
	flipByte(t, seg, fs[4].off+fs[4].size-1) // index 5's CRC: a durable batch damaged
	published := fileSize(t, seg)
	fail.Store(true)
	if err := s.StoreLogs(testLogs(11, 13)); !errors.Is(err, injected) {
		t.Fatalf("StoreLogs with a failing fsync = %v, want the fsync's error", err)
	}
	_ = s.Close()
	if got := fileSize(t, seg); got < published {
		t.Fatalf("the failed batch's cut left %d bytes of the segment, want the %d of the published entries kept", got, published)
	}
	s2, err := Open(dir, Options{})
	if err == nil {
		_ = s2.Close()
	}
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Open after the damage = %v, want a *CorruptError", err)
	}
}
