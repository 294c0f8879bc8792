package ledger

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/once-dev/once/internal/ledger/engine"
)

// diskIndex is an index (index.go) kept in a key range of the store. A
// primary table's value is the item's snapshot record; a secondary order's
// value is the item's key in its primary table, where the item is read.
// Items come back decoded, fresh: nothing read is shared with the store.
type diskIndex[T any] struct {
	st *engine.Store
	order[T]

	// A primary table encodes and decodes items. Its writes are blind (no
	// read first): the state inserts only absent items, replaces and deletes
	// only present ones, and counts them itself (count).
	encode func(dst []byte, item T) []byte
	decode func(v []byte) (T, error)
	count  func() int
	// keys, for the entries and the jobs, counts their keys as they are
	// inserted and deleted, and answers a point read of an absent key
	// without pebble (engine/keys.go).
	keys *engine.KeyCounts
	// keepRemoved: TestingKnobs.KeepRemoved, for the entries and the jobs.
	keepRemoved bool

	// A secondary order names its primary table. With copies, its values are
	// the items' records themselves, not their primary keys: the expiry
	// orders, whose walk reaches the oldest items (cold in the cache), so a
	// removal reads the order's own value instead of a random primary block.
	primary *diskIndex[T]
	copies  bool

	// floor is a key at or below every key of the index (nil: the prefix's
	// start). Finding the smallest item sets it to that item's key; inserting
	// below it lowers it. Searches from the start begin there, so they do not
	// walk the tombstones of everything removed from the front before (the
	// expiry orders are queues, and a queue's front in an LSM tree is a field
	// of tombstones until compaction drops them). Readers set it too, under
	// the read lock, hence atomic.
	floor atomic.Pointer[[]byte]

	// group, when set, appends the key of the item's group (after the
	// prefix): a per-tenant queue (the Lease's walks) or a per-(tenant,
	// state) order (listing by state). floors keeps, per group, a key at or
	// below every key of the group, lowered by inserts, as floor does for
	// the whole order: a queue's front is a field of tombstones until
	// compaction, and a walk must not cross them every time. A walk from
	// the group's least possible key (its pivot's key past the group all
	// zero bytes: the Lease's walks, a listing's first page) or from its
	// floor sets the floor to the first key it finds; a walk from further
	// in (a listing's later page) starts there and leaves the floor alone.
	// Readers walk under the FSM's read lock, concurrently with each other
	// (never with the apply path): mu guards floors.
	group  func(dst []byte, item T) []byte
	mu     sync.Mutex
	floors map[string][]byte
	// emptyCap, when not 0, bounds what floors costs for groups whose names
	// come from requests (a Lease's types): floors then keeps the groups
	// that held a key at their last walk, and emptyFloors at most emptyCap
	// groups a walk found empty (cleared when full). A group without keys
	// thus leaves floors at its next walk, and a name never queued costs at
	// most a place in emptyFloors. Only the apply path walks such an order,
	// so both maps follow from the log alone.
	emptyCap    int
	emptyFloors map[string][]byte

	// Scratch for a key, a value and a group's name, used by the mutators
	// only, under the FSM's write lock.
	keyBuf, valBuf, groupBuf []byte
}

// maxEmptyTypeFloors bounds the floors kept for (tenant, type) queue groups
// found empty (diskIndex.emptyCap).
const maxEmptyTypeFloors = 1024

// start is where a search from the smallest item begins.
func (x *diskIndex[T]) start() []byte {
	if f := x.floor.Load(); f != nil {
		return *f
	}
	return []byte{x.prefix}
}

func (x *diskIndex[T]) fullKey(dst []byte, item T) []byte {
	return x.key(append(dst, x.prefix), item)
}

// scratch returns item's key in keyBuf, for one short-lived use.
func (x *diskIndex[T]) scratch(item T) []byte {
	x.keyBuf = x.fullKey(x.keyBuf[:0], item)
	return x.keyBuf
}

func (x *diskIndex[T]) decodeValue(v []byte) T {
	item, err := x.decode(v)
	if err != nil {
		engine.Fail(fmt.Sprintf("decode %c", x.prefix), err)
	}
	return item
}

// storeValue decodes a value of a primary table: a snapshot record, its
// strings parts of one copy of it (decoder's share). Made in useStore, with
// decode known there, its decoder does not escape to the heap.
func storeValue[T any](decode func(*decoder) T) func([]byte) (T, error) {
	return func(v []byte) (T, error) {
		d := &decoder{b: v, base: ErrStore, share: true}
		item := decode(d)
		return item, d.finish()
	}
}

// resolve turns a key's value in this index into the item: a secondary
// order's value (without copies) is the item's key in its primary table.
func (x *diskIndex[T]) resolve(v []byte) (item T, ok bool) {
	switch {
	case x.primary == nil:
		return x.decodeValue(v), true
	case x.copies:
		return x.primary.decodeValue(v), true
	}
	ok = x.st.Get(v, func(v []byte) { item = x.primary.decodeValue(v) })
	return item, ok
}

// item is resolve for a walk: an order that names a missing item is a
// damaged store.
func (x *diskIndex[T]) item(v []byte) T {
	item, ok := x.resolve(v)
	if !ok {
		engine.Fail(fmt.Sprintf("order %c", x.prefix), fmt.Errorf("%w: names a missing item", ErrStore))
	}
	return item
}

// Get and Has are readers' calls too (under the read lock, concurrently):
// they build their key in a buffer of their own.
func (x *diskIndex[T]) Get(probe T) (item T, ok bool) {
	k := x.fullKey(make([]byte, 0, 64), probe)
	if x.keys != nil && x.keys.Absent(k) {
		return item, false
	}
	x.st.Get(k, func(v []byte) { item, ok = x.resolve(v) })
	return item, ok
}

func (x *diskIndex[T]) Has(probe T) bool {
	return x.st.Get(x.fullKey(make([]byte, 0, 64), probe), nil)
}

// ReplaceOrInsert stores item. Unlike the B-tree's, it does not say what was
// there (the state never asks; a read would cost more than the write). A
// secondary order whose values are primary keys (not copies) writes nothing:
// it replaces only a present item (blind writes, above), whose key there
// already holds the same primary key, the same bytes.
func (x *diskIndex[T]) ReplaceOrInsert(item T) (old T, replaced bool) {
	if x.primary == nil || x.copies {
		x.put(item, false)
	}
	return old, false
}

// insert puts the state's items into x where they are not (engine's Insert):
// insertEntry, insertJob, and reorder moving an item to another key. In
// memory, ReplaceOrInsert.
func insert[T any](x index[T], item T) {
	if dx, ok := x.(*diskIndex[T]); ok {
		dx.put(item, true)
		return
	}
	x.ReplaceOrInsert(item)
}

func (x *diskIndex[T]) put(item T, fresh bool) {
	k := x.scratch(item)
	if f := x.floor.Load(); f != nil && bytes.Compare(k, *f) < 0 {
		lower := bytes.Clone(k)
		x.floor.Store(&lower)
	}
	if x.group != nil {
		// The group's name is built in scratch and looked up without a
		// string of its own: one is made only when a floor moves.
		x.groupBuf = x.group(x.groupBuf[:0], item)
		gb := x.groupBuf
		x.mu.Lock()
		if f, ok := x.floors[string(gb)]; ok && bytes.Compare(k, f) < 0 {
			x.floors[string(gb)] = bytes.Clone(k)
		} else if f, ok := x.emptyFloors[string(gb)]; ok { // the group has a key again
			g := string(gb)
			delete(x.emptyFloors, g)
			if bytes.Compare(k, f) < 0 {
				f = bytes.Clone(k)
			}
			x.floors[g] = f // not nil: emptyFloors is filled by a walk, which made floors
		}
		x.mu.Unlock()
	}
	// The batch copies what it is given: the value is built in scratch, as
	// the key is.
	v := x.valBuf[:0]
	switch {
	case x.primary == nil:
		v = x.encode(v, item)
	case x.copies:
		v = x.primary.encode(v, item)
	default:
		v = x.primary.fullKey(v, item)
	}
	x.valBuf = v
	if fresh {
		if x.keys != nil {
			x.keys.Add(k, 1)
		}
		x.st.Insert(k, v)
	} else {
		x.st.Set(k, v)
	}
}

// Delete removes item's key (blind, like ReplaceOrInsert).
func (x *diskIndex[T]) Delete(item T) (old T, deleted bool) {
	k := x.scratch(item)
	if x.keys != nil {
		x.keys.Add(k, -1)
		if x.keepRemoved {
			return old, false
		}
	}
	x.st.Delete(k)
	return old, false
}

func (x *diskIndex[T]) Len() int {
	if x.count == nil {
		panic("ledger: Len of a secondary order")
	}
	return x.count()
}

// Min finds the least item, and moves the floor up to its key.
func (x *diskIndex[T]) Min() (item T, ok bool) {
	x.st.Walk(x.start(), prefixEnd(x.prefix), func(k, v []byte) bool {
		item, ok = x.resolve(v)
		min := bytes.Clone(k)
		x.floor.Store(&min)
		return false
	})
	return item, ok
}

// Ascend walks from the floor and, like Min, moves the floor up to the
// least key it finds.
func (x *diskIndex[T]) Ascend(fn btree.ItemIteratorG[T]) {
	var first []byte
	x.ascendFrom(x.start(), &first, fn)
	if first != nil {
		x.floor.Store(&first)
	}
}

func (x *diskIndex[T]) AscendGreaterOrEqual(pivot T, fn btree.ItemIteratorG[T]) {
	lo := x.fullKey(nil, pivot)
	if x.group == nil {
		x.ascendFrom(lo, nil, fn)
		return
	}
	gk := x.group(nil, pivot)
	g := string(gk)
	fromLeast := len(bytes.TrimLeft(lo[1+len(gk):], "\x00")) == 0 // the pivot's key past its group is all zero bytes
	f, known := x.groupFloor(g)
	fromFloor := known && bytes.Compare(f, lo) >= 0
	if fromFloor {
		lo = f
	}
	var first []byte
	x.ascendFrom(lo, &first, fn)
	if !fromFloor && !fromLeast {
		return
	}
	seen := first != nil
	if !seen {
		first = prefixEnd(x.prefix) // no key at all: every key of the group is at or past it
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.floors == nil {
		x.floors = map[string][]byte{}
	}
	if x.emptyCap == 0 {
		x.floors[g] = first
		return
	}
	// The group is empty when the walk found no key of it.
	if seen && bytes.HasPrefix(first[1:], gk) && first[0] == x.prefix {
		delete(x.emptyFloors, g)
		x.floors[g] = first
		return
	}
	delete(x.floors, g)
	if x.emptyFloors == nil || len(x.emptyFloors) >= x.emptyCap {
		x.emptyFloors = make(map[string][]byte)
	}
	x.emptyFloors[g] = first
}

// groupFloor returns group g's floor, if a walk has set one.
func (x *diskIndex[T]) groupFloor(g string) ([]byte, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f, known := x.floors[g]
	if !known {
		f, known = x.emptyFloors[g]
	}
	return f, known
}

// DescendLessOrEqual walks from pivot's key down, in reverse key order. An
// order with groups bounds the walk below by the pivot's group (its least
// possible key, or the group's floor when a walk has set it), so a walk that
// reaches the group's front stops there instead of crossing the tombstones
// below it; it leaves the floors alone. Readers call it under the FSM's read
// lock.
func (x *diskIndex[T]) DescendLessOrEqual(pivot T, fn btree.ItemIteratorG[T]) {
	hi := append(x.fullKey(nil, pivot), 0) // the least key after pivot's: hi is exclusive
	lo := x.start()
	if x.group != nil {
		gk := x.group(nil, pivot)
		if least := append([]byte{x.prefix}, gk...); bytes.Compare(least, lo) > 0 {
			lo = least
		}
		if f, known := x.groupFloor(string(gk)); known && bytes.Compare(f, lo) > 0 {
			lo = f
		}
	}
	if bytes.Compare(lo, hi) >= 0 {
		return // every key of the group is past pivot's
	}
	x.st.WalkReverse(lo, hi, func(_, v []byte) bool { return fn(x.item(v)) })
}

// ascendFrom calls fn with the items from key lo on, in key order; with
// first, it sets *first to a copy of the first key it finds.
func (x *diskIndex[T]) ascendFrom(lo []byte, first *[]byte, fn btree.ItemIteratorG[T]) {
	x.st.Walk(lo, prefixEnd(x.prefix), func(k, v []byte) bool {
		if first != nil {
			*first, first = bytes.Clone(k), nil
		}
		return fn(x.item(v))
	})
}

// removedFront tells x that items, the least of it in order, have been
// removed: nothing at or below the last remains but what was inserted since,
// and an insert lowers the floor itself. On disk the floor moves past them,
// so the next walk from the front starts at the first item left instead of
// crossing their tombstones (removeDue walks the expiry orders in chunks). A
// no-op in memory.
func removedFront[T any](x index[T], items []T) {
	dx, ok := x.(*diskIndex[T])
	if !ok || len(items) == 0 {
		return
	}
	past := append(dx.fullKey(nil, items[len(items)-1]), 0) // the least key after it
	if f := dx.floor.Load(); f == nil || bytes.Compare(*f, past) < 0 {
		dx.floor.Store(&past)
	}
}

// mirror is a table kept in memory for reads and written through to the
// store: the watermarks. A client's watermark is rewritten by every commit of
// that client, and an LSM tree holds every version of a key rewritten that
// often until it flushes and compacts, so reading it there costs more with
// every version; the table is bounded (IDEMPOTENCY_WATERMARK_MAX_CLIENTS) and
// small per item, so memory holds it, and the store holds it durably for the
// next open (newMirror). The owed entries are kept the same way.
type mirror[T any] struct {
	*btree.BTreeG[T]
	disk *diskIndex[T]
}

func (m *mirror[T]) ReplaceOrInsert(item T) (T, bool) {
	m.disk.ReplaceOrInsert(item)
	return m.BTreeG.ReplaceOrInsert(item)
}

func (m *mirror[T]) Delete(item T) (T, bool) {
	m.disk.Delete(item)
	return m.BTreeG.Delete(item)
}

// newMirror returns tree, a table in memory, written through to disk, with
// what disk holds read into it. O(items).
func newMirror[T any](tree index[T], disk *diskIndex[T]) *mirror[T] {
	m := &mirror[T]{tree.(*btree.BTreeG[T]), disk}
	disk.st.Walk([]byte{disk.prefix}, prefixEnd(disk.prefix), func(_, v []byte) bool {
		m.BTreeG.ReplaceOrInsert(disk.decodeValue(v))
		return true
	})
	return m
}

// loadRunning builds the in-memory orders of the RUNNING jobs (jobLeaseID,
// jobDue, jobLeaseExp) from jobRunning. O(jobs running).
func (s *state) loadRunning() {
	s.jobRunning.Ascend(func(j *Job) bool {
		k := runKeyOf(j).kept()
		s.jobLeaseID.ReplaceOrInsert(k)
		s.jobDue.ReplaceOrInsert(k)
		s.jobLeaseExp.ReplaceOrInsert(k)
		return true
	})
}

// The keys of the tables and orders are declared in orders.go.

// useStore points a state's indexes at the store, with the primary
// tables' lengths from its meta record, and reads what the state keeps in
// memory of it: the mirrors (wmAge with them), multiDC's length and the
// owed entries counted with a live one (owedLive). O(watermarks + entries
// carried + owed entries).
func (s *state) useStore(st *engine.Store, m storeMeta) {
	keys := st.CountKeys(m.entries+m.jobs, pfxEntries, pfxJobs)
	entries := &diskIndex[*Entry]{st: st, order: entryOrder,
		encode: appendEntry, decode: storeValue(decodeEntry), keys: keys, keepRemoved: s.knobs.KeepRemoved,
		count: func() int { return sum(s.entryStates[:]) }}
	jobs := &diskIndex[*Job]{st: st, order: jobOrder,
		encode: appendJob, decode: storeValue(decodeJob), keys: keys, keepRemoved: s.knobs.KeepRemoved,
		count: func() int { return sum(s.jobStates[:]) }}
	s.store = st
	s.entries = entries
	s.entryExp = &diskIndex[*Entry]{st: st, order: entryExpOrder, primary: entries, copies: true}
	s.multiDC = &diskIndex[*Entry]{st: st, order: multiDCOrder, primary: entries}
	s.jobs = jobs
	s.jobSeq = &diskIndex[*Job]{st: st, order: jobSeqOrder, primary: jobs}
	s.jobType = &diskIndex[*Job]{st: st, order: jobTypeOrder, primary: jobs}
	s.jobExp = &diskIndex[*Job]{st: st, order: jobExpOrder, primary: jobs, copies: true}
	s.jobQueue = &diskIndex[*Job]{st: st, order: jobQueueOrder, primary: jobs, group: jobTenantGroup}
	s.jobQueueType = &diskIndex[*Job]{st: st, order: jobQueueTypeOrder, primary: jobs, group: jobTypeGroup,
		emptyCap: maxEmptyTypeFloors}
	s.jobRunning = &diskIndex[*Job]{st: st, order: jobRunningOrder, primary: jobs, group: jobTenantGroup}
	s.jobState = &diskIndex[*Job]{st: st, order: jobStateOrder, primary: jobs, group: jobStateGroup}
	s.wms = newMirror(s.wms, &diskIndex[*Watermark]{st: st, order: watermarkOrder,
		encode: appendWatermark, decode: storeValue(decodeWatermark)})
	s.wms.Ascend(func(w *Watermark) bool { // wmAge stays a B-tree in memory
		s.wmAge.ReplaceOrInsert(w)
		return true
	})
	s.owed = newMirror(s.owed, &diskIndex[*Entry]{st: st, order: owedOrder,
		encode: appendEntry, decode: storeValue(decodeEntry)})
	st.Walk([]byte{pfxMultiDC}, prefixEnd(pfxMultiDC), func(_, _ []byte) bool {
		s.multiDCLen++
		return true
	})
	s.applied, s.ledgerTime, s.lastSeq, s.bytes = m.applied, m.ledgerTime, m.lastSeq, m.bytes
	s.entryStates[StateCommitted], s.entryStates[StateRejected], s.entryStates[StateClaimed] =
		int(m.committed), int(m.rejected), int(m.claimed)
	s.jobStates = [JobCancelled + 1]int{int(m.jobs) - int(m.queued+m.running+m.succeeded+m.failed+m.dead+m.cancelled),
		int(m.queued), int(m.running), int(m.succeeded), int(m.failed), int(m.dead), int(m.cancelled)}
	s.dirtyTenants = map[string]tenantCounts{}
	if s.knobs.OrdersInMemory {
		s.ordersInMemory()
	}
	s.countOwedLive()
}
