//go:build hashicorpmetrics

package telemetry

import (
	"testing"
	"time"

	compat "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// families gathers reg by metric name.
func families(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// TestStartExportsWhatRaftEmits emits through go-metrics' compat package, the
// way hashicorp/raft and memberlist do, and reads the series from the
// registry; after stop they are no longer collected.
func TestStartExportsWhatRaftEmits(t *testing.T) {
	reg := prometheus.NewRegistry()
	stop, err := Start(reg)
	if err != nil {
		t.Fatal(err)
	}
	compat.IncrCounter([]string{"raft", "state", "leader"}, 1)
	compat.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	compat.SetGauge([]string{"memberlist", "health", "score"}, 2)

	got := families(t, reg)
	leader := got["raft_state_leader"]
	if leader == nil || leader.GetType() != dto.MetricType_COUNTER || leader.Metric[0].GetCounter().GetValue() != 1 {
		t.Fatalf("raft_state_leader = %v, want a counter at 1", leader)
	}
	commit := got["raft_commitTime"]
	if commit == nil || commit.GetType() != dto.MetricType_SUMMARY || commit.Metric[0].GetSummary().GetSampleCount() != 1 {
		t.Fatalf("raft_commitTime = %v, want a summary with one sample", commit)
	}
	if ms := commit.Metric[0].GetSummary().GetSampleSum(); ms < 3 {
		t.Fatalf("raft_commitTime sum = %v, want milliseconds (>= 3)", ms)
	}
	if score := got["memberlist_health_score"]; score == nil || score.Metric[0].GetGauge().GetValue() != 2 {
		t.Fatalf("memberlist_health_score = %v, want 2", score)
	}

	stop()
	compat.IncrCounter([]string{"raft", "state", "follower"}, 1)
	if got := families(t, reg); len(got) != 0 {
		t.Fatalf("after stop the registry still collects %d families", len(got))
	}
}

// TestStartTwice: a second sink on the same registry is refused (the first
// stays in place); after the first stops, a new one may start.
func TestStartTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	stop, err := Start(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(reg); err == nil {
		t.Fatal("a second sink on one registry was accepted")
	}
	stop()
	stop2, err := Start(reg)
	if err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	stop2()
}
