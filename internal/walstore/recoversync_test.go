package walstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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
