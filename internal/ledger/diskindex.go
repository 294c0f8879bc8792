package ledger

import (
	"fmt"

	"github.com/google/btree"
)

// diskIndex is an index (index.go) kept in a key range of the store. A
// primary table's value is the item's snapshot record; a secondary order's
// value is the item's key in its primary table, where the item is read.
// Items come back decoded, fresh: nothing read is shared with the store.
type diskIndex[T any] struct {
	st     *store
	prefix byte
	// key appends the item's key in this index (after the prefix).
	key func(dst []byte, item T) []byte

	// A primary table encodes and decodes items and counts them.
	encode func(dst []byte, item T) []byte
	decode func(v []byte) (T, error)
	n      int

	// A secondary order names its primary table.
	primary *diskIndex[T]
}

func (x *diskIndex[T]) fullKey(dst []byte, item T) []byte {
	return x.key(append(dst, x.prefix), item)
}

// scratch returns the store's key buffer for one short-lived key; for the
// mutators only, which run under the write lock.
func (x *diskIndex[T]) scratch(item T) []byte {
	x.st.keyBuf = x.fullKey(x.st.keyBuf[:0], item)
	return x.st.keyBuf
}

func (x *diskIndex[T]) decodeValue(v []byte) T {
	item, err := x.decode(v)
	if err != nil {
		storeFail(fmt.Sprintf("decode %c", x.prefix), err)
	}
	return item
}

// resolve turns a key's value in this index into the item.
func (x *diskIndex[T]) resolve(v []byte) (item T, ok bool) {
	if x.primary == nil {
		return x.decodeValue(v), true
	}
	return x.primary.getKey(v)
}

// getKey reads a primary table's item by its full key.
func (x *diskIndex[T]) getKey(k []byte) (item T, ok bool) {
	ok = getFrom(x.st.r, k, func(v []byte) { item = x.decodeValue(v) })
	return item, ok
}

// Get and Has are readers' calls too (under the read lock, concurrently):
// they build their key in a buffer of their own.
func (x *diskIndex[T]) Get(probe T) (item T, ok bool) {
	k := x.fullKey(make([]byte, 0, 64), probe)
	if x.primary == nil {
		return x.getKey(k)
	}
	var pk []byte
	if !getFrom(x.st.r, k, func(v []byte) { pk = append([]byte(nil), v...) }) {
		return item, false
	}
	return x.primary.getKey(pk)
}

func (x *diskIndex[T]) Has(probe T) bool {
	return getFrom(x.st.r, x.fullKey(make([]byte, 0, 64), probe), nil)
}

// ReplaceOrInsert stores item. Like the B-tree's, the result says whether an
// item of the same key was there; the old item itself is not returned (the
// state never uses it).
func (x *diskIndex[T]) ReplaceOrInsert(item T) (old T, replaced bool) {
	k := x.scratch(item)
	if x.primary == nil {
		replaced = getFrom(x.st.r, k, nil)
		if !replaced {
			x.n++
		}
		x.st.set(k, x.encode(nil, item))
		return old, replaced
	}
	x.st.set(k, x.primary.fullKey(nil, item))
	return old, false
}

func (x *diskIndex[T]) Delete(item T) (old T, deleted bool) {
	k := x.scratch(item)
	if x.primary == nil {
		if deleted = getFrom(x.st.r, k, nil); !deleted {
			return old, false
		}
		x.n--
	}
	x.st.delete(k)
	return old, deleted
}

func (x *diskIndex[T]) Len() int {
	if x.primary != nil {
		panic("ledger: Len of a secondary order")
	}
	return x.n
}

func (x *diskIndex[T]) edge(last bool) (item T, ok bool) {
	iterate(x.st.r, []byte{x.prefix}, prefixEnd(x.prefix), last, func(_, v []byte) bool {
		item, ok = x.resolve(v)
		return false
	})
	return item, ok
}

func (x *diskIndex[T]) Min() (T, bool) { return x.edge(false) }
func (x *diskIndex[T]) Max() (T, bool) { return x.edge(true) }

func (x *diskIndex[T]) Ascend(fn btree.ItemIteratorG[T]) {
	x.ascendFrom([]byte{x.prefix}, fn)
}

func (x *diskIndex[T]) AscendGreaterOrEqual(pivot T, fn btree.ItemIteratorG[T]) {
	x.ascendFrom(x.fullKey(nil, pivot), fn)
}

func (x *diskIndex[T]) ascendFrom(lo []byte, fn btree.ItemIteratorG[T]) {
	iterate(x.st.r, lo, prefixEnd(x.prefix), false, func(_, v []byte) bool {
		item, ok := x.resolve(v)
		if !ok {
			storeFail(fmt.Sprintf("order %c", x.prefix), fmt.Errorf("%w: names a missing item", ErrStore))
		}
		return fn(item)
	})
}

// Keys of the tables (docs/ledger.md, "State on disk").

func entryKey(b []byte, e *Entry) []byte { return keyString(keyString(b, e.Tenant), e.Key) }

func entryExpKey(b []byte, e *Entry) []byte { return entryKey(keyInt64(b, e.ExpiresAt), e) }

func entryReservedKey(b []byte, e *Entry) []byte { return entryKey(keyInt64(b, e.ReservedAt), e) }

func jobKey(b []byte, j *Job) []byte { return keyString(keyString(b, j.Tenant), j.ID) }

func jobSeqKey(b []byte, j *Job) []byte { return keyUint64(keyString(b, j.Tenant), j.Seq) }

func jobTypeKey(b []byte, j *Job) []byte {
	return keyUint64(keyString(keyString(b, j.Tenant), j.Type), j.Seq)
}

func jobExpKey(b []byte, j *Job) []byte {
	return keyString(keyUint64(keyInt64(b, j.ExpiresAt), j.Seq), j.Tenant)
}

func watermarkKey(b []byte, w *Watermark) []byte {
	return keyString(keyString(keyString(b, w.Tenant), w.ClientID), w.Nonce)
}

func watermarkAgeKey(b []byte, w *Watermark) []byte {
	return watermarkKey(keyInt64(b, w.UpdatedAt), w)
}

// Values of the primary tables: snapshot records of the current version.

func decodeEntryValue(v []byte) (*Entry, error) {
	d := &decoder{b: v, base: ErrStore}
	e := decodeEntry(d, snapshotVersion)
	return e, d.finish()
}

func decodeJobValue(v []byte) (*Job, error) {
	d := &decoder{b: v, base: ErrStore}
	j := decodeJob(d)
	return j, d.finish()
}

func decodeWatermarkValue(v []byte) (*Watermark, error) {
	d := &decoder{b: v, base: ErrStore}
	w := decodeWatermark(d, snapshotVersion)
	return w, d.finish()
}

// newDiskTables points a state's indexes at the store, with the primary
// tables' lengths from its meta record.
func (s *state) useStore(st *store, m storeMeta) {
	entries := &diskIndex[*Entry]{st: st, prefix: pfxEntries, key: entryKey,
		encode: appendEntry, decode: decodeEntryValue, n: int(m.entries)}
	jobs := &diskIndex[*Job]{st: st, prefix: pfxJobs, key: jobKey,
		encode: appendJob, decode: decodeJobValue, n: int(m.jobs)}
	wms := &diskIndex[*Watermark]{st: st, prefix: pfxWatermarks, key: watermarkKey,
		encode: appendWatermark, decode: decodeWatermarkValue, n: int(m.watermarks)}
	s.store = st
	s.entries = entries
	s.entryExp = &diskIndex[*Entry]{st: st, prefix: pfxEntryExp, key: entryExpKey, primary: entries}
	s.pendAge = &diskIndex[*Entry]{st: st, prefix: pfxPendAge, key: entryReservedKey, primary: entries}
	s.jobs = jobs
	s.jobSeq = &diskIndex[*Job]{st: st, prefix: pfxJobSeq, key: jobSeqKey, primary: jobs}
	s.jobType = &diskIndex[*Job]{st: st, prefix: pfxJobType, key: jobTypeKey, primary: jobs}
	s.jobExp = &diskIndex[*Job]{st: st, prefix: pfxJobExp, key: jobExpKey, primary: jobs}
	s.wms = wms
	s.wmAge = &diskIndex[*Watermark]{st: st, prefix: pfxWMAge, key: watermarkAgeKey, primary: wms}
	s.applied, s.ledgerTime, s.lastSeq, s.bytes = m.applied, m.ledgerTime, m.lastSeq, m.bytes
	s.pending, s.committed, s.rejected = int(m.pending), int(m.committed), int(m.rejected)
	s.dirtyTenants = map[string]struct{}{}
}
