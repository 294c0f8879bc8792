package ledger

import (
	"fmt"
	"testing"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
)

// countingIndex counts the items an order hands to its walks and reads.
type countingIndex[T any] struct {
	index[T]
	visited *int
}

func (c countingIndex[T]) count(fn btree.ItemIteratorG[T]) btree.ItemIteratorG[T] {
	return func(item T) bool { *c.visited++; return fn(item) }
}

func (c countingIndex[T]) Ascend(fn btree.ItemIteratorG[T]) { c.index.Ascend(c.count(fn)) }
func (c countingIndex[T]) AscendGreaterOrEqual(pivot T, fn btree.ItemIteratorG[T]) {
	c.index.AscendGreaterOrEqual(pivot, c.count(fn))
}
func (c countingIndex[T]) DescendLessOrEqual(pivot T, fn btree.ItemIteratorG[T]) {
	c.index.DescendLessOrEqual(pivot, c.count(fn))
}
func (c countingIndex[T]) Get(item T) (T, bool) { *c.visited++; return c.index.Get(item) }
func (c countingIndex[T]) Min() (T, bool)       { *c.visited++; return c.index.Min() }
func (c countingIndex[T]) Max() (T, bool)       { *c.visited++; return c.index.Max() }

// applyAll applies cmds as one batch after index *idx.
func applyAll(t *testing.T, f *FSM, idx *uint64, cmds []Command) {
	t.Helper()
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		*idx++
		logs[i] = &raft.Log{Index: *idx, Type: raft.LogCommand, Data: Encode(c)}
	}
	for i, r := range f.ApplyBatch(logs) {
		if res := r.(Result); res.Outcome != OutcomeReserved && res.Outcome != OutcomeCommitted {
			t.Fatalf("command %d: %+v", i, res)
		}
	}
}

// A new leader's Pending visits the PENDING entries only, not every entry:
// many committed entries (sorting before the pending ones by key) and a few
// pending.
func TestPendingVisitsOnlyPendingEntries(t *testing.T) {
	f := newFSM(t, Options{})
	var idx uint64
	const committed, pending = 3000, 10
	var reserves, commits []Command
	for i := range committed {
		r := reserve(tenant, fmt.Sprintf("a%05d", i), t0)
		r.MaxEntries = 10000
		reserves = append(reserves, r)
		commits = append(commits, commit(r, tCommit))
	}
	for i := range pending {
		r := reserve(tenant, fmt.Sprintf("z%02d", i), t0+int64(i))
		r.MaxEntries = 10000
		reserves = append(reserves, r)
	}
	applyAll(t, f, &idx, reserves)
	applyAll(t, f, &idx, commits)

	visited := 0
	s := f.s
	s.entries = countingIndex[*Entry]{s.entries, &visited}
	s.entryExp = countingIndex[*Entry]{s.entryExp, &visited}
	s.pendAge = countingIndex[*Entry]{s.pendAge, &visited}
	s.multiDC = countingIndex[*Entry]{s.multiDC, &visited}
	got := f.Pending()
	if len(got) != pending {
		t.Fatalf("Pending returned %d entries, want %d", len(got), pending)
	}
	for i, e := range got {
		if e.State != StatePending || e.Key != fmt.Sprintf("z%02d", i) {
			t.Fatalf("entry %d: %s %s, want z%02d PENDING (oldest reservation first)", i, e.Key, e.State, i)
		}
	}
	if visited > pending {
		t.Fatalf("Pending visited %d entries for %d pending (of %d)", visited, pending, committed+pending)
	}
}

// Pending reads in chunks and lets Apply run between them: an Apply from
// the hook between two chunks would deadlock if the read lock were held.
func TestPendingLetsApplyRunBetweenChunks(t *testing.T) {
	f := newFSM(t, Options{})
	var idx uint64
	var reserves []Command
	for i := range 30 {
		reserves = append(reserves, reserve(tenant, fmt.Sprintf("k%02d", i), t0+int64(i)))
	}
	applyAll(t, f, &idx, reserves)

	oldChunk := pendingChunk
	pendingChunk = 7
	between := 0
	pendingBetweenChunks = func() {
		between++
		// Commit one entry an earlier chunk returned and reserve a new one.
		applyAll(t, f, &idx, []Command{commit(reserves[between-1].(Reserve), tCommit),
			reserve(tenant, fmt.Sprintf("new%d", between), t0+100)})
	}
	defer func() { pendingChunk, pendingBetweenChunks = oldChunk, nil }()

	got := f.Pending()
	if between < 4 {
		t.Fatalf("%d pauses between chunks, want at least 4 for 30 entries in chunks of 7", between)
	}
	seen := map[string]bool{}
	for i, e := range got {
		if seen[e.Key] {
			t.Fatalf("%s returned twice", e.Key)
		}
		seen[e.Key] = true
		if i > 0 && !lessEntryReserved(&got[i-1], &e) {
			t.Fatalf("entries %d and %d out of order", i-1, i)
		}
	}
	for _, r := range reserves {
		if !seen[r.(Reserve).Key] {
			t.Fatalf("%s missing", r.(Reserve).Key)
		}
	}
	if st := f.Stats(); st.Committed != between {
		t.Fatalf("%d committed, want %d: the Applies between chunks ran", st.Committed, between)
	}
}
