// Package engine is the ledger's storage engine: a small byte-level
// interface over pebble. It keeps keys and values as bytes and knows nothing
// of what they hold (the ledger's tables, orders and records are
// internal/ledger's): one pebble database per generation of a directory, a
// batch of writes kept aside until its commit, reads and walks that see the
// batch, point-in-time views, the order-preserving key encoding (AppendString,
// AppendInt64, AppendUint64), and the in-memory counts of which keys of
// chosen prefixes exist (KeyCounts).
package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/once-dev/once/internal/atomicfile"
)

// The ledger's disk-backed state keeps every table in one pebble database
// (docs/ledger.md, "State on disk"). The Raft log stays the durable record,
// so pebble runs without its own write-ahead log: a batch of applied commands
// goes into the memtable, with the applied index in the same atomic batch
// (the ledger writes its counters in every batch), and reaches disk when
// pebble flushes the memtable; a crash loses what was not flushed, and a
// restart goes on from the applied index of what was (Raft replays the log
// after it). Before Raft may compact its log up to a snapshot, the ledger's
// Persist flushes the store (Sync), so the store is never behind the newest
// snapshot's index; a clean close flushes too.
//
// A directory holds generations of the store: CURRENT names the live one
// (gen-N). The ledger's Restore writes a new generation beside it
// (NewGeneration), syncs it and only then switches CURRENT (MakeCurrent:
// write a temporary file, fsync, rename, fsync the directory), so a crash
// during Restore leaves the old state in place; other generations are
// removed when the store is opened.

// ErrStore: the store could not be opened, read or written (a generation
// that cannot be found, a disk error, a damaged value). The ledger's
// ErrStore is this error.
var ErrStore = errors.New("ledger: store")

// errClosed is why a closed store refuses to be used: Sync, MakeCurrent and
// NewGeneration return it (wrapped in ErrStore), the methods that return no
// error fail with it (a StoreError), and a second Close returns nil, where
// pebble would panic with an error the ledger does not recover.
var errClosed = errors.New("closed")

// StoreError is what the store panics with when it fails while writing or
// reading (a disk error, a damaged value): the ledger's FSM, which cannot
// record a command then, must not go on answering, as etcd's backend stops
// on a failed commit. Op says what was done. Fail panics with one for the
// layers above (a value they cannot decode).
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string { return "ledger: store: " + e.Op + ": " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Fail panics with a StoreError (see StoreError).
func Fail(op string, err error) { panic(&StoreError{Op: op, Err: err}) }

// Options tune the store; zero values take the defaults.
type Options struct {
	// CacheBytes is pebble's block cache (default 256 MiB).
	CacheBytes int64
	// MemTableBytes is the size of one memtable (default 64 MiB, the size
	// pebble targets for its base level; 32 MiB applied ~15 % slower,
	// docs/benchmarks.md).
	MemTableBytes uint64
	// Logger receives pebble's messages (default: discarded).
	Logger *slog.Logger
	// Knobs are for benchmarks and their tests only (TestingKnobs).
	Knobs TestingKnobs
}

// TestingKnobs are for tests and benchmarks only (CockroachDB's
// TestingKnobs pattern: passed in Options, zero in production); the ledger's
// TestingKnobs set them.
type TestingKnobs struct {
	// KeyScanStarts, when set, is called by the background scan of the key
	// counts (keys.go) as it starts, before it reads the store; it may
	// block, holding the counts not ready.
	KeyScanStarts func()
	// NoWrites commits to pebble only the keys whose first byte is at most
	// NoWritesKeep: the others are kept aside in the batch, as always, then
	// dropped. The ledger's Open sets NoWritesKeep: it keeps the counters.
	NoWrites     bool
	NoWritesKeep byte
	// WriteCurrent, when set, writes the CURRENT file in place of
	// atomicfile.WriteBytes (a test fails it to stand for a failing disk).
	WriteCurrent func(path string, data []byte) error
	// SyncDir, when set, fsyncs the directory in place of
	// atomicfile.SyncDir when Open makes CURRENT durable (a test observes
	// it).
	SyncDir func(dir string) error
}

// Store is one open generation of the store. The caller serializes its
// writes (Begin to Commit) and keeps reads from running during them (the
// FSM's locks); reads may run concurrently with each other.
type Store struct {
	dir  string   // the ledger directory: CURRENT and the generations
	lock *dirLock // the directory's lock, shared by its open generations
	gen  int      // the generation's number (directory gen-N)
	db   *pebble.DB
	opts Options

	// The writes of a batch (between Begin and Commit) are first kept in
	// pending, one per key, the last one winning: a key written by several
	// commands of the batch, or set and then deleted, reaches pebble once,
	// where its memtable would hold every version until a flush
	// (docs/ledger.md, "Apply"). Point reads look there first. A walk of
	// an order needs pebble's merged view, so it moves pending into an
	// indexed batch first (reader); a batch that no walk needed is written
	// through a plain one, which costs less per write.
	//
	// open says a batch is open. w is the indexed batch a walk made (nil
	// until then); r is what reads go to after pending: w when there is
	// one, the database otherwise.
	open bool
	// pending finds a key's write in written: the batch's writes, one per
	// key, in the order their keys were first written (a write of a key
	// again replaces its element; gone: deleted from pending since).
	pending map[string]int32
	written []pendingWrite
	// lowSet is, per key prefix, the least key the open batch has set
	// (arena[k0:v0]; v0 == 0: none): below it, a walk may read the database
	// and skip what pending deletes, without moving pending (walk).
	lowSet [256]struct{ k0, v0 int }
	arena  []byte         // pending's keys and values, reset at commit
	sorted []pendingWrite // scratch for movePending
	r      pebble.Reader
	w      *pebble.Batch

	keys *KeyCounts // which keys of chosen prefixes exist (keys.go); set by CountKeys

	// writes counts the keys each commit sent to pebble (a Set or a
	// Delete each), by key prefix: what a command costs the memtable
	// (the ledger's TestKeyWritesPerSubmission). Under the write lock.
	writes [256]uint64

	// Snapshots' views keep a retired generation open until they are
	// released (a Restore or a Close while a Persist streams).
	mu      sync.Mutex
	views   int
	retired bool
	remove  bool // remove the generation's directory once closed
	// keep: a failed MakeCurrent may have left CURRENT naming this
	// generation, so it is never removed (MakeCurrent).
	keep bool
	// closed: the database is closed (close); read without a lock by the
	// methods that would otherwise reach a closed pebble.
	closed atomic.Bool
}

// usable fails (a StoreError) when the store is closed.
func (s *Store) usable(op string) {
	if s.closed.Load() {
		Fail(op, errClosed)
	}
}

// closedErr returns an error wrapping ErrStore when the store is closed.
func (s *Store) closedErr(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %s: %w", ErrStore, op, errClosed)
	}
	return nil
}

// dirLock is the ledger directory's lock (dir/LOCK), taken by Open before it
// reads CURRENT or removes a generation: a second Open of the directory, in
// this process or another, is refused instead of removing the generation a
// Restore of the first is writing. Every generation open in the directory
// holds a reference; the last one closed releases the lock.
type dirLock struct {
	mu   sync.Mutex
	l    *pebble.Lock
	refs int
}

func (d *dirLock) ref() *dirLock {
	d.mu.Lock()
	d.refs++
	d.mu.Unlock()
	return d
}

func (d *dirLock) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refs--; d.refs == 0 {
		_ = d.l.Close() // releasing an flock (on close) cannot fail in a way the caller could act on
	}
}

// genName is generation gen's directory name, what CURRENT holds to name it.
func genName(gen int) string { return "gen-" + strconv.Itoa(gen) }

func genDir(dir string, gen int) string { return filepath.Join(dir, genName(gen)) }

// genOf returns the generation a name (a directory's, CURRENT's) names.
func genOf(name string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "gen-"))
	return n, err == nil && strings.HasPrefix(name, "gen-")
}

// readCurrent returns what CURRENT holds, trimmed.
func readCurrent(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, currentFile))
	return strings.TrimSpace(string(b)), err
}

const currentFile = "CURRENT"

// Open opens the live generation in dir, creating the directory and a
// first generation when there is none, and removes other generations (left by
// a Restore that did not finish, or by one that finished before removing its
// predecessor).
//
// The first generation is created, and its directory entry made durable,
// before CURRENT names it: a first Open that fails or is killed before
// CURRENT is written leaves no CURRENT, and the next Open starts afresh.
func Open(dir string, opts Options) (*Store, error) {
	if err := atomicfile.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	l, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return nil, fmt.Errorf("%w: lock %s (is another process using it?): %w", ErrStore, dir, err)
	}
	lock := &dirLock{l: l, refs: 1}
	s, err := open(dir, lock, opts)
	lock.release() // the store holds its own reference
	return s, err
}

func open(dir string, lock *dirLock, opts Options) (*Store, error) {
	gen, first := 1, false
	switch s, err := readCurrent(dir); {
	case err == nil:
		n, ok := genOf(s)
		if !ok || n < 1 {
			return nil, fmt.Errorf("%w: %s names %q, not a generation", ErrStore, currentFile, s)
		}
		gen = n
		if _, err := os.Stat(genDir(dir, gen)); err != nil {
			return nil, fmt.Errorf("%w: %s names %s: %w", ErrStore, currentFile, s, err)
		}
	case errors.Is(err, os.ErrNotExist):
		// Only a first Open stopped before writing CURRENT leaves none, and
		// then at most gen-1. A later generation without CURRENT means
		// CURRENT was lost: refuse rather than delete the generation and
		// start an empty store in its place.
		if later, err := otherGenerations(dir, 1); err != nil {
			return nil, err
		} else if len(later) > 0 {
			return nil, fmt.Errorf("%w: %s is missing beside %s (docs/operations.md)", ErrStore, filepath.Join(dir, currentFile), later[0])
		}
		first = true
	default:
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if !first {
		// A process killed after CURRENT's rename, before the fsync of the
		// directory, leaves a CURRENT that a power failure can still undo,
		// back to naming the generation removed below (Open would then
		// refuse a CURRENT naming nothing). Make it durable before going on
		// with the generation it names and removing the others.
		sync := atomicfile.SyncDir
		if opts.Knobs.SyncDir != nil {
			sync = opts.Knobs.SyncDir
		}
		if err := sync(dir); err != nil {
			return nil, fmt.Errorf("%w: sync %s: %w", ErrStore, dir, err)
		}
	}
	if err := removeOtherGenerations(dir, gen); err != nil {
		return nil, err
	}
	if !first {
		return openGeneration(dir, lock, gen, false, opts)
	}
	s, err := createGeneration(dir, lock, gen, opts)
	if err != nil {
		return nil, err
	}
	if err := writeCurrent(dir, gen, opts.Knobs); err != nil {
		_ = s.Abandon()
		return nil, err
	}
	return s, nil
}

// openGeneration opens generation gen's database, creating it only if
// create: a generation that CURRENT names was created whole before CURRENT
// named it, so one without its database (pebble's manifest marker lost) is
// refused, not replaced by an empty store that would silently start at
// applied index 0.
func openGeneration(dir string, lock *dirLock, gen int, create bool, opts Options) (*Store, error) {
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 256 << 20
	}
	if opts.MemTableBytes == 0 {
		opts.MemTableBytes = 64 << 20
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref() // the database holds its own reference
	po := &pebble.Options{
		Cache:        cache,
		MemTableSize: opts.MemTableBytes,
		Logger:       pebbleLogger{opts.Logger},
		// The Raft log is the write-ahead log (above): a second one would
		// write every byte twice and cost the apply path its appends.
		DisableWAL: true,
	}
	// Most point reads on the apply path miss (a new key's entry, a new
	// job's ID): Bloom filters answer those without reading blocks.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if !create {
		// Peek, not pebble's ErrorIfNotExists: a refused pebble.Open
		// leaks its disk-health goroutine.
		desc, err := pebble.Peek(genDir(dir, gen), vfs.Default)
		if err != nil {
			return nil, fmt.Errorf("%w: open %s: %w", ErrStore, genDir(dir, gen), err)
		}
		if !desc.Exists {
			return nil, fmt.Errorf("%w: %s names %s, which holds no database (docs/operations.md)", ErrStore, filepath.Join(dir, currentFile), genDir(dir, gen))
		}
	}
	db, err := pebble.Open(genDir(dir, gen), po)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrStore, genDir(dir, gen), err)
	}
	s := &Store{dir: dir, lock: lock.ref(), gen: gen, db: db, opts: opts}
	s.r = db
	return s, nil
}

// createGeneration opens (or creates) generation gen's database and makes
// its directory entry durable, so that CURRENT, written after, never names
// a generation that a crash could lose.
func createGeneration(dir string, lock *dirLock, gen int, opts Options) (*Store, error) {
	s, err := openGeneration(dir, lock, gen, true, opts)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		_ = s.Abandon()
		return nil, fmt.Errorf("%w: sync %s: %w", ErrStore, dir, err)
	}
	return s, nil
}

// NewGeneration creates the next generation, empty, beside s (for the
// ledger's Restore), with s's options.
func (s *Store) NewGeneration() (*Store, error) {
	if err := s.closedErr("new generation"); err != nil {
		return nil, err
	}
	next := s.gen + 1
	// A failed switch may have left CURRENT naming s.gen+1 (MakeCurrent):
	// that generation is kept, not reused, until a switch succeeds.
	if cur, err := readCurrent(s.dir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	} else if cur == genName(next) {
		next++
	}
	if err := os.RemoveAll(genDir(s.dir, next)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return createGeneration(s.dir, s.lock, next, s.opts)
}

// MakeCurrent syncs s and makes it the live generation; the previous one
// (old) is closed and removed once no view of it is open. Called with the
// FSM's write lock held.
func (s *Store) MakeCurrent(old *Store) error {
	if err := s.closedErr("make current"); err != nil {
		return err
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("%w: flush: %w", ErrStore, err)
	}
	if err := writeCurrent(s.dir, s.gen, s.opts.Knobs); err != nil {
		// The write may have failed after its rename (the directory's
		// fsync): CURRENT may then name s, and a crash may or may not undo
		// that. Unless CURRENT still names another generation, s stays on
		// disk when the caller discards it, so whichever generation CURRENT
		// names at the next Open is there; that Open removes the other.
		if cur, rerr := readCurrent(s.dir); rerr != nil || cur == genName(s.gen) {
			s.mu.Lock()
			s.keep = true
			s.mu.Unlock()
		}
		return err
	}
	if old != nil {
		old.retire(true) // what is left goes at the next open
	}
	return nil
}

// View is a point-in-time view of a store.
type View struct{ snap *pebble.Snapshot }

// Walk calls fn with the view's keys and values in [lo, hi) in order until
// fn returns false.
func (v View) Walk(lo, hi []byte, fn func(k, v []byte) bool) {
	iterate(v.snap, lo, hi, false, fn)
}

// View returns a point-in-time view of the store, which keeps it open until
// released (a Restore or a Close while the ledger's Persist streams it).
func (s *Store) View() (View, func()) {
	s.usable("view")
	s.mu.Lock()
	s.views++
	s.mu.Unlock()
	v := s.db.NewSnapshot()
	return View{v}, func() {
		_ = v.Close()
		s.mu.Lock()
		s.views--
		last := s.retired && s.views == 0
		s.mu.Unlock()
		if last {
			s.finish()
		}
	}
}

// retire closes the store (and, with remove, deletes its directory) once no
// view is open.
func (s *Store) retire(remove bool) error {
	if s.closed.Load() {
		return nil // closed already: a second Close, or a Discard after it, does nothing
	}
	s.mu.Lock()
	s.retired, s.remove = true, remove && !s.keep
	now := s.views == 0
	s.mu.Unlock()
	if now {
		return s.finish()
	}
	return nil
}

func (s *Store) finish() error {
	err := s.close(!s.remove)
	if s.remove {
		_ = os.RemoveAll(genDir(s.dir, s.gen))
	}
	return err
}

// Close closes the store once no view is open, flushing its memtables
// first (close). The store must not be used after: Sync, MakeCurrent and
// NewGeneration then return an error wrapping ErrStore, the other methods
// fail with a StoreError, and Close again returns nil.
func (s *Store) Close() error { return s.retire(false) }

// Abandon closes the store at once, without a flush: one that the caller
// refused after opening it, having written nothing.
func (s *Store) Abandon() error { return s.close(false) }

// Discard closes and removes a generation that did not become current.
func (s *Store) Discard() { _ = s.retire(true) }

func writeCurrent(dir string, gen int, knobs TestingKnobs) error {
	write := atomicfile.WriteBytes
	if knobs.WriteCurrent != nil {
		write = knobs.WriteCurrent
	}
	err := write(filepath.Join(dir, currentFile), []byte(genName(gen)+"\n"))
	if err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrStore, currentFile, err)
	}
	return nil
}

// otherGenerations returns the names of the generations in dir other than
// keep, sorted.
func otherGenerations(dir string, keep int) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	var names []string
	for _, de := range des {
		if n, ok := genOf(de.Name()); ok && n != keep {
			names = append(names, de.Name())
		}
	}
	return names, nil
}

func removeOtherGenerations(dir string, keep int) error {
	names, err := otherGenerations(dir, keep)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%w: remove %s: %w", ErrStore, name, err)
		}
	}
	return nil
}

// close closes the database; with flush, what is still in the memtables is
// written first (without a WAL it would be lost: a clean close keeps it, so a
// restart replays nothing). A generation about to be removed is not flushed.
func (s *Store) close(flush bool) error {
	if s.closed.Swap(true) {
		return nil // closed already (a second Close, or Abandon then Close)
	}
	defer s.lock.release()
	if s.w != nil {
		_ = s.w.Close()
		s.w = nil
	}
	s.open = false
	if s.keys != nil {
		s.keys.close() // its scan reads the database
	}
	if flush {
		if err := s.db.Flush(); err != nil {
			_ = s.db.Close()
			return fmt.Errorf("%w: flush at close: %w", ErrStore, err)
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("%w: close: %w", ErrStore, err)
	}
	return nil
}

// pendingWrite is one key's last write in the open batch: the key is
// arena[k0:v0], the value arena[v0:v1]; del says the key is deleted.
type pendingWrite struct {
	k0, v0, v1 int
	del        bool
	// gone: the write is no longer in pending (an insert deleted again).
	gone bool
	// fresh: pebble does not hold the key (an insert's first write in the
	// batch, insert): a delete of it then writes nothing at all.
	fresh bool
}

// Begin opens the batch the next commands are applied into.
func (s *Store) Begin() {
	s.usable("begin")
	s.keys.settle()
	s.open = true
	if s.pending == nil {
		s.pending = make(map[string]int32)
	}
}

// Commit writes the open batch without an fsync (the Raft log is the durable
// record) and goes back to reading the database.
func (s *Store) Commit() {
	if !s.open {
		Fail("commit", errors.New("no batch open"))
	}
	if s.w == nil {
		s.w = s.db.NewBatch() // no walk read this batch: nothing needs its index
	}
	s.movePending()
	if err := s.w.Commit(pebble.NoSync); err != nil {
		Fail("commit", err)
	}
	_ = s.w.Close()
	s.w = nil
	s.r = s.db
	s.open = false
}

// movePending writes pending into w in key order and empties it. Any order
// gives the same state (there is one write per key), but pebble's memtable
// inserts a key faster next to the one before: sorted, a batch's writes cost
// about 40 % less to commit, sorting included (docs/benchmarks.md). The
// writes are put in their orders first (a key's first byte), each order's
// in the order they were written, and then each order is sorted: most
// orders are written in their own order (a job's Seq, a queue's run time,
// an entry's expiry grow with the log), which the sort finds sorted at the
// cost of one comparison per write; only the tables keyed by names (the
// entries, the jobs, the watermarks) take a full sort, each of its own
// writes only.
func (s *Store) movePending() {
	var ends [256]int // per first byte: where its writes end in ws
	n := 0
	for _, p := range s.written {
		if !p.gone {
			ends[s.arena[p.k0]]++
			n++
		}
	}
	for b, at := 0, 0; b < len(ends); b++ {
		at += ends[b]
		ends[b] = at - ends[b] // the bucket's start, for now
	}
	ws := slices.Grow(s.sorted[:0], n)[:n]
	for _, p := range s.written {
		if !p.gone {
			b := s.arena[p.k0]
			ws[ends[b]] = p
			ends[b]++ // the bucket's end once every write is placed
		}
	}
	for b, from := 0, 0; b < len(ends); b++ {
		if ends[b]-from > 1 {
			slices.SortFunc(ws[from:ends[b]], func(a, b pendingWrite) int {
				return bytes.Compare(s.arena[a.k0+1:a.v0], s.arena[b.k0+1:b.v0])
			})
		}
		from = ends[b]
	}
	noWrites, keep := s.opts.Knobs.NoWrites, s.opts.Knobs.NoWritesKeep
	for _, p := range ws {
		k := s.arena[p.k0:p.v0]
		if noWrites && k[0] > keep {
			continue
		}
		var err error
		if p.del {
			err = s.w.Delete(k, nil)
		} else {
			err = s.w.Set(k, s.arena[p.v0:p.v1], nil)
		}
		if err != nil {
			Fail("write", err)
		}
		s.writes[k[0]]++
	}
	if cap(s.arena) > keptPending {
		// A large batch (a Restore's checkpoint, a batch of big payloads)
		// does not keep its memory for the next, which is mostly small.
		s.pending, s.arena, s.sorted, s.written = make(map[string]int32), nil, nil, nil
		clear(s.lowSet[:])
		return
	}
	s.sorted = ws[:0]
	s.written = s.written[:0]
	clear(s.pending)
	clear(s.lowSet[:])
	s.arena = s.arena[:0]
}

// keptPending bounds the bytes of keys and values that pending's memory is
// kept for, from one batch to the next.
const keptPending = 1 << 20

// reader is what a walk of the open batch reads: pebble's view merged with
// every write so far, pending moved into an indexed batch first. Outside a
// batch, the database.
func (s *Store) reader() pebble.Reader {
	if s.open && len(s.pending) > 0 {
		if s.w == nil {
			s.w = s.db.NewIndexedBatch()
			s.r = s.w
		}
		s.movePending()
	}
	return s.r
}

// Get calls fn with k's value (valid only during fn) when k is present,
// seeing the open batch's writes.
func (s *Store) Get(k []byte, fn func(v []byte)) bool {
	if i, ok := s.pending[string(k)]; ok {
		p := &s.written[i]
		if p.del {
			return false
		}
		if fn != nil {
			fn(s.arena[p.v0:p.v1])
		}
		return true
	}
	s.usable("get")
	return getFrom(s.r, k, fn)
}

// Writes returns how many keys the commits so far sent to pebble (a Set or
// a Delete each), by the keys' first byte.
func (s *Store) Writes() [256]uint64 { return s.writes }

// Metrics returns pebble's metrics (benchmarks wait for its compactions).
func (s *Store) Metrics() *pebble.Metrics { return s.db.Metrics() }

// Sync makes everything committed so far durable: it flushes the memtables
// (there is no WAL to sync) and waits for the flush.
func (s *Store) Sync() error {
	if err := s.closedErr("sync"); err != nil {
		return err
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("%w: sync: %w", ErrStore, err)
	}
	return nil
}

// Set writes k's value in the open batch (the batch copies k and v).
func (s *Store) Set(k, v []byte) { s.write(k, v, false, false) }

// Insert sets a key the caller knows pebble did not hold when the batch
// began, unless the batch deleted it since: in the ledger, the key of an item
// put into a table or an order it is not in (diskIndex.insert). Every key of an order
// names its item (a key, a job's Seq), so pebble holds it only when the item
// had that key in the order when the batch began, and moving the item away
// since wrote a delete of it, which the batch still has aside (while no walk
// has moved the batch's writes into an indexed batch: after that, this is a
// plain set). Such a key set and then deleted in the same batch (an
// entry's expiry key when a later Expire or Admit of the batch removes it)
// reaches pebble not at all, where a set then a delete would write a
// tombstone for nothing.
func (s *Store) Insert(k, v []byte) { s.write(k, v, false, true) }

// Delete deletes k in the open batch.
func (s *Store) Delete(k []byte) { s.write(k, nil, true, false) }

func (s *Store) write(k, v []byte, del, fresh bool) {
	if !s.open {
		Fail("write", errors.New("no batch open"))
	}
	i, ok := s.pending[string(k)]
	if ok {
		p := &s.written[i]
		if p.fresh && del {
			delete(s.pending, string(k)) // as if never written (lowSet may stay below: it stays a bound)
			p.gone = true
			return
		}
		fresh = p.fresh
	} else if s.w != nil {
		fresh = false // an earlier write of the batch may be in w
	}
	k0 := len(s.arena)
	s.arena = append(append(s.arena, k...), v...)
	w := pendingWrite{k0: k0, v0: k0 + len(k), v1: len(s.arena), del: del, fresh: fresh && !del}
	if ok {
		s.written[i] = w
	} else {
		// The map's key is the arena's copy of k, not a copy of its own:
		// those bytes are written once and not again until the batch's
		// writes leave pending (movePending clears the map before the arena
		// is reused); an append that moves the arena leaves them where they
		// were, kept alive by the key.
		s.pending[unsafe.String(&s.arena[k0], len(k))] = int32(len(s.written))
		s.written = append(s.written, w)
	}
	if low := &s.lowSet[k[0]]; !del && (low.v0 == 0 || bytes.Compare(k, s.arena[low.k0:low.v0]) < 0) {
		low.k0, low.v0 = k0, k0+len(k)
	}
}

// Walk calls fn with the keys and values in [lo, hi), within one prefix, in
// order until fn returns false, seeing the open batch's writes as reader
// does. Below the least key the batch has set under the prefix, every key
// there is is in the database, and pending says which of them the batch
// deleted: the walk reads that part there, without moving pending into an
// indexed batch, which would index every write of the batch once more (an
// Expire's walks of the expiry orders and a Lease's of its queue nearly
// always end below it, docs/benchmarks.md). The rest it reads through
// reader. fn must not write.
func (s *Store) Walk(lo, hi []byte, fn func(k, v []byte) bool) {
	s.usable("walk")
	if s.open && s.w == nil && len(lo) > 0 {
		bound := hi
		if low := s.lowSet[lo[0]]; low.v0 != 0 && bytes.Compare(s.arena[low.k0:low.v0], hi) < 0 {
			bound = s.arena[low.k0:low.v0]
		}
		if bytes.Compare(lo, bound) >= 0 {
			iterate(s.reader(), lo, hi, false, fn)
			return
		}
		stopped := false
		iterate(s.db, lo, bound, false, func(k, v []byte) bool {
			if _, ok := s.pending[string(k)]; ok {
				return true // below bound, pending holds deletes only
			}
			stopped = !fn(k, v)
			return !stopped
		})
		if stopped || bytes.Equal(bound, hi) {
			return
		}
		lo = bytes.Clone(bound) // reader may reuse the arena
	}
	iterate(s.reader(), lo, hi, false, fn)
}

// WalkReverse calls fn with the keys and values in [lo, hi) from last to
// first until fn returns false, seeing the open batch's writes (reader).
// fn must not write.
func (s *Store) WalkReverse(lo, hi []byte, fn func(k, v []byte) bool) {
	s.usable("walk")
	iterate(s.reader(), lo, hi, true, fn)
}

// getFrom calls fn with k's value in r (valid only during fn) when k is
// present.
func getFrom(r pebble.Reader, k []byte, fn func(v []byte)) bool {
	v, closer, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		Fail("get", err)
	}
	if fn != nil {
		fn(v)
	}
	_ = closer.Close()
	return true
}

// iterate calls fn with the keys and values in [lo, hi) in order (first to
// last, or last to first with reverse) until fn returns false.
func iterate(r pebble.Reader, lo, hi []byte, reverse bool, fn func(k, v []byte) bool) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		Fail("iterate", err)
	}
	if reverse {
		for ok := it.Last(); ok && fn(it.Key(), it.Value()); ok = it.Prev() {
		}
	} else {
		for ok := it.First(); ok && fn(it.Key(), it.Value()); ok = it.Next() {
		}
	}
	if err := it.Close(); err != nil {
		Fail("iterate", err)
	}
}

// pebbleLogger sends pebble's messages to a slog.Logger (or nowhere).
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...interface{}) {
	if l.log != nil {
		l.log.Debug(fmt.Sprintf(format, args...))
	}
}

func (l pebbleLogger) Errorf(format string, args ...interface{}) {
	if l.log != nil {
		l.log.Error(fmt.Sprintf(format, args...))
	}
}

func (l pebbleLogger) Fatalf(format string, args ...interface{}) {
	Fail("pebble", fmt.Errorf(format, args...))
}
