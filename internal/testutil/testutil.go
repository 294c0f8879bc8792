// Package testutil holds helpers shared by the tests of several packages. It is
// imported by _test files only.
package testutil

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the tests, gives goroutines that memberlist and raft
// leave behind after Shutdown (a probe waiting out its ack timeout, a
// connection reader noticing its socket closed) up to 10 seconds to finish,
// then fails the run if any goroutine is left (goleak).
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(settled{m, opts}, opts...)
}

type settled struct {
	m    *testing.M
	opts []goleak.Option
}

func (s settled) Run() int {
	code := s.m.Run()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for goleak.Find(s.opts...) != nil && time.Now().Before(deadline) {
		<-tick.C
	}
	return code
}

// WaitFor polls cond every 20ms until it returns true, or fails the test after
// timeout naming what cond says it waits for.
func WaitFor(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		<-tick.C
	}
}
