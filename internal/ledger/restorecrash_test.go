package ledger

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashDuringRestoreReopens builds the directory each crash point of a
// Restore leaves and reopens it (docs/ledger.md, "Restore"):
//
//   - killed while filling the new generation (CURRENT still names the old
//     one): the old state, and the half-written generation is removed;
//   - killed after CURRENT switched, before the old generation was removed:
//     the restored state, and the old generation is removed;
//   - CURRENT lost beside the restored generation (damage, not a crash):
//     Open refuses with ErrStore naming CURRENT, and deletes nothing.
//
// Coverage of documented promises; the last one failed before the engine
// refused a later generation without CURRENT.
func TestCrashDuringRestoreReopens(t *testing.T) {
	src, _ := populated(t, 41, 900, 900)
	snap := persist(t, src)

	dir := t.TempDir()
	f := openFSM(t, dir, Options{})
	f.ApplyBatch(genLog(42, 200, 30))
	old := persist(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// Killed while filling gen-2: a directory of partial pebble files.
	half := filepath.Join(dir, "gen-2")
	if err := os.MkdirAll(half, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "000004.sst"), []byte("half an sstable"), 0o640); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, dir, Options{})
	if !bytes.Equal(old, persist(t, f)) {
		t.Fatal("reopened after a crash before the switch: not the old state")
	}
	if gens := generations(t, dir); len(gens) != 1 || gens[0] != "gen-1" {
		t.Fatalf("generations after reopening: %v, want [gen-1]", gens)
	}

	// Killed after the switch, before gen-1 was removed: keep a copy of
	// gen-1 across the Restore and put it back.
	keep := t.TempDir()
	if err := os.CopyFS(filepath.Join(keep, "gen-1"), os.DirFS(filepath.Join(dir, "gen-1"))); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "gen-1"), os.DirFS(filepath.Join(keep, "gen-1"))); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, dir, Options{})
	if !bytes.Equal(snap, persist(t, f)) {
		t.Fatal("reopened after a crash after the switch: not the restored state")
	}
	if gens := generations(t, dir); len(gens) != 1 || gens[0] != "gen-2" {
		t.Fatalf("generations after reopening: %v, want [gen-2]", gens)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// CURRENT lost beside gen-2.
	if err := os.Remove(filepath.Join(dir, "CURRENT")); err != nil {
		t.Fatal(err)
	}
	g, err := Open(dir, Options{})
	if err == nil {
		g.Close()
	}
	if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), "CURRENT") {
		t.Fatalf("Open without CURRENT beside gen-2: %v, want ErrStore naming CURRENT", err)
	}
	if gens := generations(t, dir); len(gens) != 1 || gens[0] != "gen-2" {
		t.Fatalf("generations after the refused Open: %v, want [gen-2] kept", gens)
	}
}
