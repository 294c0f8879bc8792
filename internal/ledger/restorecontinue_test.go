package ledger

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// TestRestoreMidLogGoesOnAsTheLog applies a random log (with the tenants'
// actions) to a memory FSM without a break, and to a disk FSM that is
// replaced every few hundred entries, in turn, by its own store reopened and
// by a new store restored from the memory FSM's snapshot: a replica that
// restored or restarted mid-log must go on exactly as one that never did:
// every later result, and the snapshots, byte for byte. The memory FSM is
// replaced too, in the other turns, by one restored from the disk's snapshot. Scale 1 fills the
// bounds and expires aggressively, so restores land with bounds full, leases
// due and entries owed.
func TestRestoreMidLogGoesOnAsTheLog(t *testing.T) {
	diskPassOnly(t)
	for _, tc := range []struct{ seed, scale uint64 }{{1, 1}, {5, 1}, {3, 40}} {
		t.Run(fmt.Sprintf("seed=%d,scale=%d", tc.seed, tc.scale), func(t *testing.T) {
			logs := withActions(genLog(tc.seed, 3000, int64(tc.scale)), tc.seed, int64(tc.scale))
			mem := New(Options{})
			dir := t.TempDir()
			disk, err := Open(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := disk.Close(); err != nil {
					t.Error(err)
				}
			}()
			const every = 211 // an odd stride: the swaps fall inside the lifecycle's runs
			for i, l := range logs {
				ra, rb := asResult(mem.Apply(l)), asResult(disk.Apply(l))
				if l.Type == raft.LogCommand && !sameResult(ra, rb) {
					t.Fatalf("index %d: results differ:\nunbroken %+v\nswapped  %+v", l.Index, ra, rb)
				}
				if i%every != every-1 {
					continue
				}
				snap := persist(t, mem)
				if !bytes.Equal(snap, persist(t, disk)) {
					t.Fatalf("after index %d: snapshots differ", l.Index)
				}
				if err := disk.Close(); err != nil {
					t.Fatal(err)
				}
				restoreIt := (i/every)%2 == 1
				if restoreIt {
					dir = t.TempDir()
				}
				if disk, err = Open(dir, Options{}); err != nil {
					t.Fatal(err)
				}
				if restoreIt {
					if err := disk.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(snap, persist(t, disk)) {
					t.Fatalf("after index %d: the reopened or restored store persists other bytes", l.Index)
				}
				if !restoreIt { // and the memory FSM by one restored from the disk's snapshot
					mem = New(Options{})
					if err := mem.Restore(io.NopCloser(bytes.NewReader(persist(t, disk)))); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !bytes.Equal(persist(t, mem), persist(t, disk)) {
				t.Fatal("final snapshots differ")
			}
			checkInvariants(t, mem)
			checkInvariants(t, disk)
		})
	}
}
