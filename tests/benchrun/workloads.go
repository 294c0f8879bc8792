package benchrun

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/once-dev/once/tests/loadgen"
)

// Workload names (the -workloads flag).
const (
	WCeiling    = "ceiling"
	WUniqueC1   = "unique-c1"
	WUniqueC64  = "unique-c64"
	WUniqueC512 = "unique-c512"
	WDuplicates = "duplicates"
	WCacheHits  = "cache-hits"
	WStorm      = "storm"
	WFailover   = "failover"
	WWorkers    = "workers"
)

// DefaultWorkloads is the `make bench` set, in the order they run. ceiling
// comes first: the same load generator against a bare net/http handler, the
// measure the others are given as a ratio to. failover comes last: it
// derives its rate from the unique runs before it, and it leaves one manager
// freshly restarted.
var DefaultWorkloads = []string{WCeiling, WUniqueC1, WUniqueC64, WUniqueC512, WDuplicates, WCacheHits, WStorm, WWorkers, WFailover}

// fallbackFailoverRate is the failover rate when no unique workload ran
// before it and none was given.
const fallbackFailoverRate = 1000

// workloadSpec returns the load spec of a named workload (without gates).
// rate is the failover's open-loop rate.
func workloadSpec(name string, o Options, rate float64) (loadgen.Spec, error) {
	d := loadgen.Duration(o.Duration)
	unique := func(c int) loadgen.Spec {
		return loadgen.Spec{Name: name, Keys: loadgen.KeysUnique, Concurrency: c, Duration: d, Warmup: true,
			Description: fmt.Sprintf("closed loop, %d workers, every request a new key, spread over the gates round robin: the full path (gate, one Raft commit shared by a batch of submissions, answer)", c)}
	}
	switch name {
	case WCeiling:
		return loadgen.Spec{Name: name, Keys: loadgen.KeysUnique, Concurrency: 64, Duration: d, Warmup: true,
			Description: "closed loop, 64 workers, new keys, against a bare net/http handler in a process of its own " +
				"that answers 201 with a fixed ~300-byte job body: the ceiling of the load generator and loopback HTTP on this machine"}, nil
	case WUniqueC1:
		return unique(1), nil
	case WUniqueC64:
		return unique(64), nil
	case WUniqueC512:
		return unique(512), nil
	case WDuplicates:
		return loadgen.Spec{Name: name, Keys: loadgen.KeysDuplicates, DuplicateRatio: 0.9, RecentKeys: 128,
			Concurrency: 64, Duration: d, Warmup: true, Spread: loadgen.SpreadRoundRobin,
			Description: "closed loop, 64 workers, 90% of requests repeat one of the worker's last 128 keys (identical body), " +
				"each worker alternating between the gates: a repeat may reach the gate that has not seen the key"}, nil
	case WCacheHits:
		return loadgen.Spec{Name: name, Keys: loadgen.KeysDuplicates, DuplicateRatio: 1, RecentKeys: 1,
			Concurrency: 64, Duration: d, Warmup: true, Spread: loadgen.SpreadPerWorker,
			Description: "closed loop, 64 workers, each sends one new key then repeats it, pinned to one gate: " +
				"every request after the first is answered from the gate's cache"}, nil
	case WStorm:
		n := o.StormSize
		return loadgen.Spec{Name: name, Keys: loadgen.KeysStorm, Concurrency: n, Requests: int64(n), Warmup: true,
			Description: fmt.Sprintf("%d connections opened first (half per gate), then one request each, all with one key, released together", n)}, nil
	case WWorkers:
		return loadgen.Spec{Name: name, Keys: loadgen.KeysUnique, Concurrency: workerProducers, Duration: d,
			Description: fmt.Sprintf("jobs end to end: %d producers submit new jobs for the duration while %d workers lease them "+
				"(long poll, %d at a time) and complete each lease's jobs in one request (POST /v1/completions); until every job submitted is completed. req/s is completed jobs/s, "+
				"latency from submission to the completion's answer", workerProducers, workerWorkers, workerBatch)}, nil
	case WFailover:
		fd := o.FailoverDuration
		return loadgen.Spec{Name: name, Keys: loadgen.KeysUnique, Rate: rate, Duration: loadgen.Duration(fd),
			Concurrency: 1024, MaxOutstanding: max(int(rate*fd.Seconds()), 1024), Warmup: true, Timeline: true,
			Disrupt: loadgen.DisruptKillLeader, DisruptAt: loadgen.Duration(fd / 2),
			Description: "open loop at half the best unique rate of this run, new keys; the manager leader is killed (SIGKILL) halfway"}, nil
	}
	return loadgen.Spec{}, fmt.Errorf("unknown workload %q (have %s)", name, strings.Join(DefaultWorkloads, ", "))
}

// checkWorkloads validates a list of workload names.
func checkWorkloads(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("no workload selected (have %s)", strings.Join(DefaultWorkloads, ", "))
	}
	for _, n := range names {
		if !slices.Contains(DefaultWorkloads, n) {
			return fmt.Errorf("unknown workload %q (have %s)", n, strings.Join(DefaultWorkloads, ", "))
		}
	}
	return nil
}

// isUnique reports whether a workload is one of the unique-key closed loops.
func isUnique(name string) bool { return strings.HasPrefix(name, "unique-") }

// failoverRate is the failover workload's rate: the given one, or half the
// best unique rate measured so far.
func failoverRate(given float64, done []WorkloadResult) (rate float64, basis string) {
	if given > 0 {
		return given, "given with -failover-rate"
	}
	best, from := 0.0, ""
	for _, w := range done {
		if isUnique(w.Load.Name) && w.Load.OK() > 0 {
			r := float64(w.Load.OK()) / w.Load.DurationSec
			if r > best {
				best, from = r, w.Load.Name
			}
		}
	}
	if best == 0 {
		return fallbackFailoverRate, "no unique workload ran before: fixed fallback"
	}
	rate = float64(int(best / 2))
	return max(rate, 1), fmt.Sprintf("half of %s's %.0f 2xx/s", from, best)
}

// electionTimeout is the managers' Raft election timeout under these options.
func electionTimeout(o Options) time.Duration {
	for _, env := range [][]string{o.ManagerEnv, o.Env} {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], "MANAGER_RAFT_ELECTION_TIMEOUT="); ok {
				if d, err := time.ParseDuration(v); err == nil {
					return d
				}
			}
		}
	}
	if o.Fast {
		return 500 * time.Millisecond // localcluster's Fast timings
	}
	return time.Second // the manager's default
}
