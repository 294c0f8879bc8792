package ledger

import "github.com/once-dev/once/internal/ledger/engine"

// TestingKnobs are for tests and benchmarks only, passed in StoreOptions:
// the engine's (engine.TestingKnobs), OrdersInMemory and KeepRemoved read by
// the typed layer.
type TestingKnobs = engine.TestingKnobs

// ordersInMemory gives s the memory state's secondary orders (TestingKnobs.OrdersInMemory).
func (s *state) ordersInMemory() {
	m := newState()
	s.entryExp, s.multiDC = m.entryExp, m.multiDC
	s.jobSeq, s.jobType, s.jobExp = m.jobSeq, m.jobType, m.jobExp
	s.jobQueue, s.jobQueueType, s.jobRunning, s.jobState = m.jobQueue, m.jobQueueType, m.jobRunning, m.jobState
}
