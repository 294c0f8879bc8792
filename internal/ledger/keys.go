package ledger

import (
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/once-dev/once/internal/logging"
)

// keyCounts is the disk-backed state's index of which entries and jobs
// exist, in memory: for each 64-bit hash of a live entry's or job's key in
// the store, how many live keys have that hash. A point read of a key whose
// hash has no live key is answered "absent" without pebble, which otherwise
// searches both memtables and every level's Bloom filter; that is most of
// the apply path's reads (an Admit's new key and new job ID). A
// hash with live keys is read from pebble as before: a collision costs a
// read, never a wrong answer. 10-20 bytes per live entry or job (hashCounts,
// one word per hash); docs/ledger.md, "Apply".
//
// The state counts its items as they join and leave the tables
// (insertEntry, removeEntry, insertJob, removeJob: the only ways in and
// out). A store opened with items counts them by a scan in the background,
// of the store as it was opened, so a restart is not slowed by it; until the
// scan is merged, changes are kept as differences (delta) and every point
// read goes to pebble. The hashes are the process's own (maphash): nothing
// of this is stored or replicated, and no result depends on it.
type keyCounts struct {
	seed  maphash.Seed
	ready bool             // count holds every live key's count
	count *hashCounts      // by tag (hashCounts); with ready
	delta map[uint64]int32 // changes since the scanned view, by tag; before ready

	scanned chan *hashCounts // the scan's counts (buffered)
	stop    atomic.Bool      // asks the scan to end early
	wg      sync.WaitGroup   // the scan
}

// newKeyCounts returns the counts of an empty store: ready.
func newKeyCounts() *keyCounts {
	return &keyCounts{seed: maphash.MakeSeed(), ready: true, count: newHashCounts(0)}
}

// scanKeyCounts returns counts to be filled by a scan of view (a
// point-in-time view of the store, which the scan closes), started here;
// items is how many entries and jobs the view holds (the map is made that
// large at once, not grown by doubling). log, when set, is told how the
// scan ended.
func scanKeyCounts(view *pebble.Snapshot, items uint64, log *slog.Logger, starts func()) *keyCounts {
	c := &keyCounts{seed: maphash.MakeSeed(), delta: map[uint64]int32{}, scanned: make(chan *hashCounts, 1)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		start := time.Now()
		n, err := c.scan(view, int(min(items, maxScanHint)), starts)
		switch {
		case log == nil || c.stop.Load():
		case err != nil:
			log.Error("ledger key counts not scanned: reads of absent keys go to pebble", logging.KeyError, err)
		default:
			log.Info("ledger key counts scanned", logging.KeyCount, n, logging.KeyDuration, time.Since(start))
		}
	}()
	return c
}

// maxScanHint caps the size the scan's set is made for (~270 MB: a damaged
// counter must not make it allocate more up front; past it the set grows).
const maxScanHint = 1 << 24

// scanStep is how many keys the scan counts between looks at stop.
const scanStep = 4096

// scan counts view's entries and jobs, and hands the counts over unless
// stopped; it returns how many keys it counted. starts, when set
// (TestingKnobs.KeyScanStarts), is called first.
func (c *keyCounts) scan(view *pebble.Snapshot, items int, starts func()) (n int, err error) {
	defer view.Close()
	if starts != nil {
		starts()
	}
	counts := newHashCounts(items)
	for _, p := range []byte{pfxEntries, pfxJobs} {
		it, err := view.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: prefixEnd(p)})
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

func (c *keyCounts) hash(k []byte) uint64 { return maphash.Bytes(c.seed, k) }

// settle merges a finished scan with the changes since its view. Under the
// FSM's write lock (the start of a batch). A store without a state (its
// own tests) has no counts.
func (c *keyCounts) settle() {
	if c == nil || c.ready {
		return
	}
	select {
	case counts := <-c.scanned:
		for h, d := range c.delta {
			if err := counts.add(h, int64(d)); err != nil {
				storeFail("key counts", err)
			}
		}
		c.count, c.delta, c.ready = counts, nil, true
	default:
	}
}

// add records that the item of full key k joined (d = 1) or left (d = -1)
// its table. Under the FSM's write lock.
func (c *keyCounts) add(k []byte, d int32) {
	h := c.hash(k)
	if !c.ready {
		t := tagOf(h) // what the set counts by
		if c.delta[t] += d; c.delta[t] == 0 {
			delete(c.delta, t)
		}
		return
	}
	if err := c.count.add(h, int64(d)); err != nil {
		storeFail("key counts", err)
	}
}

// absent reports that no live entry or job has full key k. Readers call it
// under the read lock.
func (c *keyCounts) absent(k []byte) bool {
	if !c.ready {
		return false
	}
	return c.count.get(c.hash(k)) == 0
}

// scanDone waits for the scan, if any, to end (tests and benchmarks; the
// state merges it at the next batch).
func (c *keyCounts) scanDone() { c.wg.Wait() }

// close stops the scan and waits for it.
func (c *keyCounts) close() {
	c.stop.Store(true)
	c.wg.Wait()
}
