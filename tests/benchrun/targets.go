package benchrun

import (
	"fmt"
	"strings"
)

// The speed targets (docs/benchmarks.md). Throughputs are ratios to the
// ceiling workload of the same run, so that they hold on any machine; CPU
// figures are per answered request.
const (
	TargetUniqueRatio       = 0.30 // unique-c64 req/s over the ceiling's
	TargetUniqueP99MS       = 50
	TargetCacheRatio        = 0.90 // cache-hits req/s over the ceiling's
	TargetGateCPUPerHit     = 1.5  // gate CPU per hit over the ceiling server's CPU per request
	TargetDuplicatesRatio   = 0.6
	TargetStormSlackMS      = 10 // one commit latency (unique-c1 p50) + this
	TargetGapElections      = 2  // failover gap in election timeouts
	TargetDuplicatesJobs    = 0
	TargetCPUPerUniqueUS    = 120 // all once processes together, per unique submission
	TargetLoadgenOverServer = 1.0 // load generator CPU per request over the ceiling server's
)

// Target is one target against what this run measured.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Workload string `json:"workload,omitempty"`
	// Value is the measured figure the verdict compares with Bound (a ratio,
	// microseconds, milliseconds or a count, as Unit says); Measured is the
	// figure in words with what it was derived from.
	Value    float64 `json:"value"`
	Bound    float64 `json:"bound"`
	Unit     string  `json:"unit"`
	Measured string  `json:"measured"`
	// Met is nil when the workloads that measure the target did not run.
	Met     *bool  `json:"met"`
	Verdict string `json:"verdict"` // "met", "missed" or "not run"
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
	met := func(b bool) *bool { return &b }
	ceil := find(rep, WCeiling)
	ceilRate := 0.0
	if ceil != nil {
		ceilRate = okRate(ceil)
	}
	// ratio is a workload's 2xx rate over the ceiling's; ok is false when
	// either did not run.
	ratio := func(w *WorkloadResult) (float64, bool) {
		if w == nil || ceilRate <= 0 {
			return 0, false
		}
		return okRate(w) / ceilRate, true
	}
	rateText := func(w *WorkloadResult, r float64) string {
		return fmt.Sprintf("%.3f × (%.0f of %.0f req/s)", r, okRate(w), ceilRate)
	}
	var out []Target

	// Unique keys at 64 clients.
	t := Target{Name: "unique keys, 64 clients", Unit: "× ceiling", Bound: TargetUniqueRatio, Measured: "-",
		Goal: fmt.Sprintf("≥ %.2f × ceiling req/s at p99 ≤ %d ms", TargetUniqueRatio, TargetUniqueP99MS)}
	if w := find(rep, WUniqueC64); w != nil {
		t.Workload = w.Load.Name
		if r, ok := ratio(w); ok {
			p99 := ms(w.Load.Latency.P99US)
			t.Value = round(r, 3)
			t.Measured = rateText(w, r) + fmt.Sprintf(" at p99 %.1f ms", p99)
			t.Met = met(r >= TargetUniqueRatio && p99 <= TargetUniqueP99MS && w.Load.OK() == w.Load.Requests)
		}
	}
	out = append(out, t)

	// Cache hits: the rate, and the gate's CPU per hit against the ceiling
	// server's CPU per request (same load generator, same kind of answer).
	t = Target{Name: "cache hits, 64 clients", Unit: "× ceiling", Bound: TargetCacheRatio, Measured: "-",
		Goal: fmt.Sprintf("≥ %.2f × ceiling req/s, and gate CPU per hit ≤ %.1f × the ceiling server's per request", TargetCacheRatio, TargetGateCPUPerHit)}
	if w := find(rep, WCacheHits); w != nil {
		t.Workload = w.Load.Name
		if r, ok := ratio(w); ok {
			t.Value = round(r, 3)
			gate, server := w.Cluster.CPUPerRequest.Gates, ceil.Cluster.CPUPerRequest.Ceiling
			t.Measured = rateText(w, r)
			ok := r >= TargetCacheRatio
			if server > 0 {
				t.Measured += fmt.Sprintf("; gate CPU %.1f µs per hit = %.2f × the ceiling server's %.1f µs", gate, gate/server, server)
				ok = ok && gate <= TargetGateCPUPerHit*server
			} else {
				t.Measured += "; the ceiling server's CPU was not measured"
				ok = false
			}
			t.Met = met(ok)
		}
	}
	out = append(out, t)

	// Duplicates.
	t = Target{Name: "90 % duplicates, both gates", Unit: "× ceiling", Bound: TargetDuplicatesRatio, Measured: "-",
		Goal: fmt.Sprintf("≥ %.2f × ceiling req/s", TargetDuplicatesRatio)}
	if w := find(rep, WDuplicates); w != nil {
		t.Workload = w.Load.Name
		if r, ok := ratio(w); ok {
			t.Value = round(r, 3)
			t.Measured = rateText(w, r)
			t.Met = met(r >= TargetDuplicatesRatio && w.Load.OK() == w.Load.Requests)
		}
	}
	out = append(out, t)

	// The storm: the Raft entries of one submission (however many one new
	// key costs in unique-c1), one job, and every answer within one commit
	// latency (unique-c1's p50) plus the slack.
	t = Target{Name: "storm of 1000 on one key", Unit: "ms", Measured: "-",
		Goal: fmt.Sprintf("one submission's Raft entries, one job, every answer within one commit latency + %d ms", TargetStormSlackMS)}
	if w := find(rep, WStorm); w != nil {
		t.Workload = w.Load.Name
		ref := find(rep, WUniqueC1)
		if ref != nil && ref.Load.Latency.Count > 0 && ref.Cluster.EntriesPerNewKey > 0 {
			perKey := uint64(ref.Cluster.EntriesPerNewKey + 0.5)
			t.Bound = ms(ref.Load.Latency.P50US) + TargetStormSlackMS
			t.Value = ms(w.Load.Latency.MaxUS)
			t.Measured = fmt.Sprintf("%d Raft entries (one submission: %d), %d/%d 2xx, %d job id(s), slowest answer %.1f ms (bound: unique-c1 p50 %.1f + %d ms)",
				w.Cluster.RaftEntries, perKey, w.Load.OK(), w.Load.Requests, w.Load.MaxJobIDsPerKey, t.Value, ms(ref.Load.Latency.P50US), TargetStormSlackMS)
			t.Met = met(w.Cluster.RaftEntries <= perKey && w.Load.OK() == w.Load.Requests && w.Load.MaxJobIDsPerKey == 1 && t.Value <= t.Bound)
		} else {
			t.Measured = "commit latency unknown: unique-c1 did not run"
		}
	}
	out = append(out, t)

	// Failover.
	t = Target{Name: "leader failover", Unit: "election timeouts", Bound: TargetGapElections, Measured: "-",
		Goal: fmt.Sprintf("gap ≤ %d election timeouts, %d duplicate jobs", TargetGapElections, TargetDuplicatesJobs)}
	if w := find(rep, WFailover); w != nil && w.Cluster.Failover != nil {
		f := w.Cluster.Failover
		t.Workload = w.Load.Name
		t.Value = f.GapElections
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

	// CPU per unique submission, once's processes together.
	t = Target{Name: "CPU per unique submission", Unit: "µs", Bound: TargetCPUPerUniqueUS, Measured: "-",
		Goal: fmt.Sprintf("≤ %d µs, gates and managers together (unique-c64)", TargetCPUPerUniqueUS)}
	if w := find(rep, WUniqueC64); w != nil && w.Cluster.CPUPerRequest.Once > 0 {
		c := w.Cluster.CPUPerRequest
		t.Workload, t.Value = w.Load.Name, c.Once
		t.Measured = fmt.Sprintf("%.0f µs (gates %.0f, leader %.0f, followers %.0f)", c.Once, c.Gates, c.Leader, c.Followers)
		if w512 := find(rep, WUniqueC512); w512 != nil && w512.Cluster.CPUPerRequest.Once > 0 {
			t.Measured += fmt.Sprintf("; unique-c512: %.0f µs", w512.Cluster.CPUPerRequest.Once)
		}
		t.Met = met(c.Once <= TargetCPUPerUniqueUS)
	}
	out = append(out, t)

	// The load generator must not be the expensive side of the ceiling.
	t = Target{Name: "load generator CPU", Unit: "× ceiling server", Bound: TargetLoadgenOverServer, Measured: "-",
		Goal: "CPU per request ≤ the ceiling server's (as wrk manages)"}
	if ceil != nil && ceil.Cluster.CPUPerRequest.Ceiling > 0 {
		c := ceil.Cluster.CPUPerRequest
		t.Workload, t.Value = ceil.Load.Name, round(c.Loadgen/c.Ceiling, 2)
		t.Measured = fmt.Sprintf("%.1f µs per request = %.2f × the ceiling server's %.1f µs", c.Loadgen, t.Value, c.Ceiling)
		t.Met = met(t.Value <= TargetLoadgenOverServer)
	}
	out = append(out, t)

	for i := range out {
		out[i].Verdict = strings.ToLower(out[i].verdict())
	}
	return out
}
