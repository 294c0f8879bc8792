package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
)

// A committed entry of a command version this build does not read halts the
// ledger: Halted fires (the daemon stops on it), the entry is not applied,
// and neither is anything after it.
func TestUnknownVersionHaltsTheManager(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.submitN("k", 2)
	m := tc.mgrs[0]
	applied := m.FSM().Stats().AppliedIndex

	bad := append([]byte{byte(ledger.TypeAdmit), 200}, 1, 2, 3)
	f := m.Raft().Apply(bad, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("propose: %v", err)
	}
	var he *ledger.HaltError
	if res, ok := f.Response().(ledger.Result); !ok || !errors.As(res.Err, &he) || he.Index != f.Index() ||
		he.Version != 200 || !errors.Is(res.Err, ledger.ErrUnsupportedVersion) {
		t.Fatalf("response %+v, want the halt at index %d", f.Response(), f.Index())
	}
	select {
	case <-m.Halted():
	case <-time.After(5 * time.Second):
		t.Fatal("Halted did not fire")
	}
	if m.FSM().Halted() != he {
		t.Fatalf("FSM().Halted() = %v", m.FSM().Halted())
	}
	// A later entry is committed by Raft but not applied to the ledger.
	later := m.Raft().Apply(ledger.Encode(ledger.Expire{Now: time.Now().UnixNano()}), 5*time.Second)
	if err := later.Error(); err != nil {
		t.Fatalf("propose: %v", err)
	}
	if res := later.Response().(ledger.Result); !errors.Is(res.Err, ledger.ErrHalted) {
		t.Fatalf("a later entry: %+v, want the halt", res)
	}
	if got := m.FSM().Stats().AppliedIndex; got != applied {
		t.Fatalf("applied index %d, want %d (nothing from the bad entry on)", got, applied)
	}
	if r, err := tc.submitToLeader(ctxT(t), "t", "after", "fp", "demo", `1`, 0); err == nil {
		t.Fatalf("a submission after the halt: %+v, want an error", r)
	}
	if _, ok := m.FSM().Entry("t", "after"); ok {
		t.Fatal("a submission after the halt reached the ledger")
	}
}
