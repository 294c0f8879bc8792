package ledger

// Ledger time (docs/ledger.md, "Ledger time"): the FSM records the highest Now
// of the commands it has applied, so a leader can keep its stamps from running
// backwards across leader changes and restarts. It is state like any other:
// derived from the log only, kept in the snapshot.

// applyTimed is apply, then raises the ledger time to the command's Now when
// the command was applied (not OutcomeInvalid: an invalid command changes
// nothing but the applied index).
func (s *state) applyTimed(ax *applyCtx, cmd Command, decodeErr error) Result {
	res := s.apply(ax, cmd, decodeErr)
	if res.Outcome != OutcomeInvalid {
		s.raiseLedgerTime(cmd)
	}
	return res
}

// stamped is a command that carries a leader's time: stamp is its Now. Every
// command type that carries one implements it (a type added later too); a
// batch does not, its items raise the ledger time one by one.
type stamped interface{ stamp() int64 }

// raiseLedgerTime raises the ledger time to cmd's Now.
func (s *state) raiseLedgerTime(cmd Command) {
	if c, ok := cmd.(stamped); ok && c.stamp() > s.ledgerTime {
		s.ledgerTime = c.stamp()
	}
}

// LedgerTime returns the highest Now (unix nanoseconds) of any command applied
// so far, 0 for an empty log. A leader never stamps a command below it, so
// ledger time does not run backwards when leadership moves to a manager whose
// clock is behind. O(1).
func (f *FSM) LedgerTime() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.ledgerTime
}
