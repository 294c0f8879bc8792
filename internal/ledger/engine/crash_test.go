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
