package autopilot

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(settled{m})
}

// settled runs the tests, then gives goroutines that memberlist and raft
// leave behind after Shutdown (a probe waiting out its ack timeout, a
// connection reader noticing its socket closed) a few seconds to finish
// before goleak looks.
type settled struct{ m *testing.M }

func (s settled) Run() int {
	code := s.m.Run()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for goleak.Find() != nil && time.Now().Before(deadline) {
		<-tick.C
	}
	return code
}
