package walstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tidwall/wal"

	"github.com/once-dev/once/internal/logging"
)

// frameInfo locates one record in a segment file.
type frameInfo struct {
	off, size  int
	index      uint64
	batchEnd   bool
	batchStart bool
}

func frames(t testing.TB, path string) []frameInfo {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fs []frameInfo
	for off := 0; off < len(data); {
		rec, size, err := frameAt(data[off:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, off, err)
		}
		fs = append(fs, frameInfo{off, size, rec.index, rec.flags&flagBatchEnd != 0, rec.flags&flagBatchStart != 0})
		off += size
	}
	return fs
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func truncateFile(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func overwriteFile(t testing.TB, path string, off int, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t testing.TB, path string, off int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	overwriteFile(t, path, off, []byte{data[off] ^ 0x55})
}

// writeDurable writes [1, n] in batches of batch with fsync on and closes
// the store.
func writeDurable(t testing.TB, dir string, segSize int, n, batch uint64) {
	t.Helper()
	s := open(t, dir, Options{SegmentSize: segSize})
	storeBatches(t, s, 1, n, batch)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// openRecorded opens dir with a logger whose records the test can inspect.
func openRecorded(t testing.TB, dir string, segSize int) (*Store, *logRecorder) {
	t.Helper()
	rec := newLogRecorder(t)
	return open(t, dir, Options{SegmentSize: segSize, Logger: slog.New(rec)}), rec
}

// checkTornWarning asserts that Open logged the repair with the number of
// bytes it dropped.
func checkTornWarning(t testing.TB, rec *logRecorder, dropped int64) {
	t.Helper()
	attrs, ok := rec.find(slog.LevelWarn, "torn tail")
	if !ok {
		t.Fatal("no warning about the torn tail")
	}
	if got := attrs[logging.KeyDroppedBytes].Int64(); got != dropped {
		t.Fatalf("warning says %d bytes dropped, want %d", got, dropped)
	}
}

func TestTornTail(t *testing.T) {
	const n = 50
	lastFrame := int(frameSize(len(appendRecord(nil, testLog(n), false, true))))
	tests := []struct {
		name string
		cut  int // bytes cut off the end of the last segment
	}{
		{"one byte", 1},
		{"a few bytes", 3},
		{"half the record", lastFrame / 2},
		{"all but the length prefix", lastFrame - 1},
	}
	for _, tc := range tests {
		for _, segSize := range []int{0, 300} {
			t.Run(fmt.Sprintf("%s/segment=%d", tc.name, segSize), func(t *testing.T) {
				dir := t.TempDir()
				writeDurable(t, dir, segSize, n, 4)
				seg := lastSegment(t, dir)
				fs := frames(t, seg)
				if len(fs) == 0 || fs[len(fs)-1].index != n {
					t.Fatalf("last segment does not end with index %d: %+v", n, fs)
				}
				if segSize > 0 && segmentCount(t, dir) < 3 {
					t.Fatalf("only %d segments; the test wants several", segmentCount(t, dir))
				}
				truncateFile(t, seg, fileSize(t, seg)-int64(tc.cut))

				// tidwall/wal alone refuses this log: the repair is needed.
				if w, err := wal.Open(filepath.Join(dir, segmentsDirName), nil); !errors.Is(err, wal.ErrCorrupt) {
					if err == nil {
						_ = w.Close()
					}
					t.Fatalf("wal.Open of the torn log = %v, want wal.ErrCorrupt", err)
				}

				s, rec := openRecorded(t, dir, segSize)
				checkRange(t, s, 1, n-1)
				checkTornWarning(t, rec, int64(lastFrame-tc.cut))

				// Raft rewrites the lost entry; all of it survives a reopen.
				mustStore(t, s, testLogs(n, n+3))
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, rec = openRecorded(t, dir, segSize)
				checkRange(t, s, 1, n+3)
				if _, warned := rec.find(slog.LevelWarn, "torn tail"); warned {
					t.Fatal("a clean log was repaired again")
				}
			})
		}
	}
}

func TestGarbageTail(t *testing.T) {
	const n = 40
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 3000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	// A whole, valid record, but not the next index: left over from an
	// older incarnation of the file, say.
	stray := appendRecord(nil, testLog(n+5), true, true)
	stray = append(frameLen(len(stray)), stray...)
	tests := []struct {
		name    string
		garbage []byte
	}{
		{"random bytes", random},
		{"zeros (allocated, never written)", make([]byte, 4096)},
		{"one zero byte", []byte{0}},
		{"a stray record", stray},
		{"a stray record, torn", stray[:len(stray)-2]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, 0, n, 3)
			appendFile(t, lastSegment(t, dir), tc.garbage)

			s, rec := openRecorded(t, dir, 0)
			checkRange(t, s, 1, n)
			checkTornWarning(t, rec, int64(len(tc.garbage)))
			mustStore(t, s, testLogs(n+1, n+2))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkRange(t, open(t, dir, Options{}), 1, n+2)
		})
	}
}

func frameLen(n int) []byte {
	var b []byte
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

// TestTornFinalBatchOutOfOrder: a batch is one write(2), and a crash before
// its fsync may persist its pages in any order. Here the middle of the final
// batch is lost while its end made it to disk: recovery keeps the whole
// records before the hole and drops the rest of that batch, valid records
// included, because nothing after the hole proves it was ever durable.
func TestTornFinalBatchOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	writeDurable(t, dir, 0, 30, 10) // batches [1,10] [11,20] [21,30]
	seg := lastSegment(t, dir)
	fs := frames(t, seg)
	hole := fs[24]                                                                 // index 25
	overwriteFile(t, seg, hole.off, make([]byte, fs[26].off+fs[26].size-hole.off)) // 25..27 zeroed
	dropped := fileSize(t, seg) - int64(hole.off)

	s, rec := openRecorded(t, dir, 0)
	checkRange(t, s, 1, 24)
	checkTornWarning(t, rec, dropped)
}

func TestTornFirstBatch(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustStore(t, s, testLogs(1, 5))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	truncateFile(t, seg, int64(frames(t, seg)[0].size-1)) // not even the first record is whole

	s, rec := openRecorded(t, dir, 0)
	checkRange(t, s, 0, 0)
	if _, ok := rec.find(slog.LevelWarn, "torn tail"); !ok {
		t.Fatal("no warning about the torn tail")
	}
	mustStore(t, s, testLogs(77, 80)) // any first index again
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkRange(t, open(t, dir, Options{}), 77, 80)
}

// TestZeroFilledNewSegment: power loss just after tidwall/wal moved to a new
// segment in the final batch (it fsynced the one it left) can leave the new
// file with its size but not its data: zeros, which tidwall/wal itself reads
// as empty entries. The zeros are the torn final batch: cut, the new segment
// kept empty, every record of the earlier segments kept, and the log goes on
// in that segment. A first segment that is all zeros (a torn first batch) is
// an empty log. A guard: the scan judged both right when it was written.
func TestZeroFilledNewSegment(t *testing.T) {
	const segSize, n = 300, 30
	for _, zeros := range []int{1, 100, 4096} {
		t.Run(fmt.Sprintf("%d zero bytes", zeros), func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, segSize, n, 3)
			// writeDurable's last batch may have cycled to an empty new
			// segment; then that one is the file the zeros land in.
			segDir := filepath.Join(dir, segmentsDirName)
			last := lastSegment(t, dir)
			if fileSize(t, last) > 0 {
				last = filepath.Join(segDir, fmt.Sprintf("%020d", uint64(n+1)))
			}
			if err := os.WriteFile(last, make([]byte, zeros), 0o640); err != nil {
				t.Fatal(err)
			}
			s, rec := openRecorded(t, dir, segSize)
			checkRange(t, s, 1, n)
			checkTornWarning(t, rec, int64(zeros))
			if size := fileSize(t, last); size != 0 {
				t.Fatalf("new segment holds %d bytes after recovery, want 0", size)
			}
			mustStore(t, s, testLogs(n+1, n+3))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkRange(t, open(t, dir, Options{SegmentSize: segSize}), 1, n+3)
		})
	}
	t.Run("the first segment", func(t *testing.T) {
		dir := t.TempDir()
		segDir := filepath.Join(dir, segmentsDirName)
		if err := os.Mkdir(segDir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(segDir, fmt.Sprintf("%020d", 1)), make([]byte, 4096), 0o640); err != nil {
			t.Fatal(err)
		}
		s := open(t, dir, Options{})
		checkRange(t, s, 0, 0)
		mustStore(t, s, testLogs(9, 10))
		checkRange(t, s, 9, 10)
	})
}

// renameSegment renames seg as if its first record had wal index
// seg.index+by.
func renameSegment(t testing.TB, seg segmentFile, by uint64) {
	t.Helper()
	to := filepath.Join(filepath.Dir(seg.path), fmt.Sprintf("%020d", seg.index+by))
	if err := os.Rename(seg.path, to); err != nil {
		t.Fatal(err)
	}
}

// TestMidLogCorruption: damage to entries that were already durable is an
// error, not a repair, and Open leaves the files as they are.
func TestMidLogCorruption(t *testing.T) {
	const segSize = 400
	tests := []struct {
		name   string
		damage func(t *testing.T, segs []segmentFile)
	}{
		{"flipped byte in an older segment", func(t *testing.T, segs []segmentFile) {
			f := frames(t, segs[1].path)[1]
			flipByte(t, segs[1].path, f.off+f.size/2)
		}},
		{"older segment cut short", func(t *testing.T, segs []segmentFile) {
			truncateFile(t, segs[1].path, fileSize(t, segs[1].path)-3)
		}},
		{"older segment lost its last record", func(t *testing.T, segs []segmentFile) {
			fs := frames(t, segs[1].path)
			truncateFile(t, segs[1].path, int64(fs[len(fs)-1].off))
		}},
		{"older segment missing", func(t *testing.T, segs []segmentFile) {
			if err := os.Remove(segs[1].path); err != nil {
				t.Fatal(err)
			}
		}},
		// A segment's name is the wal index of its first record: a name that
		// disagrees with where the records before it end is damage (a lost
		// or misplaced file), not a torn tail, even for the last segment.
		{"last segment's name one index past its first record", func(t *testing.T, segs []segmentFile) {
			renameSegment(t, segs[len(segs)-1], 1)
		}},
		{"first segment's name one index past its first record", func(t *testing.T, segs []segmentFile) {
			renameSegment(t, segs[0], 1)
		}},
		{"flipped byte in an earlier batch of the last segment", func(t *testing.T, segs []segmentFile) {
			last := segs[len(segs)-1].path
			f := frames(t, last)[0]
			flipByte(t, last, f.off+f.size-2)
		}},
		{"zeroed length prefix in an earlier batch of the last segment", func(t *testing.T, segs []segmentFile) {
			last := segs[len(segs)-1].path
			f := frames(t, last)[0]
			overwriteFile(t, last, f.off, []byte{0})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeDurable(t, dir, segSize, 80, 2)
			segs, err := listSegments(filepath.Join(dir, segmentsDirName))
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) < 4 {
				t.Fatalf("only %d segments; the test wants several", len(segs))
			}
			if fs := frames(t, segs[len(segs)-1].path); len(fs) < 4 {
				t.Fatalf("last segment holds %d records; the test wants several batches", len(fs))
			}
			tc.damage(t, segs)
			before := snapshotDir(t, filepath.Join(dir, segmentsDirName))

			s, err := Open(dir, Options{SegmentSize: segSize, Logger: slog.New(newLogRecorder(t))})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open of a log damaged in the middle succeeded")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			t.Logf("Open: %v", err)
			if after := snapshotDir(t, filepath.Join(dir, segmentsDirName)); after != before {
				t.Fatalf("Open changed the damaged log:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// snapshotDir describes every file in dir by name, size and content hash.
func snapshotDir(t testing.TB, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%d:%08x ", e.Name(), len(data), crc32c(data))
	}
	return b.String()
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func mustCopy(t testing.TB, fsys fs.FS, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, fsys); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverCrashStates builds the directory states that a crash can leave
// at each step of a re-base or truncation and checks that Open lands on
// either the old or the new log.
func TestRecoverCrashStates(t *testing.T) {
	// Two logs to build states from: old is [1, 20], rebased is [500, 505].
	oldDir, newDir := t.TempDir(), t.TempDir()
	writeDurable(t, oldDir, 0, 20, 20)
	s := open(t, newDir, Options{})
	mustStore(t, s, testLogs(500, 505))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	oldSegs := os.DirFS(filepath.Join(oldDir, segmentsDirName))
	newSegs := os.DirFS(filepath.Join(newDir, segmentsDirName))

	tests := []struct {
		name        string
		build       func(t *testing.T, dir string)
		first, last uint64
	}{
		{"retired directory only (crash after the rename)", func(t *testing.T, dir string) {
			mustCopy(t, oldSegs, filepath.Join(dir, retiredDirName))
		}, 0, 0},
		{"retired and new directories (crash before deleting the old one)", func(t *testing.T, dir string) {
			mustCopy(t, oldSegs, filepath.Join(dir, retiredDirName))
			mustCopy(t, newSegs, filepath.Join(dir, segmentsDirName))
		}, 500, 505},
		{"empty segment directory (crash after creating it)", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, segmentsDirName), 0o750); err != nil {
				t.Fatal(err)
			}
		}, 0, 0},
		{"empty first segment (crash before the first write)", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, segmentsDirName), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, segmentsDirName, "00000000000000000001"), nil, 0o640); err != nil {
				t.Fatal(err)
			}
		}, 0, 0},
		{"stray temp file (crash before a truncation's rename)", func(t *testing.T, dir string) {
			mustCopy(t, oldSegs, filepath.Join(dir, segmentsDirName))
			if err := os.WriteFile(filepath.Join(dir, segmentsDirName, "00000000000000000001.END.TEMP"), []byte("partial"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, 1, 20},
		{"unfinished TruncateBack (.END segment)", func(t *testing.T, dir string) {
			segDir := filepath.Join(dir, segmentsDirName)
			mustCopy(t, oldSegs, segDir)
			seg := filepath.Join(segDir, "00000000000000000001")
			fs := frames(t, seg)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seg+endSuffix, data[:fs[11].off+fs[11].size], 0o640); err != nil {
				t.Fatal(err)
			}
		}, 1, 12},
		{"unfinished TruncateFront (.START segment)", func(t *testing.T, dir string) {
			segDir := filepath.Join(dir, segmentsDirName)
			mustCopy(t, oldSegs, segDir)
			seg := filepath.Join(segDir, "00000000000000000001")
			fs := frames(t, seg)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(segDir, "00000000000000000008"+startSuffix), data[fs[7].off:], 0o640); err != nil {
				t.Fatal(err)
			}
		}, 8, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.build(t, dir)
			s := open(t, dir, Options{})
			checkRange(t, s, tc.first, tc.last)
			if _, err := os.Stat(filepath.Join(dir, retiredDirName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("retired directory still there: %v", err)
			}
			ents, err := os.ReadDir(filepath.Join(dir, segmentsDirName))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			for _, e := range ents {
				if len(e.Name()) != segmentNameLen {
					t.Fatalf("leftover file %s", e.Name())
				}
			}
			// The log goes on from there and survives a reopen.
			next := tc.last + 1
			if tc.last == 0 {
				next = 900
			}
			mustStore(t, s, testLogs(next, next+1))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			first := tc.first
			if first == 0 {
				first = next
			}
			checkRange(t, open(t, dir, Options{}), first, next+1)
		})
	}
}

// TestRecoverInterruptedTruncations builds, in a log of several segments,
// the directory states a crash leaves at each step of tidwall/wal's
// TruncateBack (a follower's conflicting suffix) and TruncateFront
// (compaction): the kept part of the cut segment written as <name>.END or
// <index>.START, then the dropped segments deleted one by one, then the
// rename. Open must land on the truncated log (the .END/.START file exists:
// the cut took effect) with no leftover file, and go on from there. A guard:
// wal.Open finishes these, and recovery then scans and fsyncs the result.
func TestRecoverInterruptedTruncations(t *testing.T) {
	const segSize, n, cut = 200, 40, 15 // cut: the new last, or first, index
	src := t.TempDir()
	writeDurable(t, src, segSize, n, 4)
	srcSegs, err := listSegments(filepath.Join(src, segmentsDirName))
	if err != nil {
		t.Fatal(err)
	}
	at := slices.IndexFunc(srcSegs, func(s segmentFile) bool { return s.index > cut }) - 1 // the segment holding cut
	if at < 1 || at > len(srcSegs)-2 {
		t.Fatalf("index %d is in segment %d of %d; the test wants segments before and after it", cut, at, len(srcSegs))
	}
	seg := srcSegs[at]
	fs := frames(t, seg.path)
	data, err := os.ReadFile(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	k := int(cut - seg.index) // frame of index cut in seg
	endData := data[:fs[k].off+fs[k].size]
	startData := data[fs[k].off:]
	name := func(i uint64) string { return fmt.Sprintf("%020d", i) }

	tests := []struct {
		name        string
		extra       string // the .END or .START file
		content     []byte
		remove      []int // segments (by position) already deleted
		first, last uint64
	}{
		{"TruncateBack: .END written, nothing deleted yet", name(seg.index) + endSuffix, endData, nil, 1, cut},
		{"TruncateBack: the cut segment deleted", name(seg.index) + endSuffix, endData, []int{at}, 1, cut},
		{"TruncateBack: the cut segment and one after it deleted", name(seg.index) + endSuffix, endData, []int{at, at + 1}, 1, cut},
		{"TruncateFront: .START written, nothing deleted yet", name(cut) + startSuffix, startData, nil, cut, n},
		{"TruncateFront: the first segment deleted", name(cut) + startSuffix, startData, []int{0}, cut, n},
		{"TruncateFront: every segment up to the cut one deleted", name(cut) + startSuffix, startData, seqInts(0, at), cut, n},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segDir := filepath.Join(dir, segmentsDirName)
			mustCopy(t, os.DirFS(filepath.Join(src, segmentsDirName)), segDir)
			if err := os.WriteFile(filepath.Join(segDir, tc.extra), tc.content, 0o640); err != nil {
				t.Fatal(err)
			}
			for _, i := range tc.remove {
				if err := os.Remove(filepath.Join(segDir, filepath.Base(srcSegs[i].path))); err != nil {
					t.Fatal(err)
				}
			}
			s := open(t, dir, Options{SegmentSize: segSize})
			checkRange(t, s, tc.first, tc.last)
			ents, err := os.ReadDir(segDir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if len(e.Name()) != segmentNameLen {
					t.Fatalf("leftover file %s", e.Name())
				}
			}
			mustStore(t, s, testLogs(tc.last+1, tc.last+6))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkRange(t, open(t, dir, Options{SegmentSize: segSize}), tc.first, tc.last+6)
		})
	}
}

// seqInts returns [from, to].
func seqInts(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
