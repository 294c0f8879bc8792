package managerd

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// operatorOf is the Operator service managerd serves on m (main.go), without
// gossip pools: the Raft and snapshot methods need none.
func operatorOf(t *testing.T, m *manager.Manager) operator {
	return operator{m: m, node: m.Config().NodeID, log: testutil.Logger(t), fed: &federation{}}
}

func submit(t *testing.T, m *manager.Manager, key string) *rpcpb.SubmitResponse {
	t.Helper()
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key, WaitMillis: 5000,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`)}}
	res, err := m.Submit(t.Context(), req)
	if err != nil || res.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit %s: %+v %v", key, res, err)
	}
	return res
}

// wantCode fails unless err is an *rpc.Error of code.
func wantCode(t *testing.T, what string, err error, code rpc.Code) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("%s: %v; want an error of code %s", what, err, code)
	}
}

// TestRestoreRefusesAStateTheLedgerDoesNotRead: an archive whose checksums
// hold but whose state.bin the ledger refuses (another format version, as a
// newer build writes) is refused before raft.Restore, which would have
// stored it as the newest snapshot and then panicked when the ledger refused
// it: the leader stays up, leads, and keeps every acknowledged job.
func TestRestoreRefusesAStateTheLedgerDoesNotRead(t *testing.T) {
	c := managertest.Start(t, managertest.Options{})
	m := c.Leader(t)
	submit(t, m, "k1")
	op := operatorOf(t, m)
	var archive bytes.Buffer
	if err := op.Snapshot(t.Context(), &archive); err != nil {
		t.Fatal(err)
	}
	meta, state, err := readArchive(bytes.NewReader(archive.Bytes()), maxRestoreBytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		damage    func([]byte)
	}{
		{"a future format version", "k-version", func(b []byte) { b[8]++ }},  // the version byte after the magic
		{"a damaged CRC", "k-crc", func(b []byte) { b[len(b)-1] ^= 0xff }},   // the ledger's own CRC-32C
		{"another magic", "k-magic", func(b []byte) { copy(b, "NOTONCE!") }}, // not a ledger snapshot
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(state)
			tc.damage(bad)
			var forged bytes.Buffer
			if err := writeArchive(&forged, meta, bytes.NewReader(bad)); err != nil {
				t.Fatal(err)
			}
			wantCode(t, "restore", op.Restore(t.Context(), &forged), rpc.CodeInvalid)
			if l := c.Leader(t); l != m {
				t.Fatalf("the leader changed to %s", l.Config().NodeID)
			}
			submit(t, m, tc.key)
			if _, ok := m.FSM().Entry("t", "k1"); !ok {
				t.Fatal("the job admitted before the refused restore is gone")
			}
		})
	}
}

// TestRestoreKeepsTheArchivesJobs: a good archive restores, through the check
// above, every job admitted before it was saved, and none admitted after.
func TestRestoreKeepsTheArchivesJobs(t *testing.T) {
	c := managertest.Start(t, managertest.Options{Managers: 3})
	m := c.Leader(t)
	submit(t, m, "before")
	op := operatorOf(t, m)
	var archive bytes.Buffer
	if err := op.Snapshot(t.Context(), &archive); err != nil {
		t.Fatal(err)
	}
	submit(t, m, "after")
	if err := op.Restore(t.Context(), &archive); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, r := range c.Managers {
			_, before := r.FSM().Entry("t", "before")
			_, after := r.FSM().Entry("t", "after")
			if !before || after {
				return false, "every replica to hold the archive's job and not the later one"
			}
		}
		return true, ""
	})
}
