package ledger

// TestingKnobs are for tests and benchmarks only (CockroachDB's
// TestingKnobs pattern: passed in StoreOptions, zero in production).
// KeyScanStarts holds the store at a chosen point. The others take parts of
// the disk store's work away, to measure what the rest costs:
// BenchmarkApplyAdmitBounds sets them and TestBenchKnobs checks them
// (docs/benchmarks.md); a store opened with any of those set does not hold
// a ledger that could be opened again or replicated: it is a measuring
// instrument.
type TestingKnobs struct {
	// KeyScanStarts and NoWrites are the storage engine's
	// (engine.TestingKnobs): the background scan of the key counts calls
	// KeyScanStarts as it starts, and may be held there; NoWrites commits
	// only the counters to pebble, the state's writes dropped.
	KeyScanStarts func()
	NoWrites      bool
	// OrdersInMemory keeps every secondary order (expiry, sequence, type,
	// the lifecycle's) in the memory state's B-trees, so pebble holds only
	// the entries, the jobs and the watermarks.
	OrdersInMemory bool
	// KeepRemoved writes no tombstone for an entry or a job the state
	// removes (the key counts still answer "absent" for it).
	KeepRemoved bool
}

// ordersInMemory gives s the memory state's secondary orders (TestingKnobs.OrdersInMemory).
func (s *state) ordersInMemory() {
	m := newState()
	s.entryExp, s.multiDC = m.entryExp, m.multiDC
	s.jobSeq, s.jobType, s.jobExp = m.jobSeq, m.jobType, m.jobExp
	s.jobQueue, s.jobQueueType, s.jobRunning, s.jobState = m.jobQueue, m.jobQueueType, m.jobRunning, m.jobState
}
