package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/internal/atomicfile"
)

// putAndSwitch writes k=v into a new generation of st and makes it current,
// the way the ledger's Restore does; it returns the new generation.
func putAndSwitch(t *testing.T, st *Store, k, v string) *Store {
	t.Helper()
	gen, err := st.NewGeneration()
	if err != nil {
		t.Fatal(err)
	}
	gen.Begin()
	gen.Set([]byte(k), []byte(v))
	gen.Commit()
	if err := gen.MakeCurrent(st); err != nil {
		t.Fatal(err)
	}
	return gen
}

// TestMissingCurrentBesideALaterGenerationIsRefused: only a first Open
// killed before writing CURRENT leaves a directory without CURRENT, and then
// only gen-1. A later generation without CURRENT is damage (CURRENT lost or
// deleted): Open refuses it, naming CURRENT, instead of deleting the
// generation and starting an empty store in its place.
func TestMissingCurrentBesideALaterGenerationIsRefused(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen := putAndSwitch(t, st, "k", "v")
	if err := gen.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, currentFile)); err != nil {
		t.Fatal(err)
	}
	st, err = Open(dir, Options{})
	if err == nil {
		st.Close()
	}
	if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), currentFile) {
		t.Fatalf("Open without CURRENT beside gen-2: %v, want ErrStore naming %s", err, currentFile)
	}
	if _, err := os.Stat(genDir(dir, 2)); err != nil {
		t.Fatalf("gen-2 after the refused Open: %v, want it kept", err)
	}
}

// TestFailedSwitchKeepsTheGenerationCurrentMayName: when writing CURRENT
// fails after its rename (the directory's fsync failed: the disk failing),
// CURRENT already names the new generation, and a crash may or may not undo
// that. MakeCurrent's error must not let the caller's Discard delete the
// generation CURRENT names: both are kept, and the next Open goes on with
// whichever CURRENT names.
func TestFailedSwitchKeepsTheGenerationCurrentMayName(t *testing.T) {
	dir := t.TempDir()
	var failWrite atomic.Bool // CURRENT's write fails after its rename
	injected := errors.New("injected: fsync of the directory failed")
	knobs := TestingKnobs{WriteCurrent: func(path string, data []byte) error {
		if !failWrite.Load() {
			return atomicfile.WriteBytes(path, data)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil { // the rename took effect
			t.Error(err)
		}
		return injected
	}}
	st, err := Open(dir, Options{Knobs: knobs})
	if err != nil {
		t.Fatal(err)
	}
	st.Begin()
	st.Set([]byte("k"), []byte("old"))
	st.Commit()
	gen, err := st.NewGeneration()
	if err != nil {
		t.Fatal(err)
	}
	gen.Begin()
	gen.Set([]byte("k"), []byte("new"))
	gen.Commit()

	failWrite.Store(true)
	if err := gen.MakeCurrent(st); !errors.Is(err, injected) || !errors.Is(err, ErrStore) {
		t.Fatalf("MakeCurrent with a failing CURRENT write: %v, want ErrStore and the injected error", err)
	}
	gen.Discard() // what the ledger's Restore does with a failed switch

	// The next Restore's generation does not reuse gen-2, which CURRENT
	// names until a switch succeeds.
	failWrite.Store(false)
	next, err := st.NewGeneration()
	if err != nil {
		t.Fatal(err)
	}
	if next.gen != 3 {
		t.Fatalf("next generation after a failed switch to gen-2: gen-%d, want gen-3", next.gen)
	}
	next.Discard()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after a failed switch: %v", err)
	}
	defer st.Close()
	var got string
	if !st.Get([]byte("k"), func(v []byte) { got = string(v) }) || got != "new" {
		t.Fatalf("k = %q after reopening on the generation CURRENT names, want new", got)
	}
}

// TestOpenMakesCurrentDurableBeforeRemoving: a process killed after
// CURRENT's rename, before the directory's fsync and the removal of the old
// generation, leaves CURRENT naming the new one in the page cache only. The
// next Open goes on with it and removes the old one; were the rename still
// undone by a power failure after that, CURRENT would name a generation that
// is gone and every later Open would refuse. So Open fsyncs the directory
// first, and when that fails it stops and removes nothing.
//
// Failed before Open fsynced the directory.
func TestOpenMakesCurrentDurableBeforeRemoving(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := putAndSwitch(t, st, "k", "v").Close(); err != nil {
		t.Fatal(err)
	}
	// The killed process had not removed gen-1 yet.
	if err := os.MkdirAll(genDir(dir, 1), 0o750); err != nil {
		t.Fatal(err)
	}

	injected := errors.New("injected: fsync failed")
	fail := TestingKnobs{SyncDir: func(string) error { return injected }}
	if st, err = Open(dir, Options{Knobs: fail}); err == nil {
		st.Close()
		t.Fatal("Open with a failing directory fsync succeeded")
	}
	if !errors.Is(err, ErrStore) || !errors.Is(err, injected) {
		t.Fatalf("Open with a failing directory fsync: %v, want ErrStore and the fsync's error", err)
	}
	if _, err := os.Stat(genDir(dir, 1)); err != nil {
		t.Fatalf("gen-1 after an Open that could not make CURRENT durable: %v, want it kept", err)
	}

	var synced []string
	record := TestingKnobs{SyncDir: func(d string) error {
		if _, err := os.Stat(genDir(dir, 1)); err != nil {
			t.Errorf("gen-1 removed before the fsync of %s: %v", d, err)
		}
		synced = append(synced, d)
		return atomicfile.SyncDir(d)
	}}
	if st, err = Open(dir, Options{Knobs: record}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if len(synced) != 1 || synced[0] != dir {
		t.Fatalf("Open fsynced %q, want [%s]", synced, dir)
	}
	if _, err := os.Stat(genDir(dir, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gen-1 after Open: %v, want it removed", err)
	}
	var got string
	if !st.Get([]byte("k"), func(v []byte) { got = string(v) }) || got != "v" {
		t.Fatalf("k = %q, want v", got)
	}
}

// TestGenerationWithoutItsDatabaseIsRefused: a generation that CURRENT
// names whose pebble database is gone (its manifest marker deleted or lost,
// or the directory emptied) is refused, naming the generation, instead of
// being opened as a new, empty store that would start from applied index 0.
func TestGenerationWithoutItsDatabaseIsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, gen string)
	}{
		{"marker removed", func(t *testing.T, gen string) {
			ents, err := os.ReadDir(gen)
			if err != nil {
				t.Fatal(err)
			}
			removed := false
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "marker.manifest.") {
					if err := os.Remove(filepath.Join(gen, e.Name())); err != nil {
						t.Fatal(err)
					}
					removed = true
				}
			}
			if !removed {
				t.Fatal("no manifest marker in the generation")
			}
		}},
		{"directory emptied", func(t *testing.T, gen string) {
			if err := os.RemoveAll(gen); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(gen, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := storeWithOneKey(t)
			c.damage(t, genDir(dir, 1))
			st, err := Open(dir, Options{})
			if err == nil {
				st.Close()
			}
			if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), genDir(dir, 1)) {
				t.Fatalf("Open of a generation without its database: %v, want ErrStore naming %s", err, genDir(dir, 1))
			}
		})
	}
}

// TestSecondOpenOfADirectoryIsRefused: while a store is open, a second Open
// of its directory (in this process or another) is refused, naming the
// directory, before it removes anything: not the generation a Restore of the
// first is writing. Once every generation of the first is closed, the
// directory opens again.
func TestSecondOpenOfADirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	next, err := st.NewGeneration()
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(dir, Options{})
	if err == nil {
		other.Close()
	}
	if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open: %v, want ErrStore naming %s", err, dir)
	}
	if _, err := os.Stat(genDir(dir, 2)); err != nil {
		t.Fatalf("the generation being written after the refused Open: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil {
		t.Fatal("Open while the new generation is still open: not refused")
	}
	next.Discard()
	st, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after every generation closed: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
