package manager

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestOutboxCarriesAgainWhatARestoreUnconfirmed: dc1's outbox carries a job
// to dc2 and records dc2's confirmation, then an operator restores dc1's
// ledger from a snapshot taken before it (the restore lands before the
// outbox's next pass), so the restored ledger owes dc2 the job again. The
// leader's memory that the pair was done is of the ledger the restore
// replaced: its next pass must ask dc2 again (a replay there) and record the
// confirmation in the restored ledger, not keep the entry carried, counted
// against MANAGER_OUTBOX_MAX_ENTRIES and never asked again, for the rest of
// its term.
func TestOutboxCarriesAgainWhatARestoreUnconfirmed(t *testing.T) {
	clock := newManualClock()
	dcs := newOutboxDatacenters(t, 2, clock, func(*Config) {}, func(string) bool { return true })
	m1, m2, ob1 := dcs[0].m, dcs[1].m, dcs[0].ob
	ctx := ctxT(t)
	r := submitForBoth(t, ctx, m1, "order-1")

	// A snapshot of dc1's ledger that owes dc2 the job.
	f := m1.Raft().Snapshot()
	if err := f.Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		t.Fatalf("open the snapshot: %v", err)
	}
	state, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("read the snapshot: %v", err)
	}

	clock.Advance(outboxGrace + time.Second)
	ob1.pass(ctx)
	if _, ok := m2.FSM().Job("t", r.JobId); !ok {
		t.Fatal("dc2 does not hold the job after dc1's outbox carried it")
	}
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after dc2 confirmed, want 0", n)
	}

	if err := m1.RestoreLedger(meta, bytes.NewReader(state), time.Minute); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if n := m1.FSM().OutboxLen(); n != 1 {
		t.Fatalf("dc1's restored ledger counts %d entries in the outbox, want 1 (dc2's confirmation is after the snapshot)", n)
	}
	ob1.pass(ctx)
	if n := m1.FSM().OutboxLen(); n != 0 {
		t.Fatalf("dc1's outbox carries %d entries after a pass over the restored ledger, want 0 (dc2 asked again and confirmed)", n)
	}
	if n := m2.FSM().Stats().Jobs; n != 1 {
		t.Fatalf("dc2 holds %d jobs, want 1", n)
	}
}
