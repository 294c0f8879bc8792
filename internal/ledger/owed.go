package ledger

// The outbox's owed entries (docs/multidc.md, "The outbox"). A resolved entry
// whose request names other datacenters stays in the multiDC order until each
// of them has confirmed it (Confirm). When such an entry expires first (a
// datacenter unreachable for longer than the entry's TTL), its expiry removes
// it from the entries as always (its key may be reserved again) and keeps a
// copy in the owed table, by (tenant, key, job_id), until the last of those
// datacenters confirms it: the leader's outbox goes on carrying it, across
// leader changes and restarts, since the table is replicated state (written
// by the Expire, or the Admit or Claim whose relief removed the
// entry as due, cleared by Confirm, all stamped by the leader; in snapshots; on disk the 'o' range,
// mirrored in memory like the watermarks). An owed entry is not charged to
// the byte budgets (its entry's bytes are released at expiry, as always, so a
// tenant's budget does not depend on another datacenter's availability): the
// manager bounds the entries being carried by count instead
// (MANAGER_OUTBOX_MAX_ENTRIES, FSM.OutboxLen), so this table never grows
// past what was being carried when its entries expired.

// insertOwed keeps e, an expiring entry still carried, in the owed table,
// which a disk state mirrors in memory: a copy of e whose strings are its own,
// not parts of the record e was read from (decoder's share).
func (s *state) insertOwed(e *Entry) {
	if _, replaced := s.owed.ReplaceOrInsert(decodeEntry(&decoder{b: appendEntry(nil, e), base: ErrStore})); !replaced {
		s.owedLive += b2i(s.liveCarried(e))
	}
}

// deleteOwed removes e from the owed table.
func (s *state) deleteOwed(e *Entry) {
	s.owed.Delete(e)
	s.owedLive -= b2i(s.liveCarried(e))
}

// hasOwed reports whether an owed entry of e's job (tenant, key, job_id) is
// kept.
func (s *state) hasOwed(e *Entry) bool {
	return s.owed.Has(&Entry{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID})
}

// liveCarried reports whether the live entry of o's key is of o's job and
// carried: o, owed, is then counted once with it (owedLive).
func (s *state) liveCarried(o *Entry) bool {
	e, ok := s.getEntry(o.Tenant, o.Key)
	return ok && e.JobID == o.JobID && carried(e)
}

// countOwedLive derives owedLive from the tables (a store opened).
// O(owed entries).
func (s *state) countOwedLive() {
	s.owedLive = 0
	s.owed.Ascend(func(o *Entry) bool {
		s.owedLive += b2i(s.liveCarried(o))
		return true
	})
}

// owe keeps e, an expiring entry still carried, owed. An owed copy of the
// same job already there (its key sent again after its entry expired, the
// same job ID) is replaced by e, keeping the datacenters either confirmed
// (their sorted union: a confirmation is of the job, not of one copy); when
// that leaves none to carry it to, nothing is owed. e was admitted with the
// owed copy's Confirmed and both were confirmed alike since (newEntry,
// confirmBoth), so the union is e's own list, but for a pair kept in a state
// written before the Admit copied it, whose live entry may lack what only
// the owed copy recorded.
func (s *state) owe(e *Entry) {
	if old, ok := s.owed.Get(&Entry{Tenant: e.Tenant, Key: e.Key, JobID: e.JobID}); ok {
		m := *e
		m.Confirmed = unionConfirmed(e.Request.Datacenters, e.Confirmed, old.Confirmed)
		if !carried(&m) {
			s.deleteOwed(old)
			return
		}
		e = &m
	}
	s.insertOwed(e)
}

// confirmOwed is Confirm's item for an owed entry; ok false when none is owed
// under (tenant, key, job_id).
func (s *state) confirmOwed(it Confirmation) (res Result, ok bool) {
	old, ok := s.owed.Get(&Entry{Tenant: it.Tenant, Key: it.Key, JobID: it.JobID})
	if !ok {
		return res, false
	}
	e, res := confirmed(old, it)
	switch {
	case e == nil:
	case carried(e):
		s.owed.ReplaceOrInsert(e) // same key: the write replaces old
	default:
		s.deleteOwed(old)
	}
	return res, true
}

// OwedMultiDatacenter calls fn with every owed entry (expired before every
// other datacenter it names confirmed it), in (tenant, key, job_id) order,
// until fn returns false. Like ResolvedMultiDatacenter, it reads copies under
// the read lock: fn must not call back into the FSM.
func (f *FSM) OwedMultiDatacenter(fn func(Entry) bool) {
	eachCopy(f, func(s *state) index[*Entry] { return s.owed }, func(*Entry) bool { return true }, fn)
}

// OutboxLen is how many jobs the outbox carries: the resolved entries
// naming another datacenter that has not confirmed them, live or owed, a
// job with both a live and an owed entry (its key sent again after its
// entry expired) counted once: the outbox carries it once.
func (f *FSM) OutboxLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.multiDCLen + f.s.owed.Len() - f.s.owedLive
}

// OwedLen is how many of them are owed (expired before every datacenter
// confirmed them).
func (f *FSM) OwedLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.owed.Len()
}

// Owed returns the owed entry of (tenant, key, job_id), if any. O(log n).
func (f *FSM) Owed(tenant, key, jobID string) (Entry, bool) {
	return lookup(f, func(s *state) index[*Entry] { return s.owed }, &Entry{Tenant: tenant, Key: key, JobID: jobID})
}
