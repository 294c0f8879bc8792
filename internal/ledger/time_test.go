package ledger

import "testing"

func TestLedgerTimeIsTheHighestAppliedStamp(t *testing.T) {
	h := newHarness(t)
	if got := h.f.LedgerTime(); got != 0 {
		t.Fatalf("empty FSM: ledger time %d, want 0", got)
	}
	r := reserve("acme", "k1", t0)
	steps := []struct {
		name string
		cmd  Command
		want int64
	}{
		{"admit", admit(r), t0},
		{"a verdict stamped later", admitWith(reserve("acme", "k4", t0), commit(reserve("acme", "k4", t0), t0+2*sec)), t0 + 2*sec},
		{"a stamp behind does not lower it", admit(reserve("acme", "k2", t0+sec)), t0 + 2*sec},
		{"expire ahead", expire(t0 + 10*sec), t0 + 10*sec},
		{"an invalid command does not raise it", admit(Reserve{Tenant: "acme", Key: "k3", JobID: "j", Now: t0 + 99*sec}), t0 + 10*sec},
		{"reject", admitWith(reserve("acme", "k5", t0+sec), reject(reserve("acme", "k5", t0+sec), t0+11*sec, 429)), t0 + 11*sec},
		{"a business outcome counts", admit(reserve("acme", "k1", t0+12*sec)), t0 + 12*sec},
	}
	for _, s := range steps {
		h.apply(s.cmd)
		if got := h.f.LedgerTime(); got != s.want {
			t.Fatalf("%s: ledger time %d, want %d", s.name, got, s.want)
		}
	}
	// Through a snapshot and into a fresh FSM.
	if got := restore(t, persist(t, h.f)).LedgerTime(); got != t0+12*sec {
		t.Fatalf("restored ledger time %d, want %d", got, t0+12*sec)
	}
}
