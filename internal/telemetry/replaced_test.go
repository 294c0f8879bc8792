//go:build hashicorpmetrics

package telemetry

import (
	"testing"

	compat "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// Two daemons in one process (a gate and a manager in a test), each with its
// registry: the second Start replaces the first's sink, and the first's stop
// (it shuts down first) must leave the second's in place rather than put
// the discarding sink back, which would silence raft's and memberlist's
// series on the daemon still running.
func TestStopOfAReplacedSinkKeepsTheCurrentOne(t *testing.T) {
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	stop1, err := Start(reg1)
	if err != nil {
		t.Fatal(err)
	}
	stop2, err := Start(reg2)
	if err != nil {
		stop1()
		t.Fatal(err)
	}
	defer stop2()
	stop1()
	compat.IncrCounter([]string{"raft", "state", "candidate"}, 1)
	if c := families(t, reg2)["raft_state_candidate"]; c == nil || c.Metric[0].GetCounter().GetValue() != 1 {
		t.Fatalf("after the replaced sink stopped, the current one got raft_state_candidate = %v, want 1", c)
	}
	if got := families(t, reg1); len(got) != 0 {
		t.Fatalf("the stopped sink's registry still collects %d families", len(got))
	}
}
