package ledger

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// A restart goes on from the store's applied index and Raft replays the log
// after its snapshot, entries the store has. A snapshot taken during that
// replay would record the store's applied index under the (lower) index
// Raft names it by; Snapshot refuses until the replay has passed the
// store's applied index.
func TestSnapshotRefusedWhileReplaying(t *testing.T) {
	diskPassOnly(t)
	dir := t.TempDir()
	var logs []*raft.Log
	for i := 1; i <= 6; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Type: raft.LogCommand,
			Data: Encode(admit(reserve(tenant, fmt.Sprintf("k%d", i), t0)))})
	}
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(logs)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	f = openFSM(t, dir, Options{})
	// Reopened and nothing replayed yet: the state is the applied index's.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot after open: %v", err)
	}
	snap.Release()
	// Raft replays from its snapshot at index 2.
	f.ApplyBatch(logs[2:4])
	if _, err := f.Snapshot(); !errors.Is(err, ErrReplaying) {
		t.Fatalf("snapshot at replayed index 4 of 6: %v, want ErrReplaying", err)
	}
	f.Apply(logs[4])
	if _, err := f.Snapshot(); !errors.Is(err, ErrReplaying) {
		t.Fatalf("snapshot at replayed index 5 of 6: %v, want ErrReplaying", err)
	}
	f.Apply(logs[5])
	snap, err = f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot once the replay reached the applied index: %v", err)
	}
	defer snap.Release()
	if got := snap.(*Snapshot).applied; got != 6 {
		t.Fatalf("snapshot applied index %d, want 6", got)
	}
	res := f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "k7", t0)))}).(Result)
	if res.Outcome != OutcomeCommitted {
		t.Fatalf("index 7: %+v", res)
	}
	last, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot past the replay: %v", err)
	}
	last.Release()
}
