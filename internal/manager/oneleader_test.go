package manager

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// maxLeaderAttempts bounds how often measureAtOneLeader takes a measurement
// again: each retry follows an election during the measurement, and on a
// machine that loaded a test could not show its property at all.
const maxLeaderAttempts = 10

// measureAtOneLeader runs measure at the serving leader l of tc, attempt
// numbering the tries from 0 (for fresh keys), until one measurement ran
// with one leader throughout: the same manager leading, in the same term,
// before and after it. A measurement during which leadership moved (an
// election on a loaded machine makes not_leader answers legitimate and
// entry counts incomparable) is discarded, whatever it returned, and taken
// again at the leader of the moment. An error from a measurement under one
// leader fails the test, as does a leader that never held through one.
func measureAtOneLeader(t *testing.T, tc *testCluster, measure func(attempt, l int) error) {
	t.Helper()
	for attempt := range maxLeaderAttempts {
		l := tc.leader()
		r := tc.mgrs[l].Raft()
		term := r.CurrentTerm()
		if r.State() != raft.Leader {
			continue // it stepped down between the two reads
		}
		err := measure(attempt, l)
		if r.CurrentTerm() != term || r.State() != raft.Leader {
			t.Logf("attempt %d: leadership moved from %s (term %d) during the measurement; again (%v)",
				attempt, tc.cfgs[l].NodeID, term, err)
			continue
		}
		if err != nil {
			t.Fatalf("attempt %d at %s (term %d, one leader throughout): %v", attempt, tc.cfgs[l].NodeID, term, err)
		}
		return
	}
	t.Fatalf("no measurement in %d attempts ran under one leader", maxLeaderAttempts)
}

// stableLeaderTimings lengthens a test cluster's Raft timings for tests that
// measure at one leader: a leader then rarely loses its lease on a loaded
// machine, so measureAtOneLeader seldom needs a second attempt.
func stableLeaderTimings(c *Config) {
	c.HeartbeatTimeout = 2 * time.Second
	c.ElectionTimeout = 2 * time.Second
	c.LeaderLeaseTimeout = time.Second
}
