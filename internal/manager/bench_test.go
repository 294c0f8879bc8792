package manager

import (
	"strconv"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// BenchmarkSubmit is the leader's path of a unique submission: Submit of a
// new key, called directly on the leader of an in-process cluster, through
// its Admit's Raft commit to the answer. No RPC: the gate's side and the
// stream have their own benchmarks (internal/gate, internal/rpc). The
// allocations counted are the process's: with one manager, the leader's
// alone, and exact run to run; with three, the followers' too (replication,
// and heartbeats that vary with the run's length).
func BenchmarkSubmit(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("managers="+strconv.Itoa(n), func(b *testing.B) { benchmarkSubmit(b, n) })
	}
}

func benchmarkSubmit(b *testing.B, n int) {
	// Timeouts longer than the tests': an election in the middle would
	// fail the run on a loaded machine.
	tc := newKnobbedCluster(b, n, func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 2*time.Second
	}, TestingKnobs{})
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(b)
	payload := []byte(`{"invoice":"inv-1","amount_cents":1299}`)
	dcs := []string{"dc1"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := &rpcpb.SubmitRequest{Tenant: "default", Key: "bench-" + strconv.Itoa(i), Fingerprint: "fp", WaitMillis: 1000,
			Job: &rpcpb.JobRequest{Type: "invoice", Payload: payload, Datacenters: dcs}}
		r, err := m.Submit(ctx, req)
		if err != nil || r.Outcome != rpc.OutcomeCommitted || r.Replayed {
			b.Fatalf("submit %d: %+v %v", i, r, err)
		}
	}
}
