package ledger

// benchKnobs take parts of the disk store's work away, to measure what the
// rest costs: BenchmarkApplyReserveCommitBounds sets them, and
// TestBenchKnobs checks them; nothing else does, through useBenchKnobs
// (docs/benchmarks.md, "What would close the gap, and how close pebble can
// come"). A store opened with any of them set does not hold a ledger that
// could be opened again or replicated: it is a measuring instrument.
// useStore reads ordersInMemory once; the others are read at every write.
var benchKnobs struct {
	// ordersInMemory keeps every secondary order (expiry, pending age,
	// sequence, type, the lifecycle's) in the memory state's B-trees, so
	// pebble holds only the entries, the jobs and the watermarks.
	ordersInMemory bool
	// keepRemoved writes no tombstone for an entry or a job the state
	// removes (the key counts still answer "absent" for it).
	keepRemoved bool
	// noWrites commits only the counters to pebble: the state's writes are
	// kept aside in the batch, as always, then dropped.
	noWrites bool
}

// ordersInMemory gives s the memory state's secondary orders (benchKnobs).
func (s *state) ordersInMemory() {
	m := newState()
	s.entryExp, s.pendAge, s.multiDC = m.entryExp, m.pendAge, m.multiDC
	s.jobSeq, s.jobType, s.jobExp = m.jobSeq, m.jobType, m.jobExp
	s.jobQueue, s.jobQueueType, s.jobTenantLease, s.jobLeaseExp, s.jobState = m.jobQueue, m.jobQueueType, m.jobTenantLease, m.jobLeaseExp, m.jobState
}
