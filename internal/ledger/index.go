package ledger

import "github.com/google/btree"

// index is one ordered table of the state: the entries, the jobs, the
// watermarks, or one of their secondary orders. The in-memory state uses
// github.com/google/btree directly (a *btree.BTreeG satisfies index); the
// disk-backed state uses a key range of its store (diskindex.go). The state's
// logic (state.go) is written once, against this interface, so both backends
// apply every command alike, which the determinism tests check byte for byte.
//
// Items are immutable: a change inserts a new item and deletes the old one.
// Len is the number of items for a primary table (entries, jobs, watermarks);
// the state never asks it of a secondary order.
type index[T any] interface {
	Get(item T) (T, bool)
	Has(item T) bool
	ReplaceOrInsert(item T) (T, bool)
	Delete(item T) (T, bool)
	Min() (T, bool)
	Len() int
	Ascend(fn btree.ItemIteratorG[T])
	AscendGreaterOrEqual(pivot T, fn btree.ItemIteratorG[T])
	DescendLessOrEqual(pivot T, fn btree.ItemIteratorG[T])
}

// records is what a snapshot streams of one primary table: its length and
// its items as snapshot records (the current version's layout), in key order.
type records interface {
	Len() int
	each(fn func(rec []byte) bool) error
}

// treeRecords streams a clone of an in-memory table, encoding each item.
type treeRecords[T any] struct {
	tree   *btree.BTreeG[T]
	encode func(dst []byte, item T) []byte
}

// cloneRecords streams a clone of x, an in-memory table or the memory side
// of a mirror (the owed entries on disk).
func cloneRecords[T any](x index[T], encode func(dst []byte, item T) []byte) records {
	tree, ok := x.(*btree.BTreeG[T])
	if !ok {
		tree = x.(*mirror[T]).BTreeG
	}
	return treeRecords[T]{tree.Clone(), encode}
}

func (r treeRecords[T]) Len() int { return r.tree.Len() }

func (r treeRecords[T]) each(fn func(rec []byte) bool) error {
	var rec []byte
	r.tree.Ascend(func(item T) bool {
		rec = r.encode(rec[:0], item)
		return fn(rec)
	})
	return nil
}
