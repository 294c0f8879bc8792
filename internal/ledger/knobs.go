package ledger

// TestingKnobs take parts of the disk store's work away, to measure what the
// rest costs (CockroachDB's TestingKnobs pattern: passed in StoreOptions,
// read from there, zero in production). BenchmarkApplyAdmitBounds
// sets them and TestBenchKnobs checks them (docs/benchmarks.md, "What would
// close the gap, and how close pebble can come"). A store opened with any of
// them set does not hold a ledger that could be opened again or replicated:
// it is a measuring instrument.
type TestingKnobs struct {
	// OrdersInMemory keeps every secondary order (expiry,
	// sequence, type, the lifecycle's) in the memory state's B-trees, so
	// pebble holds only the entries, the jobs and the watermarks.
	OrdersInMemory bool
	// KeepRemoved writes no tombstone for an entry or a job the state
	// removes (the key counts still answer "absent" for it).
	KeepRemoved bool
	// NoWrites commits only the counters to pebble: the state's writes are
	// kept aside in the batch, as always, then dropped.
	NoWrites bool
}

// ordersInMemory gives s the memory state's secondary orders (TestingKnobs.OrdersInMemory).
func (s *state) ordersInMemory() {
	m := newState()
	s.entryExp, s.multiDC = m.entryExp, m.multiDC
	s.jobSeq, s.jobType, s.jobExp = m.jobSeq, m.jobType, m.jobExp
	s.jobQueue, s.jobQueueType, s.jobRunning, s.jobState = m.jobQueue, m.jobQueueType, m.jobRunning, m.jobState
}
