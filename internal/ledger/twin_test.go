package ledger

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// twin is a memory FSM and a disk FSM driven with the same entries, as the
// model tests drive them: every Result must be the same on both, and so
// must every snapshot.
type twin struct {
	t         testing.TB
	mem, disk *FSM
	dir       string // the disk FSM's
	idx       uint64 // the last entry's raft index
}

func newTwin(t testing.TB) *twin {
	w := &twin{t: t, mem: New(Options{}), dir: t.TempDir()}
	w.disk = w.open()
	t.Cleanup(w.close)
	return w
}

func (w *twin) open() *FSM {
	f, err := Open(w.dir, Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}

func (w *twin) close() {
	if w.disk == nil {
		return
	}
	if err := w.disk.Close(); err != nil {
		w.t.Error(err)
	}
	w.disk = nil
}

// apply applies one entry to both FSMs and returns its Result, the same on
// both; an invalid entry fails the test.
func (w *twin) apply(data []byte) Result {
	w.t.Helper()
	w.idx++
	l := &raft.Log{Index: w.idx, Term: 1, Type: raft.LogCommand, Data: data}
	a, b := asResult(w.mem.Apply(l)), asResult(w.disk.Apply(l))
	if !sameResult(a, b) {
		w.t.Fatalf("entry %d: memory and disk differ:\nmemory %+v\ndisk   %+v", w.idx, a, b)
	}
	if a.Outcome == OutcomeInvalid {
		w.t.Fatalf("entry %d: invalid: %v", w.idx, a.Err)
	}
	return a
}

// swapDisk replaces the disk FSM by its own store reopened, or (reopen
// false) by the memory FSM's snapshot restored into a new directory: either
// must go on as the live one, so both must persist the memory FSM's bytes.
func (w *twin) swapDisk(step int, reopen bool) {
	w.t.Helper()
	snap := persist(w.t, w.mem)
	if !bytes.Equal(snap, persist(w.t, w.disk)) {
		w.t.Fatalf("step %d: memory and disk snapshots differ", step)
	}
	w.close()
	if !reopen {
		w.dir = w.t.TempDir()
	}
	w.disk = w.open()
	if !reopen {
		if err := w.disk.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			w.t.Fatal(err)
		}
	}
	if !bytes.Equal(snap, persist(w.t, w.disk)) {
		w.t.Fatalf("step %d: the disk FSM, reopened or restored, persists other bytes", step)
	}
}

// finish checks that both FSMs persist the same bytes and hold their
// invariants.
func (w *twin) finish() {
	w.t.Helper()
	if !bytes.Equal(persist(w.t, w.mem), persist(w.t, w.disk)) {
		w.t.Fatal("memory and disk snapshots differ")
	}
	checkInvariants(w.t, w.mem)
	checkInvariants(w.t, w.disk)
}
