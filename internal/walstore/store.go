// Package walstore is the manager's Raft log store: a raft.LogStore and
// raft.MonotonicLogStore over github.com/tidwall/wal.
//
// It handles what hashicorp/raft really does to a log:
//
//   - StoreLogs appends a batch of consecutive entries: one wal WriteBatch and,
//     unless Options.NoSync, one fsync per batch.
//   - DeleteRange deletes a suffix on a conflict (wal TruncateBack), a prefix on
//     compaction (wal TruncateFront), or the whole log after a snapshot install
//     or restore. tidwall/wal cannot empty a log and then restart it at another
//     index, so emptying retires the whole segment directory with one atomic
//     rename and the next StoreLogs starts a new one at any index (re-base).
//   - After a crash, a torn final write is cut off the last segment (with a
//     warning) instead of refusing to boot; damage to data that was already
//     durable, i.e. in any batch but the final one, is reported as
//     ErrCorrupt instead of being dropped (the torn-tail rule, scan.go).
//
// Raft indexes do not start at 1 but wal indexes do: raft index = base + wal
// index - 1. Every record carries its raft index, so base is derived from the
// first record on open and there is no metadata file to keep in step.
//
// See docs/storage.md for the on-disk layout and the crash-safety argument.
package walstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/tidwall/wal"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/logging"
)

// Errors returned by the store. Each is wrapped with context; match them
// with errors.Is.
var (
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("walstore: closed")
	// ErrOutOfOrder: StoreLogs got entries that are not consecutive, or do
	// not continue the log at LastIndex()+1 (which does not wrap past the
	// largest index to 0). Nothing was written.
	ErrOutOfOrder = errors.New("walstore: log entries out of order")
	// ErrGap: DeleteRange would leave a hole in the middle of the log, which
	// a monotonic log cannot hold (raft never asks for it). Nothing changed.
	ErrGap = errors.New("walstore: delete range would leave a gap")
	// ErrCorrupt: a record that was already durable is damaged (bad framing,
	// checksum, or index), or the segment files do not fit together. Open
	// returns it (for a damaged record, as a *CorruptError that tells the
	// operator what to do) instead of dropping entries that may have been
	// acknowledged; GetLog returns it for a record that does not decode.
	ErrCorrupt = errors.New("walstore: log corrupt")
	// ErrUnsupportedVersion: the log holds a whole record of a version this
	// build does not read (a pre-1.0 log, or one written by a newer build).
	// Open returns it as a *VersionError and changes nothing on disk.
	ErrUnsupportedVersion = errors.New("walstore: unsupported record version")
	// ErrFailed: an earlier write, fsync or truncation failed part-way. The
	// in-memory view may no longer match the disk, so the store refuses all
	// further changes; close it and open it again (recovery repairs the tail).
	// A prefix or suffix truncation that fails before it takes effect (see
	// truncate) is not such a failure: its error is returned, nothing
	// changed, and the next DeleteRange tries again.
	// A failed write or fsync of a batch cuts that batch off the last
	// segment first, so that Open does not read it back from the page cache
	// (where it may stay, marked clean, without ever reaching the disk) and
	// take it as durable.
	ErrFailed = errors.New("walstore: failed, reopen to recover")
	// ErrInvalidOptions: Options holds an unusable value.
	ErrInvalidOptions = errors.New("walstore: invalid options")
	// ErrLocked: another open store, in this process or another, holds the
	// directory. Open changes nothing on disk: its recovery (cutting a torn
	// tail, retiring a log without a whole record) would otherwise act on a
	// log that the other store is writing, and could drop what it
	// acknowledges.
	ErrLocked = errors.New("walstore: locked by another open store")
)

// DefaultSegmentSize is the target size of a wal segment file. A prefix
// compaction rewrites the segment that holds the new first entry, so smaller
// segments make compaction cheaper; tidwall/wal's own default is 20 MiB.
const DefaultSegmentSize = 4 << 20

// Directory names under the store's directory.
const (
	// segmentsDirName holds the tidwall/wal segment files.
	segmentsDirName = "segments"
	// retiredDirName is segmentsDirName after the log was emptied; it is
	// deleted right away, or on the next Open after a crash.
	retiredDirName = "segments.retired"
	// lockFileName is the file an open store holds an exclusive flock on.
	lockFileName = "LOCK"
)

// Options configure a Store.
type Options struct {
	// NoSync skips every fsync. For tests and benchmarks only: a crash can
	// then lose acknowledged entries. The default (false) is durable.
	NoSync bool
	// Logger receives warnings (a torn tail dropped on open) and errors. Nil
	// discards them.
	Logger *slog.Logger
	// SegmentSize is the target size of a segment file in bytes; 0 means
	// DefaultSegmentSize.
	SegmentSize int
	// Knobs are for tests only (TestingKnobs).
	Knobs TestingKnobs
}

// TestingKnobs are hooks for tests only (CockroachDB's TestingKnobs
// pattern: passed in Options, zero in production).
type TestingKnobs struct {
	// Fsync, when set, replaces (*os.File).Sync for the fsyncs Open does
	// before it trusts what it read and for the fsyncs of the segment files
	// StoreLogs writes (tests observe and fail them).
	Fsync func(*os.File) error
}

// Store is a raft.LogStore over tidwall/wal. It is safe for concurrent use:
// raft reads (GetLog, FirstIndex, LastIndex) while it writes.
type Store struct {
	dir    string   // the store's directory
	segDir string   // dir/segments
	lock   *os.File // holds the directory's lock until Close
	opts   Options
	logger *slog.Logger

	// writeMu serialises StoreLogs, DeleteRange and Close. The fields below
	// are used only with writeMu held.
	writeMu  sync.Mutex
	batch    wal.Batch
	scratch  []byte
	tail     *os.File // a handle on the wal's last segment, for fsync (nil with NoSync)
	tailSize int64    // tail's size after the last batch
	failed   error    // first failed change; see ErrFailed

	// mu guards the published view of the log. Writers change it with both
	// writeMu and mu held; readers hold mu.RLock.
	mu     sync.RWMutex
	w      *wal.Log // nil while the log is empty
	base   uint64   // raft index of wal index 1
	empty  bool     // no entries; first and last are then 0
	first  uint64
	last   uint64
	closed bool

	// readMu serialises wal reads: tidwall/wal loads older segments into its
	// cache under its read lock, so two concurrent Reads would race.
	readMu sync.Mutex
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
	_ io.Closer              = (*Store)(nil)
)

// Open opens the log store in dir, creating dir if needed, and recovers it:
// it finishes an interrupted truncation or re-base, checks every record, and
// cuts a torn final write off the last segment (logging a warning). It
// returns an error wrapping ErrCorrupt if data that was already durable is
// damaged, and one wrapping ErrUnsupportedVersion if a record is of a version
// this build does not read; either way it changes nothing on disk. The store
// holds an exclusive lock on dir until Close: while another store holds it,
// Open returns an error wrapping ErrLocked and changes nothing.
func Open(dir string, opts Options) (*Store, error) {
	if opts.SegmentSize < 0 {
		return nil, fmt.Errorf("%w: SegmentSize %d: must be 0 (default) or positive", ErrInvalidOptions, opts.SegmentSize)
	}
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if err := atomicfile.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("walstore: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("walstore: lock %s: %w", dir, err)
	}
	s := &Store{
		dir:    dir,
		segDir: filepath.Join(dir, segmentsDirName),
		lock:   lock,
		opts:   opts,
		logger: logging.OrDiscard(opts.Logger).With(logging.KeyDir, dir),
		empty:  true,
	}
	if err := s.recover(); err != nil {
		_ = lock.Close() // releases the lock; recover's error is the one that matters
		return nil, err
	}
	return s, nil
}

func (s *Store) walOptions() *wal.Options {
	// A fresh value each time: wal.Open writes defaults into it.
	return &wal.Options{
		// The store fsyncs itself, outside the wal's lock, so that readers
		// are not blocked for the duration of an fsync. tidwall/wal still
		// fsyncs a segment when it moves on to the next one, and its
		// truncations fsync the file they write.
		NoSync:           true,
		SegmentSize:      s.opts.SegmentSize,
		LogFormat:        wal.Binary,
		SegmentCacheSize: 2,
		// Read returns a slice of the segment buffer; GetLog decodes it into
		// fresh memory at once. Buffers are replaced, never rewritten.
		NoCopy:    true,
		DirPerms:  0o750,
		FilePerms: 0o640,
	}
}

// recover brings the directory to a consistent state and loads it. It runs
// before the store is shared, so it takes no locks.
func (s *Store) recover() error {
	// A retired segment directory is garbage: the re-base that renamed it
	// had committed.
	retired := filepath.Join(s.dir, retiredDirName)
	if _, err := os.Stat(retired); err == nil {
		if err := os.RemoveAll(retired); err != nil {
			return fmt.Errorf("walstore: remove %s: %w", retired, err)
		}
		if err := s.syncDir(s.dir); err != nil {
			return err
		}
	}
	if _, err := os.Stat(s.segDir); errors.Is(err, os.ErrNotExist) {
		return nil // empty log
	} else if err != nil {
		return fmt.Errorf("walstore: %w", err)
	}
	if err := removeTempFiles(s.segDir); err != nil {
		return fmt.Errorf("walstore: clean %s: %w", s.segDir, err)
	}

	// wal.Open finishes an interrupted TruncateFront/TruncateBack (.START /
	// .END segments). It fails with ErrCorrupt when the last segment ends in
	// a partial frame (or ErrEmptyLog if that leaves no entry); the scan
	// below finds and cuts that tail.
	w, err := wal.Open(s.segDir, s.walOptions())
	if err != nil {
		if !errors.Is(err, wal.ErrCorrupt) && !errors.Is(err, wal.ErrEmptyLog) {
			return fmt.Errorf("walstore: open %s: %w", s.segDir, err)
		}
		if pending, perr := hasPendingTruncation(s.segDir); perr != nil || pending {
			return fmt.Errorf("%w: %s: unfinished truncation: %w", ErrCorrupt, s.segDir, errors.Join(err, perr))
		}
		w = nil
	}
	closeWAL := func() {
		if w != nil {
			_ = w.Close() // read-only so far; the scan's verdict is the error that matters
			w = nil
		}
	}

	res, err := scanSegments(s.segDir)
	if err != nil {
		closeWAL()
		return err
	}
	if t := res.torn; t != nil {
		closeWAL() // the wal holds the tail open at its old end
		if err := repairTail(t); err != nil {
			return fmt.Errorf("walstore: cut torn tail of %s: %w", t.path, err)
		}
		var last uint64 // raft index of the last entry kept, 0 if none
		if res.entries > 0 {
			last = res.base + res.walFirst + res.entries - 2
		}
		s.logger.Warn("walstore: dropped the torn tail of the last segment",
			logging.KeySegment, filepath.Base(t.path), logging.KeyOffset, t.offset,
			logging.KeyDroppedBytes, t.size-t.offset, logging.KeyKeptEntries, t.kept,
			logging.KeyLastIndex, last, logging.KeyReason, t.reason)
	}
	if res.entries == 0 {
		// Only a torn first batch (or nothing) was there: the log is empty.
		closeWAL()
		return s.retireSegments()
	}
	if w == nil {
		if w, err = wal.Open(s.segDir, s.walOptions()); err != nil {
			return fmt.Errorf("walstore: reopen %s after repair: %w", s.segDir, err)
		}
	}
	walFirst, err1 := w.FirstIndex()
	walLast, err2 := w.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		closeWAL()
		return fmt.Errorf("walstore: %w", err)
	}
	if walFirst != res.walFirst || walLast != res.walFirst+res.entries-1 {
		closeWAL()
		return fmt.Errorf("%w: wal holds indexes [%d, %d], the records [%d, %d]",
			ErrCorrupt, walFirst, walLast, res.walFirst, res.walFirst+res.entries-1)
	}
	s.w, s.base, s.empty = w, res.base, false
	s.first = res.base + walFirst - 1
	s.last = res.base + walLast - 1
	if err := s.openTail(); err != nil {
		closeWAL()
		return err
	}
	if err := s.syncRecovered(); err != nil {
		_ = s.closeWAL() // the error that matters is the fsync's
		return err
	}
	return nil
}

// syncRecovered makes durable what recovery found before the store treats it
// as durable. A process killed while it wrote a batch, or during the batch's
// fsync, leaves that batch in the page cache, where the scan read it whole,
// but perhaps not on disk; and raft stores no entry it already holds (a
// follower answers an AppendEntries for such entries without a StoreLogs), so
// without this fsync those entries could be acknowledged, and committed, and
// then lost at a power failure. Only the last segment can hold such bytes
// (tidwall/wal fsyncs a segment before it starts the next); the segment
// directory and its parent name it. A failed fsync stops Open: what the scan
// read cannot be trusted (the page cache may hold bytes that never reach the
// disk), so the process must not go on with it.
func (s *Store) syncRecovered() error {
	if s.opts.NoSync {
		return nil
	}
	if err := s.fsync(s.tail); err != nil {
		return fmt.Errorf("walstore: fsync %s on open: %w", s.tail.Name(), err)
	}
	for _, dir := range []string{s.segDir, s.dir} {
		d, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("walstore: fsync %s on open: %w", dir, err)
		}
		err = s.fsync(d)
		_ = d.Close() // opened for the fsync only
		if err != nil {
			return fmt.Errorf("walstore: fsync %s on open: %w", dir, err)
		}
	}
	return nil
}

// fsync is f.Sync, or the Fsync knob.
func (s *Store) fsync(f *os.File) error {
	if s.opts.Knobs.Fsync != nil {
		return s.opts.Knobs.Fsync(f)
	}
	return f.Sync()
}

// FirstIndex returns the first index in the log, 0 if it is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.bound(&s.first) }

// LastIndex returns the last index in the log, 0 if it is empty.
func (s *Store) LastIndex() (uint64, error) { return s.bound(&s.last) }

// bound reads s.first or s.last (b) under the read lock.
func (s *Store) bound(b *uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	return *b, nil
}

// GetLog reads the entry at index into out. It returns raft.ErrLogNotFound
// if the log does not hold index.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.empty || index < s.first || index > s.last {
		return raft.ErrLogNotFound
	}
	s.readMu.Lock()
	b, err := s.w.Read(index - s.base + 1)
	s.readMu.Unlock()
	switch {
	case errors.Is(err, wal.ErrNotFound):
		return raft.ErrLogNotFound
	case errors.Is(err, wal.ErrCorrupt):
		return fmt.Errorf("%w: read index %d: %w", ErrCorrupt, index, err)
	case err != nil:
		return fmt.Errorf("walstore: read index %d: %w", index, err)
	}
	rec, err := parseRecord(b)
	if err != nil {
		return fmt.Errorf("%w: index %d: %w", ErrCorrupt, index, err)
	}
	if rec.index != index {
		return fmt.Errorf("%w: wal slot of index %d holds index %d", ErrCorrupt, index, rec.index)
	}
	rec.into(out)
	return nil
}

// StoreLog stores one entry; see StoreLogs.
func (s *Store) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs appends entries whose indexes are consecutive and continue the
// log (the first is LastIndex()+1); on an empty log the first may be any
// index. It is one wal batch and, unless NoSync, one fsync. It returns an
// error wrapping ErrOutOfOrder, without writing, for any other indexes.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	for i := 1; i < len(logs); i++ {
		if prev, cur := logs[i-1].Index, logs[i].Index; cur != prev+1 || cur == 0 {
			return fmt.Errorf("%w: index %d follows %d in the batch", ErrOutOfOrder, cur, prev)
		}
	}
	// s.last+1 wraps to 0 after the largest index; 0 does not continue it
	// (as cur == 0 does not inside a batch).
	if !s.empty && (logs[0].Index != s.last+1 || logs[0].Index == 0) {
		return fmt.Errorf("%w: batch starts at index %d, log ends at %d", ErrOutOfOrder, logs[0].Index, s.last)
	}
	if s.w == nil {
		if err := s.create(logs[0].Index); err != nil {
			return s.fail("create log", err)
		}
	}
	var size int64
	for i, l := range logs {
		s.scratch = appendRecord(s.scratch[:0], l, i == 0, i == len(logs)-1)
		s.batch.Write(l.Index-s.base+1, s.scratch)
		size += frameSize(len(s.scratch))
	}
	if err := s.w.WriteBatch(&s.batch); err != nil {
		s.batch.Clear()
		err = s.fail("write", err)
		s.dropUnsynced()
		return err
	}
	if err := s.syncTail(size); err != nil {
		err = s.fail("fsync", err)
		s.dropUnsynced()
		return err
	}
	s.mu.Lock()
	if s.empty {
		s.first, s.empty = logs[0].Index, false
	}
	s.last = logs[len(logs)-1].Index
	s.mu.Unlock()
	return nil
}

// DeleteRange deletes the entries in [min, max]. Raft asks for three shapes
// and each is supported: a suffix (max >= LastIndex: conflict on a
// follower), a prefix (min <= FirstIndex: compaction after a snapshot) and
// everything (after a snapshot install or restore, on a monotonic store).
// Indexes outside the log are ignored. A range strictly inside the log
// returns an error wrapping ErrGap.
func (s *Store) DeleteRange(min, max uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if s.empty || min > max || max < s.first || min > s.last {
		return nil
	}
	switch {
	case min <= s.first && max >= s.last:
		if err := s.reset(); err != nil {
			return s.fail("empty log", err)
		}
	case min <= s.first:
		return s.truncate("delete prefix", &s.first, max+1, s.w.TruncateFront)
	case max >= s.last:
		return s.truncate("delete suffix", &s.last, min-1, s.w.TruncateBack)
	default:
		return fmt.Errorf("%w: [%d, %d] inside [%d, %d]", ErrGap, min, max, s.first, s.last)
	}
	return nil
}

// IsMonotonic tells raft that this store cannot hold gaps, so raft empties
// the log after installing or restoring a snapshot instead of leaving a gap.
func (s *Store) IsMonotonic() bool { return true }

// Close flushes and closes the store. Calling it again returns nil.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.closeWAL()
	return errors.Join(err, s.lock.Close()) // the lock last: the log is closed
}

// writable returns why the store refuses changes, if it does.
func (s *Store) writable() error {
	if s.closed {
		return ErrClosed
	}
	if s.failed != nil {
		return fmt.Errorf("%w: %w", ErrFailed, s.failed)
	}
	return nil
}

// fail records the first failed change, after which the store is read-only.
func (s *Store) fail(op string, err error) error {
	err = fmt.Errorf("walstore: %s: %w", op, err)
	if s.failed == nil {
		s.failed = err
		s.logger.Error("walstore: change failed; the store refuses further changes until reopened",
			logging.KeyOp, op, logging.KeyError, err)
	}
	return err
}

// closeWAL closes the tail handle and the wal. Callers hold writeMu and mu.
func (s *Store) closeWAL() error {
	var err error
	if s.tail != nil {
		err = s.tail.Close()
		s.tail = nil
	}
	if s.w != nil {
		err = errors.Join(err, s.w.Close())
		s.w = nil
	}
	return err
}

// create starts a new segment directory whose first entry has raft index
// first. The directory and its first segment file are made durable before
// anything is written into them.
func (s *Store) create(first uint64) error {
	if err := os.MkdirAll(s.segDir, 0o750); err != nil {
		return err
	}
	w, err := wal.Open(s.segDir, s.walOptions())
	if err != nil {
		return err
	}
	if err := errors.Join(s.syncDir(s.segDir), s.syncDir(s.dir)); err != nil {
		_ = w.Close()
		return err
	}
	s.mu.Lock()
	s.w, s.base = w, first // still empty until the batch is durable
	s.mu.Unlock()
	return s.openTail()
}

// reset empties the log. The commit point is one atomic rename of the
// segment directory, made durable by an fsync of its parent: a crash before
// it leaves the old log whole, a crash after it leaves an empty log (and a
// retired directory that Open deletes). The next StoreLogs re-bases.
//
// A failure fails the store (ErrFailed) until it is reopened, unlike a
// failed prefix or suffix truncation (truncate). Before the rename the wal
// is closed and the view already empty while segments/ still holds the old
// log: a later StoreLogs would open that directory at a new base, so only
// Open, which loads that log whole (as a crash before the rename leaves
// it), can go on from there. After the rename, the failure is the commit
// point's fsync, which cannot be retried: once an fsync has failed, the
// next one may succeed without the rename ever reaching the disk.
func (s *Store) reset() error {
	s.mu.Lock()
	err := s.closeWAL()
	s.empty, s.first, s.last, s.base = true, 0, 0, 0
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.retireSegments() // readers already see an empty log
}

// retireSegments renames the segment directory away, commits the rename,
// and deletes it. The wal must be closed.
func (s *Store) retireSegments() error {
	retired := filepath.Join(s.dir, retiredDirName)
	if err := os.RemoveAll(retired); err != nil { // left over from a crash
		return err
	}
	if err := os.Rename(s.segDir, retired); err != nil {
		return err
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(retired); err != nil {
		// The log is empty already; Open deletes what is left.
		s.logger.Warn("walstore: could not delete the retired segments", logging.KeyError, err)
	}
	return nil
}

// truncate deletes a prefix or a suffix of the log for DeleteRange (op
// names it): bound is &s.first and index the new first raft index, cut the
// wal's TruncateFront; or bound is &s.last, index the new last one, cut
// TruncateBack. The new bound is published before the wal is cut, so
// readers never ask for an entry that is going away.
//
// tidwall/wal (v1.2.1) cuts in two stages. It first writes the part of the
// affected segment that stays to a .START or .END file through a .TEMP file
// (write, fsync, rename); a failure there (ENOSPC: the copy is up to
// SegmentSize bytes; an I/O error; a failed read of the segment) leaves its
// log as it was, in memory and on disk, but for a .TEMP file that it removes
// or that the next Open deletes. Once the .START/.END file exists the cut
// has taken effect (wal.Open finishes it), and any later failure marks the
// wal corrupt: it refuses every call from then on. So when the wal reports
// the bounds it had before, unchanged and not corrupt, the cut did not
// happen and can be retried: the old bound is published again and the error
// returned without failing the store. Raft retries it (compaction at its
// next snapshot; a follower's conflicting suffix when the leader sends the
// entries again), and the cut succeeds once the disk has room. Any other
// failure fails the store: the cut happened, in part or whole, and its
// directory fsync (tidwall/wal makes none) did not: once an fsync has
// failed, the next one may succeed without the cut ever reaching the disk,
// and entries appended after it could then be lost with it at a crash.
func (s *Store) truncate(op string, bound *uint64, index uint64, cut func(walIndex uint64) error) error {
	old, walFirst, walLast := *bound, s.first-s.base+1, s.last-s.base+1
	s.mu.Lock()
	*bound = index
	s.mu.Unlock()
	if err := cut(index - s.base + 1); err != nil {
		f, ferr := s.w.FirstIndex()
		l, lerr := s.w.LastIndex()
		if ferr != nil || lerr != nil || f != walFirst || l != walLast {
			return s.fail(op, err)
		}
		s.mu.Lock()
		*bound = old
		s.mu.Unlock()
		err = fmt.Errorf("walstore: %s: %w", op, err)
		s.logger.Error("walstore: truncation failed before it took effect; the log is unchanged and the next DeleteRange tries again",
			logging.KeyOp, op, logging.KeyError, err)
		return err
	}
	if s.opts.NoSync {
		return nil
	}
	// tidwall/wal wrote and fsynced the rewritten segment under a temporary
	// name, renamed it over the old one and deleted the dropped segments,
	// but did not fsync the directory. It may also have replaced the tail
	// segment file, so the tail handle is reopened.
	if err := s.syncDir(s.segDir); err != nil {
		return s.fail(op, err)
	}
	if err := s.openTail(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// openTail opens a handle on the wal's last segment file (the one it
// appends to) and records its size. Without NoSync only.
func (s *Store) openTail() error {
	if s.opts.NoSync {
		return nil
	}
	if s.tail != nil {
		_ = s.tail.Close() // used only for fsync; nothing to flush through it
		s.tail = nil
	}
	segs, err := listSegments(s.segDir)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		return fmt.Errorf("%w: no segment file in %s", ErrCorrupt, s.segDir)
	}
	f, err := os.OpenFile(segs[len(segs)-1].path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	s.tail, s.tailSize = f, st.Size()
	return nil
}

// dropUnsynced cuts the batch whose write or fsync failed off the last
// segment file, the only one that can hold bytes not known durable
// (tidwall/wal fsyncs a segment before it starts the next). After a failed
// fsync the kernel may keep those bytes in the page cache, marked clean, and
// report no error to the next fsync: a later Open, in this process or
// another, would read the batch, fsync it "successfully" and treat it as
// durable, and raft, which stores no entry it already holds, could then
// acknowledge entries that are not on disk. Cutting the file drops those
// pages. It cuts just after the record of the last published index (s.last;
// on an empty log, at the start), and not at all if a record before it does
// not parse. Best effort: the store has failed already, and a cut that does
// not happen leaves the batch as a crash would (a torn or whole final batch,
// which was never acknowledged). Called with writeMu held.
//
// Neither the batch nor this cut is retried in this process, whether the cut
// succeeds or fails: the store refuses changes until it is reopened. A
// failed write leaves tidwall/wal's in-memory segment holding the batch (it
// appends to its buffer before it writes the file), so the next batch would
// be written after bytes the file does not hold; after a failed fsync what
// the page cache holds may not be on disk, and a second fsync may report
// success without writing it. Only Open, which rescans the files, fsyncs
// what it keeps and builds a new wal, can say what the log holds.
func (s *Store) dropUnsynced() {
	segs, err := listSegments(s.segDir)
	if err != nil || len(segs) == 0 {
		return
	}
	path := segs[len(segs)-1].path
	data, err := os.ReadFile(path)
	if err != nil {
		s.logger.Error("walstore: could not cut the failed batch off the last segment",
			logging.KeySegment, filepath.Base(path), logging.KeyError, err)
		return
	}
	// The published entries the segment holds must stay, whole: if one of
	// them does not parse (damage to durable data), cutting there would drop
	// acknowledged entries, so nothing is cut and Open judges the damage.
	keep := 0
	whole := s.empty || s.last < s.base+segs[len(segs)-1].index-1 // none of them in this segment
	for !s.empty && keep < len(data) {
		rec, size, err := frameAt(data[keep:])
		if err != nil || rec.index > s.last {
			break
		}
		keep += size
		whole = whole || rec.index == s.last
	}
	if keep == len(data) {
		return
	}
	if !whole {
		s.logger.Error("walstore: did not cut the failed batch off the last segment: a record before it does not parse",
			logging.KeySegment, filepath.Base(path), logging.KeyOffset, keep, logging.KeyLastIndex, s.last)
		return
	}
	if err := os.Truncate(path, int64(keep)); err != nil {
		s.logger.Error("walstore: could not cut the failed batch off the last segment",
			logging.KeySegment, filepath.Base(path), logging.KeyError, err)
		return
	}
	s.logger.Warn("walstore: cut the failed batch off the last segment",
		logging.KeySegment, filepath.Base(path), logging.KeyOffset, keep,
		logging.KeyDroppedBytes, len(data)-keep, logging.KeyLastIndex, s.last)
}

// syncTail makes the batch just written (size bytes of frames) durable.
// tidwall/wal appends to its last segment and starts a new one when a
// segment reaches SegmentSize (at the start of a batch, after any entry of
// it, or after its last entry). If the tail handle did not grow by exactly
// size, or grew to SegmentSize, the wal has moved on: it fsynced the
// segment it left, and the store fsyncs the new one and the directory that
// gained it. A wrong guess costs one extra reopen and directory fsync; a
// missed switch shows as a size mismatch at the next batch, before that
// batch is acknowledged. TestSyncFollowsTailSegment pins the behaviour.
func (s *Store) syncTail(size int64) error {
	if s.opts.NoSync {
		return nil
	}
	st, err := s.tail.Stat()
	if err != nil {
		return err
	}
	if st.Size() == s.tailSize+size {
		s.tailSize += size
		if err := s.fsync(s.tail); err != nil {
			return err
		}
		if s.tailSize < int64(s.opts.SegmentSize) {
			return nil
		}
		// The batch filled the segment, and the wal moves on as soon as a
		// segment reaches SegmentSize: it has created the next (empty) one.
	} else if err := s.fsync(s.tail); err != nil {
		return err
	}
	if err := s.openTail(); err != nil {
		return err
	}
	if err := s.fsync(s.tail); err != nil {
		return err
	}
	return s.syncDir(s.segDir)
}

// syncDir fsyncs a directory so that entries created, renamed or removed in
// it are durable.
func (s *Store) syncDir(dir string) error {
	if s.opts.NoSync {
		return nil
	}
	return atomicfile.SyncDir(dir)
}
