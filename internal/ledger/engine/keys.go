package engine

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/once-dev/once/internal/logging"
)

// KeyCounts is an index, in memory, of which keys of chosen prefixes exist
// in a store (in the ledger: its entries and jobs, so which of them exist):
// for each 64-bit hash of a live key, how many live keys have that hash. A point read of a key whose
// hash has no live key is answered "absent" without pebble, which otherwise
// searches both memtables and every level's Bloom filter; that is most of
// the apply path's reads (an Admit's new key and new job ID). A
// hash with live keys is read from pebble as before: a collision costs a
// read, never a wrong answer. 10-20 bytes per live entry or job (hashCounts,
// one word per hash); docs/ledger.md, "Apply".
//
// The caller counts the keys as they join and leave (Add; in the ledger,
// the entries' and the jobs' tables as they insert and delete them). A
// store opened with such keys counts them by a scan in the background, of
// the store as it was opened, so a restart is not slowed by it; until the
// scan is merged, changes are kept as differences (delta) and every point
// read goes to pebble. The hashes are the process's own (maphash): nothing
// of this is stored or replicated, and no result depends on it.
type KeyCounts struct {
	seed  maphash.Seed
	ready bool             // count holds every live key's count
	count *hashCounts      // by tag (hashCounts); with ready
	delta map[uint64]int32 // changes since the scanned view, by tag; before ready

	scanned chan *hashCounts // the scan's counts (buffered)
	stop    atomic.Bool      // asks the scan to end early
	wg      sync.WaitGroup   // the scan
}

// CountKeys gives s the counts of its keys whose first byte is one of
// prefixes, and returns them; Begin merges their scan, Close stops it. items
// is how many such keys s holds: with none, the counts are ready at once;
// else they are scanned in the background from a point-in-time view of s as
// it is now (the set is made that large at once, not grown by doubling), and
// s's logger, when set, is told how the scan ended.
func (s *Store) CountKeys(items uint64, prefixes ...byte) *KeyCounts {
	if items == 0 {
		s.keys = &KeyCounts{seed: maphash.MakeSeed(), ready: true, count: newHashCounts(0)}
		return s.keys
	}
	c := &KeyCounts{seed: maphash.MakeSeed(), delta: map[uint64]int32{}, scanned: make(chan *hashCounts, 1)}
	view, log, starts := s.db.NewSnapshot(), s.opts.Logger, s.opts.Knobs.KeyScanStarts
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		start := time.Now()
		n, err := c.scan(view, prefixes, int(min(items, maxScanHint)), starts)
		switch {
		case log == nil || c.stop.Load():
		case err != nil:
			log.Error("ledger key counts not scanned: reads of absent keys go to pebble", logging.KeyError, err)
		default:
			log.Info("ledger key counts scanned", logging.KeyCount, n, logging.KeyDuration, time.Since(start))
		}
	}()
	s.keys = c
	return c
}

// maxScanHint caps the size the scan's set is made for (~270 MB: a damaged
// counter must not make it allocate more up front; past it the set grows).
const maxScanHint = 1 << 24

// scanStep is how many keys the scan counts between looks at stop.
const scanStep = 4096

// scan counts view's keys of prefixes, and hands the counts over unless
// stopped; it returns how many keys it counted. starts, when set
// (TestingKnobs.KeyScanStarts), is called first.
func (c *KeyCounts) scan(view *pebble.Snapshot, prefixes []byte, items int, starts func()) (n int, err error) {
	defer view.Close()
	if starts != nil {
		starts()
	}
	counts := newHashCounts(items)
	for _, p := range prefixes {
		it, err := view.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
		if err != nil {
			return n, err // never ready: every read goes to pebble, as before
		}
		for ok := it.First(); ok; ok = it.Next() {
			_ = counts.add(c.hash(it.Key()), 1) // an addition never fails
			if n++; n%scanStep == 0 && c.stop.Load() {
				break
			}
		}
		if err := it.Close(); err != nil || c.stop.Load() {
			return n, err
		}
	}
	c.scanned <- counts
	return n, nil
}

func (c *KeyCounts) hash(k []byte) uint64 { return maphash.Bytes(c.seed, k) }

// settle merges a finished scan with the changes since its view. Under the
// FSM's write lock (the start of a batch). A store without counts
// (CountKeys not called) has nothing to merge.
func (c *KeyCounts) settle() {
	if c == nil || c.ready {
		return
	}
	select {
	case counts := <-c.scanned:
		for h, d := range c.delta {
			if err := counts.add(h, int64(d)); err != nil {
				Fail("key counts", err)
			}
		}
		c.count, c.delta, c.ready = counts, nil, true
	default:
	}
}

// Add records that key k joined (d = 1) or left (d = -1) the keys counted.
// Under the FSM's write lock.
func (c *KeyCounts) Add(k []byte, d int32) {
	h := c.hash(k)
	if !c.ready {
		t := tagOf(h) // what the set counts by
		if c.delta[t] += d; c.delta[t] == 0 {
			delete(c.delta, t)
		}
		return
	}
	if err := c.count.add(h, int64(d)); err != nil {
		Fail("key counts", err)
	}
}

// Absent reports that no live key counted is k. Readers call it under the
// read lock.
func (c *KeyCounts) Absent(k []byte) bool {
	if !c.ready {
		return false
	}
	return c.count.get(c.hash(k)) == 0
}

// Keys returns the counts CountKeys gave the store (nil: none).
func (s *Store) Keys() *KeyCounts { return s.keys }

// ScanDone waits for the scan, if any, to end (tests and benchmarks; Begin
// merges it).
func (c *KeyCounts) ScanDone() { c.wg.Wait() }

// Ready reports that the scan is merged: absent keys are answered from the
// counts (tests).
func (c *KeyCounts) Ready() bool { return c.ready }

// Matches reports whether the counts are exactly those of keys, each
// counted once (tests' invariant checks; only when Ready).
func (c *KeyCounts) Matches(keys [][]byte) bool {
	want := newHashCounts(len(keys))
	for _, k := range keys {
		_ = want.add(c.hash(k), 1) // an addition never fails
	}
	for i := range c.count.shards {
		if c.count.shards[i].n != want.shards[i].n {
			return false
		}
		for _, w := range c.count.shards[i].slots {
			if w != 0 && want.get(w) != uint32(w&countMask) {
				return false
			}
		}
	}
	return true
}

// close stops the scan and waits for it.
func (c *KeyCounts) close() {
	c.stop.Store(true)
	c.wg.Wait()
}
