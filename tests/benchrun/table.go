package benchrun

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/once-dev/once/tests/loadgen"
)

// WriteTable prints a report: the clients' table (tests/loadgen), the
// cluster's table, the failover timeline, the targets and the machine.
func WriteTable(w io.Writer, rep Report) error {
	var results []loadgen.Result
	for _, wr := range rep.Workloads {
		results = append(results, wr.Load)
	}
	if len(results) > 0 {
		if err := loadgen.WriteTable(w, results); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tforwards\tentries/sub\tentries/key\tjobs\tleader fsync/s\tall fsync/s\tentries/fsync\tgate RSS MB\tmgr RSS MB\tCPU gates\tleader\tfollowers\tloadgen\tother\t")
	for _, wr := range rep.Workloads {
		s := wr.Cluster
		var gateRSS, mgrRSS int64
		for _, n := range s.Nodes {
			if n.Role == "gate" {
				gateRSS = max(gateRSS, n.PeakRSSBytes)
			} else {
				mgrRSS = max(mgrRSS, n.PeakRSSBytes)
			}
		}
		c := s.CPUCores
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.2f\t%d\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n",
			wr.Load.Name, s.GateCounters[gateForwards], s.EntriesPerSubmission, s.EntriesPerNewKey, s.JobsCreated, s.LeaderFsyncsPerSec, s.AllFsyncsPerSec,
			s.EntriesPerFsync, mb(gateRSS), mb(mgrRSS), c.Gates, c.Leader, c.Followers, c.Loadgen, c.Other)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  (forwards: submissions the gates sent to a manager; entries: Raft log entries per answered request / per new key;")
	fmt.Fprintln(w, "   RSS: the highest sampled of any gate / any manager; CPU in cores, of", numCPU(rep), "on the machine)")

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload	CPU µs/req: once	gates	leader	followers	loadgen	ceiling server	")
	for _, wr := range rep.Workloads {
		c := wr.Cluster.CPUPerRequest
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n", wr.Load.Name, c.Once, c.Gates, c.Leader, c.Followers, c.Loadgen, dashIfZero(c.Ceiling))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  (CPU time per answered request; once = gates + leader + followers; idle processes still count, e.g. the cluster during ceiling)")

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload	per req: gate allocs	syscalls	switches	leader allocs	syscalls	switches	followers allocs	syscalls	switches	")
	for _, wr := range rep.Workloads {
		c := wr.Cluster.CostPerRequest
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t\n", wr.Load.Name,
			c.Gates.Allocs, c.Gates.Syscalls, c.Gates.Switches, c.Leader.Allocs, c.Leader.Syscalls, c.Leader.Switches,
			c.Followers.Allocs, c.Followers.Syscalls, c.Followers.Switches)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  (per answered request, each role's processes together: heap allocations, read/write system calls, context switches of their threads)")
	for _, wr := range rep.Workloads {
		for _, p := range wr.Cluster.Problems {
			fmt.Fprintf(w, "  %s: %s\n", wr.Load.Name, p)
		}
		if f := wr.Cluster.Failover; f != nil {
			fmt.Fprintf(w, "  %s: killed %s at %.0f ms; %s serving after %.0f ms; longest gap without a 2xx %.0f ms (%.2f election timeouts of %.0f ms); %d duplicate keys; term %d -> %d\n",
				wr.Load.Name, f.Killed, f.KilledAtMS, f.NewLeader, f.NewLeaderAfterMS, f.GapMS, f.GapElections, f.ElectionTimeoutMS, f.DuplicateKeys,
				wr.Cluster.TermBefore, wr.Cluster.TermAfter)
			if f.Error != "" {
				fmt.Fprintf(w, "  %s: disruption failed: %s\n", wr.Load.Name, f.Error)
			}
		}
	}
	if rep.CeilingReqPerSec > 0 {
		fmt.Fprintf(w, "  vs the ceiling (%s: %.0f req/s against a bare net/http handler, same machine, same run):", WCeiling, rep.CeilingReqPerSec)
		for _, wr := range rep.Workloads {
			if wr.CeilingRatio > 0 {
				fmt.Fprintf(w, " %s %.3f;", wr.Load.Name, wr.CeilingRatio)
			}
		}
		fmt.Fprintln(w)
	}
	for _, wr := range rep.Workloads {
		if len(wr.Load.Timeline) > 0 {
			fmt.Fprintln(w)
			if err := loadgen.WriteTimeline(w, wr.Load); err != nil {
				return err
			}
		}
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tgoal\tmeasured\tverdict")
	for _, t := range rep.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Goal, t.Measured, t.verdict())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m := rep.Machine
	shared := "not shared (other processes < 0.1 core)"
	if m.Shared {
		shared = fmt.Sprintf("SHARED: other processes used %.2f cores on average during the workloads", m.OtherCPUCores)
	}
	fmt.Fprintf(w, "\nmachine: %d × %s, %.1f GiB, Linux %s, %s; data on %s; load average %s before, %s after; %s\n",
		m.NumCPU, m.CPUModel, float64(m.MemBytes)/(1<<30), m.Kernel, m.GoVersion, orDash(rep.Cluster.DataDirsOn),
		m.LoadBefore, m.LoadAfter, shared)
	if rep.Error != "" {
		fmt.Fprintf(w, "run stopped early: %s\n", rep.Error)
	}
	return nil
}

// gateForwards is the gate counter of forwarded submissions.
const gateForwards = "once_gate_forward_duration_seconds_count"

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func numCPU(rep Report) int {
	for _, w := range slices.Backward(rep.Workloads) {
		if n := w.Cluster.CPUCores.NumCPU; n > 0 {
			return n
		}
	}
	return rep.Machine.NumCPU
}

func dashIfZero(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
