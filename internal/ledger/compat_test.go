package ledger

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/hashicorp/raft"
)

// testdata/compat/v4-legacy.snap was persisted by the build before the job
// lifecycle (commit 0eae6b1) after applying the first 80 submissions of
// benchLog{live: 100} (Reserve v2 + Commit v2, one batch each). A log and a
// snapshot of that build must give the same state and the same bytes here,
// on both backends: a state without lifecycle jobs persists as version 4.
func TestOldBuildLogAndSnapshot(t *testing.T) {
	old, err := os.ReadFile("testdata/compat/v4-legacy.snap")
	if err != nil {
		t.Fatal(err)
	}
	if old[len(snapshotMagic)] != snapshotVersion4 {
		t.Fatalf("the golden snapshot is version %d", old[len(snapshotMagic)])
	}
	for _, store := range stores {
		t.Run("store="+store, func(t *testing.T) {
			f := newHarnessOn(t, store).f
			g := &benchLog{live: 100}
			var buf []*raft.Log
			for range 80 {
				f.ApplyBatch(g.next(buf))
			}
			if !bytes.Equal(persist(t, f), old) {
				t.Fatal("the old build's log replays to another snapshot")
			}
			r := newHarnessOn(t, store).f
			if err := r.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(persist(t, r), old) {
				t.Fatal("the old build's snapshot restores to another state")
			}
			checkInvariants(t, r)
			if st := r.Stats(); st.Jobs == 0 || st.Queued+st.Running+st.Succeeded+st.Failed+st.Dead != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
