package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/chaos/runner"
)

// The short form of the chaos test (make chaos is the long one): a real
// cluster of three managers and two gates takes the chaos workload through
// both gates while the nemesis runs two rounds of faults, every kind once per
// round in a seeded order — kill -9 of the leader, of a follower, of any
// process with a quick restart, of every manager at once, a SIGSTOP'd leader,
// a partitioned leader, a partitioned follower, and a leader whose clock is
// minutes off (clock-skew). Then the cluster heals and the checker reads it
// back through the public API: zero violations.
//
// CHAOS_SEED=<seed> replays a schedule. The run's directory (history.jsonl,
// summary, logs, data) is a temporary one, removed after the test, unless
// CHAOS_DIR names a directory to keep it in; its history can be checked again
// with oncechaos -recheck (docs/testing.md).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process chaos test; skipped with -short")
	}
	seed, dir := chaosSeedAndDir(t, "short")
	kinds := nemesis.AllKinds
	sum, err := runner.Run(ctxFor(t, 110*time.Second), runner.Options{
		Faults:   kinds,
		Duration: 75 * time.Second, // a cap: two rounds take about 45 s
		Rounds:   2,
		Seed:     seed,
		Clients:  6,
		BaseDir:  dir,
		BinDir:   binDir,
		Timings:  shortTimings,
		Logf:     t.Logf,
	})
	requireClean(t, sum, err, dir)
	for _, k := range kinds {
		if sum.Faults[k] == 0 {
			t.Errorf("fault %s was never injected (faults: %v)", k, sum.Faults)
		}
	}
	if sum.Workload.Committed == 0 {
		t.Error("no submission was committed")
	}
}

// TestChaosShortWorkers: workers consume the jobs while one round of every
// fault kind, clock skew included, hits the cluster; rule (i) then requires
// every job run to an end. (Before managers corrected their view for steps
// of their own clock, a skew could put ledger time minutes ahead and hold a
// lost lease that long; this test left clock skew out then. A stall now
// fails it: its context ends long before such a wait would.)
func TestChaosShortWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process chaos test; skipped with -short")
	}
	seed, dir := chaosSeedAndDir(t, "short-workers")
	sum, err := runner.Run(ctxFor(t, 4*time.Minute), runner.Options{
		Faults:   nemesis.AllKinds,
		Duration: 60 * time.Second, // a cap: one round takes about 20 s
		Rounds:   1,
		Settle:   5 * time.Second,
		Seed:     seed,
		Clients:  4,
		Workers:  1, // per tenant
		BaseDir:  dir,
		BinDir:   binDir,
		Timings:  shortTimings,
		Logf:     t.Logf,
	})
	requireClean(t, sum, err, dir)
	if sum.Workers == nil || sum.Workers.Jobs == 0 {
		t.Errorf("the workers ran no job (%+v)", sum.Workers)
	}
}

// logTails logs the end of every process's log of the run in dir.
// shortTimings are the fault timings of the short chaos runs: short holds
// and quiet times, so that a round of every kind takes about 20 s.
var shortTimings = nemesis.Timings{
	Interval:     500 * time.Millisecond,
	Downtime:     1500 * time.Millisecond,
	RestartDelay: 300 * time.Millisecond,
	Pause:        2 * time.Second, // four election timeouts of the Fast timings
	Partition:    2 * time.Second,
}

// chaosSeedAndDir is a short chaos run's seed (CHAOS_SEED, or 0: drawn) and
// directory (a temporary one, or under CHAOS_DIR, named with name, to keep).
func chaosSeedAndDir(t *testing.T, name string) (uint64, string) {
	t.Helper()
	var seed uint64
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "run")
	if keep := os.Getenv("CHAOS_DIR"); keep != "" {
		dir = filepath.Join(keep, time.Now().UTC().Format("20060102-150405")+"-"+name)
		t.Logf("the run is kept in %s", dir)
	}
	return seed, dir
}

// requireClean fails the test unless the run completed with no violation,
// logging the summary (and the processes' log tails when it did not).
func requireClean(t *testing.T, sum runner.Summary, err error, dir string) {
	t.Helper()
	t.Log("\n" + sum.String())
	if err != nil || !sum.OK() {
		logTails(t, dir)
	}
	if err != nil {
		t.Fatalf("run: %v (seed %d)", err, sum.Seed)
	}
	if n := sum.Violations(); n > 0 {
		t.Fatalf("%d violations (seed %d); the history is in %s", n, sum.Seed, dir)
	}
}

func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, runner.ClusterDir, "logs", "*.log"))
	perDC, _ := filepath.Glob(filepath.Join(dir, runner.ClusterDir, "*", "logs", "*.log")) // a MultiDC run
	for _, p := range append(logs, perDC...) {
		b, _ := os.ReadFile(p)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("---- %s tail ----\n%s", filepath.Base(p), b)
	}
}

// The short form of the multi-datacenter chaos run (make chaos
// CHAOS_ARGS=-multidc is the long one): two federated datacenters, every
// submission naming both and going through any of the four gates; dc1 takes
// one round of every fault kind while the datacenters are disconnected now
// and then, by a WAN cut (wan-cut) and by dc2's managers all SIGSTOPped
// (dc-outage) in turn. The checker then applies every rule in each
// datacenter and rule (h) across them: every admitted job is in both, with
// one id. A worker per tenant in each datacenter runs that datacenter's copy
// of every job, and rule (i) holds in each. CHAOS_SEED and CHAOS_DIR work as
// for TestChaosShort.
func TestChaosMultiDCShort(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process chaos test; skipped with -short")
	}
	seed, dir := chaosSeedAndDir(t, "multidc-short")
	sum, err := runner.Run(ctxFor(t, 5*time.Minute), runner.Options{
		MultiDC:  true,
		Duration: 60 * time.Second, // a cap: one round takes about 25 s
		Rounds:   1,
		Settle:   5 * time.Second,
		Seed:     seed,
		Clients:  6,
		Workers:  1, // per tenant and datacenter
		BaseDir:  dir,
		BinDir:   binDir,
		Timings:  shortTimings, // dc2's outages last twice its Partition
		Logf:     t.Logf,
	})
	requireClean(t, sum, err, dir)
	for _, k := range []nemesis.Kind{runner.KindWANCut, runner.KindDatacenterOutage} {
		if sum.Faults[k] == 0 {
			t.Errorf("the datacenters were never disconnected by %s (faults: %v)", k, sum.Faults)
		}
	}
	if sum.Workload.Committed == 0 {
		t.Error("no submission was committed")
	}
	if sum.Workers == nil || sum.Workers.Jobs == 0 {
		t.Errorf("the workers ran no job (%+v)", sum.Workers)
	}
}
