package benchrun

import (
	"fmt"
	"strings"
)

// The targets (docs/benchmarks.md).
const (
	TargetUniqueRate     = 34000 // req/s
	TargetUniqueP99MS    = 50
	TargetCachedRate     = 70000 // req/s
	TargetCachedP99MS    = 5
	TargetStormEntries   = 2 // one submission without unique-c1 to measure it: Reserve + Commit
	TargetStormSlackMS   = 5 // "one commit latency plus a few ms"
	TargetGapElections   = 2 // failover gap in election timeouts
	TargetDuplicatesJobs = 0
)

// Target is one of the targets against what this run measured.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Workload string `json:"workload,omitempty"`
	Measured string `json:"measured"`
	// Met is nil when the workloads that measure the target did not run.
	Met *bool `json:"met"`
}

func (t Target) verdict() string {
	switch {
	case t.Met == nil:
		return "not run"
	case *t.Met:
		return "MET"
	default:
		return "MISSED"
	}
}

func find(rep Report, name string) *WorkloadResult {
	for i := range rep.Workloads {
		if rep.Workloads[i].Load.Name == name {
			return &rep.Workloads[i]
		}
	}
	return nil
}

// okRate is a run's rate of 2xx answers.
func okRate(w *WorkloadResult) float64 {
	if w.Load.DurationSec <= 0 {
		return 0
	}
	return float64(w.Load.OK()) / w.Load.DurationSec
}

// Evaluate checks the report's workloads against the targets.
func Evaluate(rep Report) []Target {
	var out []Target
	met := func(b bool) *bool { return &b }

	// Unique keys: the best 2xx rate among the unique runs whose p99 is within
	// the bound; failing that, the best rate and its p99.
	t := Target{Name: "unique keys", Goal: fmt.Sprintf("≥ %d req/s at p99 ≤ %d ms", TargetUniqueRate, TargetUniqueP99MS), Measured: "-"}
	var best, bestAny *WorkloadResult
	for i := range rep.Workloads {
		w := &rep.Workloads[i]
		if !isUnique(w.Load.Name) {
			continue
		}
		if bestAny == nil || okRate(w) > okRate(bestAny) {
			bestAny = w
		}
		if ms(w.Load.Latency.P99US) <= TargetUniqueP99MS && (best == nil || okRate(w) > okRate(best)) {
			best = w
		}
	}
	if best == nil {
		best = bestAny
	}
	if best != nil {
		p99 := ms(best.Load.Latency.P99US)
		t.Workload = best.Load.Name
		t.Measured = fmt.Sprintf("%.0f req/s at p99 %.1f ms", okRate(best), p99)
		if bestAny != best {
			t.Measured += fmt.Sprintf(" (best rate: %.0f req/s at p99 %.1f ms, %s)", okRate(bestAny), ms(bestAny.Load.Latency.P99US), bestAny.Load.Name)
		}
		t.Met = met(okRate(best) >= TargetUniqueRate && p99 <= TargetUniqueP99MS)
	}
	out = append(out, t)

	// Duplicates from the gate cache.
	t = Target{Name: "duplicates from the gate cache", Goal: fmt.Sprintf("≥ %d req/s at p99 ≤ %d ms", TargetCachedRate, TargetCachedP99MS), Measured: "-"}
	if w := find(rep, WCacheHits); w != nil {
		p99 := ms(w.Load.Latency.P99US)
		t.Workload = w.Load.Name
		t.Measured = fmt.Sprintf("%.0f req/s at p99 %.2f ms", okRate(w), p99)
		t.Met = met(okRate(w) >= TargetCachedRate && p99 <= TargetCachedP99MS)
	}
	out = append(out, t)

	// The storm: one submission's Raft entries (however many one new key costs
	// in unique-c1: 2 with Reserve + Commit), one job, and every answer within
	// one submission's latency (unique-c1's p50) plus a few ms.
	t = Target{Name: "storm on one key", Goal: fmt.Sprintf("the Raft entries of one submission, one job, all answered within one commit latency + %d ms", TargetStormSlackMS), Measured: "-"}
	if w := find(rep, WStorm); w != nil {
		t.Workload = w.Load.Name
		perKey, basis := uint64(TargetStormEntries), "Reserve + Commit"
		ref := find(rep, WUniqueC1)
		if ref != nil && ref.Cluster.EntriesPerNewKey > 0 {
			perKey, basis = uint64(ref.Cluster.EntriesPerNewKey+0.5), "unique-c1's entries per key"
		}
		ok := w.Cluster.RaftEntries <= perKey && w.Load.OK() == w.Load.Requests && w.Load.MaxJobIDsPerKey == 1
		var parts []string
		parts = append(parts, fmt.Sprintf("%d Raft entries (one submission: %d, %s), %d/%d 2xx, %d job id(s), max %.1f ms",
			w.Cluster.RaftEntries, perKey, basis, w.Load.OK(), w.Load.Requests, w.Load.MaxJobIDsPerKey, ms(w.Load.Latency.MaxUS)))
		if ref != nil && ref.Load.Latency.Count > 0 {
			bound := ms(ref.Load.Latency.P50US) + TargetStormSlackMS
			parts = append(parts, fmt.Sprintf("bound %.1f ms (unique-c1 p50 %.1f + %d)", bound, ms(ref.Load.Latency.P50US), TargetStormSlackMS))
			ok = ok && ms(w.Load.Latency.MaxUS) <= bound
		} else {
			parts = append(parts, "latency bound unknown: unique-c1 did not run")
		}
		t.Measured = strings.Join(parts, "; ")
		t.Met = met(ok)
	}
	out = append(out, t)

	// Failover.
	t = Target{Name: "leader failover", Goal: fmt.Sprintf("gap ≤ %d election timeouts, %d duplicate jobs", TargetGapElections, TargetDuplicatesJobs), Measured: "-"}
	if w := find(rep, WFailover); w != nil && w.Cluster.Failover != nil {
		f := w.Cluster.Failover
		t.Workload = w.Load.Name
		t.Measured = fmt.Sprintf("gap %.0f ms = %.2f × %.0f ms, %d duplicate keys, %d jobs for %d keys, new leader after %.0f ms",
			f.GapMS, f.GapElections, f.ElectionTimeoutMS, f.DuplicateKeys, w.Cluster.JobsCreated, w.Load.Keys, f.NewLeaderAfterMS)
		if f.Error != "" {
			t.Measured += " (" + f.Error + ")"
		}
		// Server side: more jobs than keys sent is a duplicate the clients
		// could not see (both answers lost, say).
		t.Met = met(f.Error == "" && f.GapElections <= TargetGapElections && f.DuplicateKeys == TargetDuplicatesJobs &&
			w.Cluster.JobsCreated <= w.Load.Keys)
	}
	out = append(out, t)
	return out
}
