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

// raiseLedgerTime raises the ledger time to cmd's Now. A batch raised it item
// by item (stampOf has none for it).
func (s *state) raiseLedgerTime(cmd Command) {
	if now, ok := stampOf(cmd); ok && now > s.ledgerTime {
		s.ledgerTime = now
	}
}

// stampOf returns a command's Now. A command type added later that carries a
// leader's time belongs here too.
func stampOf(cmd Command) (int64, bool) {
	switch c := cmd.(type) {
	case Admit:
		now := c.Reserve.Now
		switch o := c.Outcome.(type) {
		case Commit:
			now = max(now, o.Now)
		case Reject:
			now = max(now, o.Now)
		}
		return now, true
	case Expire:
		return c.Now, true
	case Lease:
		return c.Now, true
	case Heartbeat:
		return c.Now, true
	case Complete:
		return c.Now, true
	case Fail:
		return c.Now, true
	case ExpireLeases:
		return c.Now, true
	case Claim:
		return c.Now, true
	case Release:
		return c.Now, true
	case Cancel:
		return c.Now, true
	case Retry:
		return c.Now, true
	}
	return 0, false
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
