package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The store keeps a batch's writes aside, the last per key, until a walk or
// the commit needs them in pebble: reads and walks in the batch see every
// write so far, and nothing reaches the database before the commit.
func TestStorePendingWrites(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.close(false) })
	get := func(k string) string {
		t.Helper()
		v := ""
		ok := st.Get([]byte(k), func(b []byte) { v = string(b) })
		if !ok {
			return "<absent>"
		}
		return v
	}
	walk := func(r pebble.Reader) string {
		var out []string
		iterate(r, []byte("k"), []byte("l"), false, func(k, v []byte) bool {
			out = append(out, string(k)+"="+string(v))
			return true
		})
		return strings.Join(out, " ")
	}
	expect := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %q, want %q", what, got, want)
		}
	}

	st.Begin()
	st.Set([]byte("k1"), []byte("a"))
	st.Set([]byte("k2"), []byte("b"))
	st.Commit()

	st.Begin()
	st.Set([]byte("k3"), []byte("c"))
	st.Set([]byte("k3"), []byte("c2")) // the last write wins
	st.Delete([]byte("k1"))            // deletes what an earlier batch wrote
	st.Set([]byte("k4"), []byte("d"))
	st.Delete([]byte("k4")) // deletes what this batch wrote
	expect("k1 deleted in the batch", get("k1"), "<absent>")
	expect("k3 rewritten in the batch", get("k3"), "c2")
	expect("k4 written and deleted", get("k4"), "<absent>")
	expect("k2 from the database", get("k2"), "b")
	if !getFrom(st.db, []byte("k1"), nil) || getFrom(st.db, []byte("k3"), nil) {
		t.Fatal("the database changed before the commit")
	}
	expect("a walk in the batch", walk(st.reader()), "k2=b k3=c2")
	st.Set([]byte("k5"), []byte("e")) // after the walk
	st.Set([]byte("k2"), []byte("b2"))
	expect("k5 after the walk", get("k5"), "e")
	expect("a second walk", walk(st.reader()), "k2=b2 k3=c2 k5=e")
	if getFrom(st.db, []byte("k5"), nil) {
		t.Fatal("a walk wrote to the database before the commit")
	}
	st.Commit()
	expect("after the commit", walk(st.db), "k2=b2 k3=c2 k5=e")
	expect("k1 after the commit", get("k1"), "<absent>")

	// A batch larger than keptPending does not keep its memory for the next.
	big := strings.Repeat("v", 2*keptPending)
	st.Begin()
	st.Set([]byte("k6"), []byte(big))
	st.Commit()
	if cap(st.arena) > keptPending || len(st.pending) != 0 {
		t.Fatalf("after a large batch: arena of %d bytes, %d pending kept", cap(st.arena), len(st.pending))
	}
	if get("k6") != big {
		t.Fatal("the large batch's value")
	}
	st.Begin()
	st.Set([]byte("k7"), []byte("g"))
	expect("a batch after the large one", get("k7"), "g")
	st.Commit()
	expect("and committed", walk(st.db), "k2=b2 k3=c2 k5=e k6="+big+" k7=g")
}

// TestInsertedThenDeletedKey: a key inserted and deleted in one batch is
// written not at all, and never resurrects or hides a key pebble holds: a
// key the batch deleted before inserting it again, and a key whose insert a
// walk moved into the indexed batch before its delete, are deleted in pebble.
func TestInsertedThenDeletedKey(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.close(false)
	held, fresh, walked := []byte("xheld"), []byte("xfresh"), []byte("xwalked")
	st.Begin()
	st.Set(held, []byte("v0"))
	st.Commit()

	st.Begin()
	before := st.writes['x']
	st.Insert(fresh, []byte("v"))
	st.Set(fresh, []byte("v2")) // overwritten: still not in pebble
	st.Delete(fresh)
	st.Delete(held)
	st.Insert(held, []byte("v1")) // back under the same key: pebble holds it
	st.Delete(held)
	st.Commit()
	if n := st.writes['x'] - before; n != 1 {
		t.Errorf("the batch wrote %d keys, want 1 (the delete of the key pebble held)", n)
	}
	for _, k := range [][]byte{held, fresh} {
		if st.Get(k, nil) {
			t.Errorf("%s is present after its delete", k)
		}
	}

	st.Begin()
	st.Insert(walked, []byte("v"))
	st.Walk([]byte("x"), []byte("y"), func(_, _ []byte) bool { return true }) // moves the writes into the indexed batch
	st.Delete(walked)
	st.Commit()
	if st.Get(walked, nil) {
		t.Errorf("%s is present after its delete", walked)
	}
}

// TestPendingKeysSurviveArenaGrowth: the open batch's writes are found by
// their keys, with their last values, while the arena that holds them (and
// the pending map's keys) is reallocated many times over, reused after a
// commit, and dropped after a large batch.
func TestPendingKeysSurviveArenaGrowth(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.close(false)
	key := func(i int) []byte { return fmt.Appendf(nil, "x%06d", i) }
	val := func(i, round int) []byte { return fmt.Appendf(nil, "%d-%d-%s", i, round, strings.Repeat("v", i%97)) }
	want := func(k, v []byte, round string) {
		t.Helper()
		var got []byte
		if !st.Get(k, func(b []byte) { got = bytes.Clone(b) }) || !bytes.Equal(got, v) {
			t.Fatalf("%s: %s = %q, want %q", round, k, got, v)
		}
	}
	for round, n := range []int{20_000, 300, 20_000} {
		name := fmt.Sprintf("round %d", round)
		st.Begin()
		for i := range n {
			st.Set(key(i), val(i, round))
		}
		for i := 0; i < n; i += 3 { // overwritten: the last value wins
			st.Set(key(i), val(i, round+10))
		}
		for i := 0; i < n; i++ {
			v := val(i, round)
			if i%3 == 0 {
				v = val(i, round+10)
			}
			want(key(i), v, name+", pending")
		}
		st.Commit()
		for i := 0; i < n; i += 7 {
			v := val(i, round)
			if i%3 == 0 {
				v = val(i, round+10)
			}
			want(key(i), v, name+", committed")
		}
	}
}

// TestFirstOpenInterrupted: a first Open that stops before its generation
// exists (here pebble refuses the options; a kill -9 or a full disk stops it
// at the same point) leaves a directory that the next Open opens, empty,
// instead of a CURRENT naming a generation that is not there. A first Open
// killed after creating the generation but before writing CURRENT leaves
// that generation and no CURRENT: the next Open goes on with it.
func TestFirstOpenInterrupted(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{MemTableBytes: 1 << 40}); !errors.Is(err, ErrStore) {
		t.Fatalf("Open with a memtable pebble refuses: %v, want ErrStore", err)
	}
	if _, err := os.Stat(filepath.Join(dir, currentFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("CURRENT after a first Open that created no generation: %v, want none", err)
	}
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after an interrupted first Open: %v", err)
	}
	if st.gen != 1 {
		t.Fatalf("opened generation %d, want 1", st.gen)
	}
	st.Walk(nil, nil, func(k, _ []byte) bool { t.Fatalf("key %q in a new store", k); return false })
	st.Begin()
	st.Set([]byte("k"), []byte("v"))
	st.Commit()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The state a kill -9 between the generation's creation and CURRENT
	// leaves: the generation, without CURRENT.
	if err := os.Remove(filepath.Join(dir, currentFile)); err != nil {
		t.Fatal(err)
	}
	st, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open of a generation without CURRENT: %v", err)
	}
	defer st.Close()
	if b, err := os.ReadFile(filepath.Join(dir, currentFile)); err != nil || string(b) != "gen-1\n" {
		t.Fatalf("CURRENT %q (%v), want gen-1", b, err)
	}
}

// storeWithOneKey opens a store in a new directory, commits k=v into its
// first generation and closes it; it returns the directory and the closed
// store.
func storeWithOneKey(t *testing.T) (string, *Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Begin()
	st.Set([]byte("k"), []byte("v"))
	st.Commit()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// TestClosedStore: a closed store refuses to be used with an error (Sync,
// MakeCurrent, NewGeneration: ErrStore) or a StoreError (the methods without
// one, which the ledger turns into an error), and a second Close returns nil.
// pebble itself panics with a plain error on a closed database, which the
// ledger's recovery does not catch.
func TestClosedStore(t *testing.T) {
	dir, st := storeWithOneKey(t)
	noPanic := func(op string, f func() error) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s on a closed store panicked: %v", op, p)
			}
		}()
		if err := f(); op == "Close" && err != nil {
			t.Errorf("second Close = %v, want nil", err)
		} else if op != "Close" && !errors.Is(err, ErrStore) {
			t.Errorf("%s on a closed store = %v, want ErrStore", op, err)
		}
	}
	noPanic("Close", st.Close)
	noPanic("Sync", st.Sync)
	noPanic("MakeCurrent", func() error { return st.MakeCurrent(nil) })
	noPanic("NewGeneration", func() error { _, err := st.NewGeneration(); return err })
	storeError := func(op string, f func()) {
		t.Helper()
		defer func() {
			var se *StoreError
			if p := recover(); p == nil {
				t.Errorf("%s on a closed store did not fail", op)
			} else if err, ok := p.(error); !ok || !errors.As(err, &se) {
				t.Errorf("%s on a closed store panicked with %v, want a *StoreError", op, p)
			}
		}()
		f()
	}
	storeError("Get", func() { st.Get([]byte("k"), nil) })
	storeError("Walk", func() { st.Walk([]byte("a"), []byte("z"), func(_, _ []byte) bool { return true }) })
	storeError("WalkReverse", func() { st.WalkReverse([]byte("a"), []byte("z"), func(_, _ []byte) bool { return true }) })
	storeError("Begin", st.Begin)
	storeError("View", func() { st.View() })

	st.Discard() // after Close: does nothing, removes nothing

	// Closing twice flushed nothing twice and lost nothing.
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Get([]byte("k"), nil) {
		t.Fatal("k lost after a double Close")
	}
}
